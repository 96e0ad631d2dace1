"""On-call node actions that report alerts: "clean residual processes now" (R6).

Lives on the monitoring side because it answers with the ``residual_process`` alert the
sweep raised, and scheduling does not import monitoring (pyproject's layers). The node
writers proper are ``scheduling.nodes.services``.

Why it runs the sweep inline rather than enqueueing ``monitoring.tasks.health_sweep``:
the node page says whether residual processes were found and killed on this node
(docs/guide-oncall.md), and the audit record keeps the sweep's id and the alert; both
need the sweep's result before the response.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from core import audit
from monitoring.models import Alert
from scheduling.models import Node, SchedulingCycle
from scheduling.nodes.services import clean_reason, ensure_may_operate, unknown_node

# How long the button waits for the loop to let go of the cluster (else ClusterBusy).
SWEEP_WAIT_S = 10.0


def clean_residual_now(user: Any, name: str, reason: Any,
                       source_ip: str | None = None) -> tuple[Node, SchedulingCycle, Alert | None]:  # fmt: skip
    """Clean residual processes now: run a health sweep at once.

    The loop already kills residual processes on every cycle and sweep; this only does
    it now instead of within 30 s. The sweep observes and reconciles the whole cluster
    (it plans nothing), under the cluster lock (waits up to ``SWEEP_WAIT_S``, else
    ``ClusterBusy``), in one transaction with the audit record ``node.clean_residual``
    (residual GPUs before and after, the sweep's id, the alert's id). Returns the node,
    the sweep's record, and the residual-process alert the sweep raised (or bumped) for
    this node, None when it found nothing to kill there.
    """
    from scheduling.cycle import run_cycle

    ensure_may_operate(user)
    reason = clean_reason(reason)
    with transaction.atomic():
        node = Node.objects.filter(name=name).first()
        if node is None:
            raise unknown_node(name)
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
