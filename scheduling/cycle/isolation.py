"""Isolation of sick nodes (R7) and the residual-process sweep (R6).

Both act on a ``Node`` row in memory: the caller (``reconcile.sync_nodes``) writes the
nodes it changed in one statement and publishes their ``node.updated`` events. Both
raise their alert through ``scheduling.alerts`` (the monitoring app keeps it), inside the
cycle's transaction, so the alert commits or rolls back with the cycle.
"""

from __future__ import annotations

from core import audit
from scheduling import alerts
from scheduling.alerts import raise_alert
from scheduling.backends.base import HEALTH_LABELS
from scheduling.cycle.context import Cycle
from scheduling.engine import explain
from scheduling.models import Node


def isolate(cycle: Cycle, node: Node, why: str) -> None:
    """R7: a sick node leaves the pool at once; its jobs move (from checkpoint).

    Side effects: the node is cordoned on the backend, an audit record
    ``node.isolate`` and a critical ``node_unhealthy`` alert are written.
    """
    before = {"state": node.state}
    node.state = Node.State.UNHEALTHY
    node.state_reason = f"isolated automatically: {why}"
    cycle.call(f"cordon {node.name}", cycle.backend.cordon, node.name, node.state_reason)
    audit.record(None, "node.isolate", node, reason=node.state_reason, before=before,
                 after={"state": node.state})  # fmt: skip
    raise_alert(
        alerts.NODE_UNHEALTHY, alerts.CRITICAL, node.name,
        f"{node.name}: {HEALTH_LABELS.get(node.health, node.health)} ({why}); isolated, its "
        "jobs move elsewhere from their last checkpoint.",
    )  # fmt: skip
    cycle.report.counts["isolated"] += 1


def residual_cleaned_message(node: str, gpus: int) -> str:
    """The ``residual_process`` alert's words, agreeing with the count of GPUs."""
    return (
        f"{explain.count(gpus, 'GPU')} on {node} {explain.verb(gpus, 'was', 'were')} held by "
        "processes of finished jobs; they were killed and "
        f"{explain.verb(gpus, 'the GPU', 'the GPUs')} returned to the pool."
    )


def clean_residual(cycle: Cycle, node: Node, gpus: int) -> None:
    """R6: stale processes hold GPU memory: kill them and give the GPUs back.

    Only when the backend confirms the clean-up is the node's ``residual_gpus`` reset and
    the ``residual_process`` warning raised; a failed call is retried next cycle.
    """
    if cycle.call(f"clean {node.name}", cycle.backend.clean_residual, node.name):
        node.residual_gpus = 0
        raise_alert(
            alerts.RESIDUAL_PROCESS, alerts.WARNING, node.name,
            residual_cleaned_message(node.name, gpus),
        )  # fmt: skip
        cycle.report.counts["residual_cleaned"] += gpus
