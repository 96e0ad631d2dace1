"""The health sweep: isolate sick nodes and raise alerts for residual processes (R6, R7).

It reads what the last observation stored on each node (``health``,
``residual_gpus``); the backend-facing part (killing residual processes,
requeueing jobs) runs inside the scheduling loop, which owns the backend.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from monitoring.models import Alert
from monitoring.services import raise_alert
from portal import audit
from portal.realtime import publish_on_commit
from scheduling.models import Node


@dataclass(frozen=True)
class SweepResult:
    isolated: list[str]
    residual_nodes: list[str]


def run_health_sweep() -> SweepResult:
    """Cordon ready nodes that report bad health; alert on residual GPU memory."""
    isolated: list[str] = []
    with transaction.atomic():
        sick = (
            Node.objects.select_for_update(skip_locked=True)
            .filter(state=Node.State.READY)
            .exclude(health=Node.Health.OK)
        )
        for node in sick:
            before = {"state": node.state}
            node.state = Node.State.UNHEALTHY
            node.state_reason = (
                f"isolated by health sweep: {node.health} {node.health_detail}".strip()
            )
            node.save(update_fields=["state", "state_reason", "updated_at"])
            audit.record(None, "node.isolate", node, reason=node.state_reason, before=before,
                         after={"state": node.state})  # fmt: skip
            raise_alert(
                Alert.Kind.NODE_UNHEALTHY, Alert.Severity.CRITICAL, node.name,
                f"{node.name} reports {node.health}; isolated automatically. {node.health_detail}",
            )  # fmt: skip
            publish_on_commit("nodes", "node.updated", {"name": node.name, "state": node.state})
            isolated.append(node.name)
    residual = list(Node.objects.filter(residual_gpus__gt=0).values_list("name", "residual_gpus"))
    for name, gpus in residual:
        raise_alert(
            Alert.Kind.RESIDUAL_PROCESS, Alert.Severity.WARNING, name,
            f"{gpus} GPU(s) on {name} are held by processes of finished jobs",
        )  # fmt: skip
    return SweepResult(isolated=isolated, residual_nodes=[n for n, _ in residual])
