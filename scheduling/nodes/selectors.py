"""Reads of nodes for the pages, the API and the rollup: a handful of grouped queries each.

A node's free GPUs are its total less those allocated to jobs, those held by residual
processes and those serving online inference on a shared node (``Node.inference_gpus``, as
of the last applied plan; never below zero: a node can briefly report more held than it
has while the loop catches up). ``usable`` nodes are ready and healthy: the only ones the scheduler
places work on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, QuerySet

from core.models import AuditRecord
from scheduling.clock import to_datetime
from scheduling.engine.inference_forecast import (
    DAY_S,
    hourly_peaks,
    knows_whole_day,
    learning_since,
)
from scheduling.models import Allocation, Job, MaintenanceWindow, Node

# The columns of ``list_node_rows``, in order (monitoring.charts.NodeRow takes them so).
NODE_ROW_FIELDS = ("name", "rack", "state", "health", "gpus_total", "residual_gpus",
                   "gpus_allocated", "inference_gpus")  # fmt: skip


def free_gpus(
    gpus_total: int, gpus_allocated: int, residual_gpus: int, inference_gpus: int = 0
) -> int:
    """GPUs of a node no job, no residual process and no online inference holds."""
    return max(0, gpus_total - gpus_allocated - residual_gpus - inference_gpus)


def list_nodes_with_usage() -> QuerySet[Node]:
    """Nodes annotated with ``gpus_allocated`` (see ``free_gpus``)."""
    return Node.objects.annotate(gpus_allocated=Count("allocations"))


def list_usable_free_gpus() -> list[int]:
    """Free GPUs of each ready, healthy node (what placement may use now), one query."""
    usable = list_nodes_with_usage().filter(state=Node.State.READY, health=Node.Health.OK)
    return [
        free_gpus(*row)
        for row in usable.values_list(
            "gpus_total", "gpus_allocated", "residual_gpus", "inference_gpus"
        )
    ]


def list_node_rows(name: str | None = None) -> list[tuple]:
    """Every node (or the one named) as ``NODE_ROW_FIELDS`` tuples, in rack order."""
    nodes = list_nodes_with_usage()
    if name is not None:
        nodes = nodes.filter(name=name)
    return list(nodes.order_by("rack", "name").values_list(*NODE_ROW_FIELDS))


def get_node(name: str) -> Node | None:
    """The node named so, or None."""
    return Node.objects.filter(name=name).first()


def node_exists(name: str) -> bool:
    return Node.objects.filter(name=name).exists()


def list_node_jobs(node: Node) -> list[dict]:
    """The jobs holding GPUs of the node, by id, with ``gpus_here`` (their GPUs on it)."""
    return list(
        Allocation.objects.filter(node=node)
        .values("job_id", "job__name", "job__owner__username", "job__queue__name",
                "job__tier", "job__state", "job__gpus", "job__started_at")
        .annotate(gpus_here=Count("id"))
        .order_by("job_id")
    )  # fmt: skip


@dataclass(frozen=True)
class InferenceForecast:
    """What the portal has learnt of a shared node's online inference (#19,
    ``scheduling.engine.inference_forecast``): ``peaks``, the GPUs inference was seen to
    hold in each UTC hour (today's or yesterday's peak; empty: nothing learnt yet);
    ``since``, when the unbroken observation began; ``learnt``, whether it has seen every
    hour of the day (at ``whole_day_at``), so training is limited by the forecast and,
    with ``shared_nodes_first``, sent here first."""

    peaks: tuple[int, ...]
    since: datetime | None
    learnt: bool

    @property
    def whole_day_at(self) -> datetime | None:
        """When the forecast has seen (or will have seen) every hour of the day."""
        return self.since + timedelta(seconds=DAY_S) if self.since is not None else None

    def spans(self, offset_minutes: int = 0) -> list[tuple[str, str, int]]:
        """``peaks`` as runs of equal hours, written in a zone ``offset_minutes`` east of UTC
        and listed from that zone's midnight: ``("02:00", "04:00", 6)`` for UTC's 17:00-19:00
        in Tokyo. A run ending at the zone's midnight ends at ``"24:00"``."""
        n = len(self.peaks)
        local = [(h * 60 + offset_minutes) % 1440 for h in range(n + 1)]
        first = min(range(n), key=local.__getitem__) if n else 0
        hours = [(first + i) % n for i in range(n)]
        out: list[tuple[str, str, int]] = []
        start = 0
        for i in range(1, n + 1):
            if i == n or self.peaks[hours[i]] != self.peaks[hours[start]]:
                end = local[hours[i - 1] + 1]
                out.append((_hhmm(local[hours[start]]), _hhmm(end or 1440),
                            self.peaks[hours[start]]))  # fmt: skip
                start = i
        return out


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def get_inference_forecast(node: Node, now: float) -> InferenceForecast | None:
    """The forecast of ``node`` at cluster time ``now`` (epoch seconds); None for a node
    that does not serve inference."""
    if not node.inference:
        return None
    profile = node.inference_profile
    return InferenceForecast(
        peaks=hourly_peaks(profile),
        since=to_datetime(learning_since(profile)),
        learnt=knows_whole_day(profile, now),
    )


def list_node_history(node: Node, limit: int) -> QuerySet[AuditRecord]:
    """The node's latest audit records (who cordoned, drained, injected… and why)."""
    return AuditRecord.objects.filter(
        target_type="scheduling.node", target_id=str(node.pk)
    ).order_by("-at", "-id")[:limit]


def upcoming_maintenance() -> dict[str, tuple[datetime, str]]:
    """Per node, the earliest start of its scheduled (not yet started) maintenance and that
    window's reason: the snapshot's ``NodeView.unavailable_from`` and
    ``maintenance_reason`` (one query)."""
    rows = MaintenanceWindow.nodes.through.objects.filter(
        maintenancewindow__state=MaintenanceWindow.State.SCHEDULED
    ).values_list("node__name", "maintenancewindow__starts_at", "maintenancewindow__reason")
    starts: dict[str, tuple[datetime, str]] = {}
    for name, at, reason in rows:
        if name not in starts or at < starts[name][0]:
            starts[name] = (at, reason)
    return starts


def maintenance_windows(
    node: str | None = None, state: str | None = None, open_only: bool = False
) -> QuerySet[MaintenanceWindow]:
    """Maintenance windows, soonest first, with their nodes (of ``node`` only; in ``state``;
    ``open_only``: scheduled or active). Everyone signed in may read them."""
    rows = MaintenanceWindow.objects.select_related("created_by").prefetch_related("nodes")
    if node is not None:
        rows = rows.filter(nodes__name=node)
    if state:
        rows = rows.filter(state=state)
    if open_only:
        rows = rows.filter(
            state__in=[MaintenanceWindow.State.SCHEDULED, MaintenanceWindow.State.ACTIVE]
        )
    return rows.order_by("starts_at", "pk")


def build_blast_radius(name: str) -> dict:
    """What isolating this node hits: its active jobs and their queues.

    ``{"node", "jobs": [{id, name, queue, owner, gpus}] by id, "queues": [names]}``.
    """
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
