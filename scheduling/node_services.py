"""On-call node actions: cordon, drain, uncordon (V5). Intent in the DB; the loop tells the backend.

Each action checks the role, refuses no-op or invalid transitions with a clear
error, writes an audit record (before/after, reason, source IP) and publishes
``node.updated`` after commit. The next cycle pushes it to the backend within
seconds; drain asks the node's jobs to checkpoint and move.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core import audit, events
from core.realtime import publish_on_commit
from core.roles import is_oncall_or_admin
from monitoring.models import Alert
from scheduling.models import Allocation, Job, Node, SchedulingCycle

REASON_MAX = 300


def _clean_reason(reason: Any) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise ValidationError(
            {"reason": ["say why (it is shown to users and kept in the audit log)"]}
        )
    if len(reason) > REASON_MAX:
        raise ValidationError({"reason": [f"at most {REASON_MAX} characters"]})
    return reason.strip()


def _change(user: Any, name: str, action: str, new_state: str, reason: str, source_ip: str | None,
            allowed_from: tuple[str, ...]) -> Node:  # fmt: skip
    if not is_oncall_or_admin(user):
        raise PermissionDenied("on-call engineers and admins only")
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(name=name).first()
        if node is None:
            raise ValidationError({"node": [f"unknown node {name[:80]!r}"]})
        if node.state not in allowed_from:
            raise ValidationError({"state": [f"{node.name} is {node.state}; cannot {action} it"]})
        before = {"state": node.state, "state_reason": node.state_reason}
        node.state = new_state
        node.state_reason = reason
        node.uncordon_requested = new_state == Node.State.READY
        node.save(update_fields=["state", "state_reason", "uncordon_requested", "updated_at"])
        audit.record(user, f"node.{action}", node, reason=reason, before=before,
                     after={"state": node.state}, source_ip=source_ip)  # fmt: skip
        publish_on_commit(*events.node_updated(node.name, node.state, reason))
    return node


def cordon_node(user: Any, name: str, reason: Any, source_ip: str | None = None) -> Node:
    """No new work lands on the node; running jobs stay."""
    return _change(user, name, "cordon", Node.State.CORDONED, _clean_reason(reason), source_ip,
                   (Node.State.READY,))  # fmt: skip


def drain_node(user: Any, name: str, reason: Any, source_ip: str | None = None) -> Node:
    """Cordon, and move the node's jobs off gracefully (checkpoint, then requeue)."""
    return _change(user, name, "drain", Node.State.DRAINING, _clean_reason(reason), source_ip,
                   (Node.State.READY, Node.State.CORDONED))  # fmt: skip


def uncordon_node(user: Any, name: str, reason: Any, source_ip: str | None = None) -> Node:
    """Return the node to the pool (on the simulator this also repairs it)."""
    return _change(user, name, "uncordon", Node.State.READY, _clean_reason(reason), source_ip,
                   (Node.State.CORDONED, Node.State.DRAINING, Node.State.UNHEALTHY,
                    Node.State.DOWN))  # fmt: skip


def build_blast_radius(name: str) -> dict:
    """What isolating this node hits: its running jobs and their queues."""
    rows = (
        Allocation.objects.filter(node__name=name, job__state__in=Job.ACTIVE_STATES)
        .values("job_id", "job__name", "job__queue__name", "job__owner__username", "job__gpus")
        .distinct()
    )
    jobs = {r["job_id"]: r for r in rows}
    return {
        "node": name,
        "jobs": [
            {
                "id": j,
                "name": r["job__name"],
                "queue": r["job__queue__name"],
                "owner": r["job__owner__username"],
                "gpus": r["job__gpus"],
            }  # fmt: skip
            for j, r in sorted(jobs.items())
        ],
        "queues": sorted({r["job__queue__name"] for r in jobs.values()}),
    }


SWEEP_WAIT_S = 10.0


def clean_residual_now(user: Any, name: str, reason: Any,
                           source_ip: str | None = None) -> tuple[Node, SchedulingCycle, Alert | None]:  # fmt: skip
    """Clean residual processes now: run a health sweep at once (R6).

    The loop already kills residual processes on every cycle and sweep; this only
    does it now instead of within 30 s. The sweep observes and reconciles the whole
    cluster (it plans nothing), under the cluster lock (waits up to 10 s, else
    ``ClusterBusy``), in one transaction with the audit record ``node.clean_residual``.
    Returns the node, the sweep's record, and the residual-process alert the sweep
    raised (or bumped) for this node, None when it found nothing to kill there.
    """
    from scheduling.cycle import run_cycle

    if not is_oncall_or_admin(user):
        raise PermissionDenied("on-call engineers and admins only")
    reason = _clean_reason(reason)
    with transaction.atomic():
        node = Node.objects.filter(name=name).first()
        if node is None:
            raise ValidationError({"node": [f"unknown node {name[:80]!r}"]})
        residual_before = node.residual_gpus
        mine = Alert.objects.filter(kind=Alert.Kind.RESIDUAL_PROCESS, subject=name)
        counts_before = dict(mine.values_list("id", "count"))
        record = run_cycle(kind="sweep", wait_s=SWEEP_WAIT_S)
        node.refresh_from_db()
        raised = next((a for a in mine if counts_before.get(a.pk) != a.count), None)
        audit.record(user, "node.clean_residual", node, reason=reason,
                     before={"residual_gpus": residual_before},
                     after={"residual_gpus": node.residual_gpus, "sweep": record.pk,
                            "alert": raised.pk if raised else None},
                     source_ip=source_ip)  # fmt: skip
    return node, record, raised
