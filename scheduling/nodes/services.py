"""On-call node writers (V5): cordon, drain, uncordon, and fault drills on the simulator.

Intent lives in the database; the loop tells the backend. Each writer checks
``scheduling.permissions.may_operate_nodes`` (``PermissionDenied`` otherwise), refuses
an unknown node, a no-op or an invalid transition with a ``ValidationError`` naming the
field, and writes one audit record (before/after, reason, source IP). State changes
publish ``node.updated`` after commit; the next cycle pushes them to the backend within
seconds, and drain asks the node's jobs to checkpoint and move.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core import audit, events
from core.realtime import publish_on_commit
from scheduling.backends.base import BackendError
from scheduling.cluster_lock import wait_cluster_lock
from scheduling.models import Node
from scheduling.nodes.faults import FAULT_KINDS
from scheduling.permissions import OPERATORS_ONLY, may_operate_nodes

REASON_MAX = 300
# How long a fault drill or a maintenance window's creation or cancellation waits for the
# loop to let go of the cluster (else ClusterBusy).
LOCK_WAIT_S = 20.0


def ensure_may_operate(user: Any) -> None:
    """Raise ``PermissionDenied`` unless the user may act on nodes."""
    if not may_operate_nodes(user):
        raise PermissionDenied(OPERATORS_ONLY)


def clean_reason(reason: Any) -> str:
    """The stripped reason, or a ``ValidationError`` on ``reason`` (missing or too long)."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValidationError(
            {"reason": ["say why (it is shown to users and kept in the audit log)"]}
        )
    if len(reason) > REASON_MAX:
        raise ValidationError({"reason": [f"at most {REASON_MAX} characters"]})
    return reason.strip()


def unknown_node(name: Any) -> ValidationError:
    return ValidationError({"node": [f"unknown node {str(name)[:80]!r}"]})


def set_node_state(actor: Any, node: Node, action: str, new_state: str, reason: str,
                   source_ip: str | None = None) -> None:  # fmt: skip
    """Write a node's new state (``node`` locked by the caller, in its transaction), with one
    audit record and the ``node.updated`` event: the on-call actions below, and the loop
    draining and returning nodes for scheduled maintenance (``actor`` None: the system,
    ``scheduling.nodes.maintenance``)."""
    before = {"state": node.state, "state_reason": node.state_reason}
    node.state = new_state
    node.state_reason = reason
    node.uncordon_requested = new_state == Node.State.READY
    node.save(update_fields=["state", "state_reason", "uncordon_requested", "updated_at"])
    audit.record(actor, f"node.{action}", node, reason=reason, before=before,
                 after={"state": node.state}, source_ip=source_ip)  # fmt: skip
    publish_on_commit(*events.node_updated(node.name, node.state, reason))


def _change(user: Any, name: str, action: str, new_state: str, reason: Any, source_ip: str | None,
            allowed_from: tuple[str, ...]) -> Node:  # fmt: skip
    reason = clean_reason(reason)
    ensure_may_operate(user)
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(name=name).first()
        if node is None:
            raise unknown_node(name)
        if node.state not in allowed_from:
            raise ValidationError({"state": [f"{node.name} is {node.state}; cannot {action} it"]})
        set_node_state(user, node, action, new_state, reason, source_ip)
    return node


# The states a drain applies to (an on-call drain, and the start of a maintenance window).
DRAINABLE = (Node.State.READY, Node.State.CORDONED)


def cordon_node(user: Any, name: str, reason: Any, source_ip: str | None = None) -> Node:
    """No new work lands on the node; running jobs stay."""
    return _change(user, name, "cordon", Node.State.CORDONED, reason, source_ip,
                   (Node.State.READY,))  # fmt: skip


def drain_node(user: Any, name: str, reason: Any, source_ip: str | None = None) -> Node:
    """Cordon, and move the node's jobs off gracefully (checkpoint, then requeue)."""
    return _change(user, name, "drain", Node.State.DRAINING, reason, source_ip, DRAINABLE)


def uncordon_node(user: Any, name: str, reason: Any, source_ip: str | None = None) -> Node:
    """Return the node to the pool (on the simulator this also repairs it)."""
    return _change(user, name, "uncordon", Node.State.READY, reason, source_ip,
                   (Node.State.CORDONED, Node.State.DRAINING, Node.State.UNHEALTHY,
                    Node.State.DOWN))  # fmt: skip


def inject_fault(user: Any, kind: Any, node: Any, source_ip: str | None = None) -> dict:
    """Break a simulated node on purpose (on-call drills); the next cycle or sweep reacts.

    Simulator backend only. Waits up to ``LOCK_WAIT_S`` for the cluster lock (else
    ``ClusterBusy``), changes the simulator's saved state and writes the audit record
    ``simulator.fault`` in one transaction. A fault the simulator refuses (a residual
    process on a node with no idle GPU, RDMA on a node without it) is a
    ``ValidationError`` on ``node``. Returns ``{"kind", "node"}``.
    """
    from scheduling.backend_factory import open_simulator

    ensure_may_operate(user)
    if settings.SCHEDULING_BACKEND != "simulator":
        raise ValidationError({"backend": ["only available with the simulator backend"]})
    if kind not in FAULT_KINDS:
        raise ValidationError({"kind": [f"one of {', '.join(FAULT_KINDS)}"]})
    if not isinstance(node, str) or not Node.objects.filter(name=node).exists():
        raise unknown_node(node)
    with transaction.atomic():
        wait_cluster_lock(LOCK_WAIT_S)
        backend = open_simulator()
        try:
            backend.inject_fault(kind, node)
        except BackendError as err:
            raise ValidationError({"node": [str(err)]}) from err
        backend.close()
        audit.record(user, "simulator.fault", Node.objects.get(name=node), reason=kind,
                     after={"fault": kind}, source_ip=source_ip)  # fmt: skip
    return {"kind": kind, "node": node}
