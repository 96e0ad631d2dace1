"""Reads of scheduling data, scoped to the user asking (node reads: ``scheduling.nodes.selectors``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db import connection
from django.db.models import Count, Q, QuerySet, Sum

from core.roles import line_ids_query, role_of
from quotas.models import Queue
from scheduling.models import Allocation, Job, Node
from scheduling.permissions import sees_all_jobs, submits_to_any_queue


def list_jobs_for_user(user) -> QuerySet[Job]:
    """Admins and on-call see every job; others see the jobs of their lines' queues."""
    qs = Job.objects.select_related("queue", "queue__business_line", "owner")
    if sees_all_jobs(user):
        return qs
    if role_of(user) is None:
        return qs.none()
    return qs.filter(Q(owner=user) | Q(queue__business_line_id__in=line_ids_query(user)))


def get_job_for_user(user, job_id: int) -> Job | None:
    return list_jobs_for_user(user).filter(pk=job_id).first()


def list_queues_for_submit(user) -> QuerySet[Queue]:
    """Queues the user may submit to: admins any, others their lines' queues."""
    qs = Queue.objects.select_related("business_line").order_by("business_line__name", "name")
    if submits_to_any_queue(user):
        return qs
    return qs.filter(business_line__memberships__user=user)  # one membership per line


def cluster_shape() -> tuple[int, int]:
    """``(GPUs of the largest node, GPUs in all)``: one aggregate, read on every submission."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT max(gpus_total), sum(gpus_total) FROM {Node._meta.db_table}")
        largest, total = cursor.fetchone()
    return largest or 0, total or 0


def build_placement(job: Job) -> list[dict]:
    """``[{node, gpus: [indices]}]`` of a job, from its allocations.

    A pending job holds no GPUs (the loop frees them when it requeues one), so it costs
    no query.
    """
    if job.state == Job.State.PENDING:
        return []
    by_node: dict[str, list[int]] = defaultdict(list)
    for node_name, index in job.allocations.values_list("node__name", "gpu_index"):
        by_node[node_name].append(index)
    return [{"node": name, "gpus": sorted(idx)} for name, idx in sorted(by_node.items())]


@dataclass(frozen=True)
class QueueUsage:
    used_gpus: int = 0
    borrowed_gpus: int = 0
    running_jobs: int = 0
    pending_jobs: int = 0
    pending_gpus: int = 0


def build_queue_usage() -> dict[int, QueueUsage]:
    """Usage per queue id, in two grouped queries."""
    running = Q(state__in=[Job.State.RUNNING, Job.State.PREEMPTING])
    rows = (
        Job.objects.filter(state__in=Job.ACTIVE_STATES)
        .values("queue_id")
        .annotate(
            used=Sum("gpus", filter=running),
            borrowed=Sum("gpus", filter=running & Q(borrowed=True)),
            running_jobs=Count("id", filter=running),
            pending_jobs=Count("id", filter=Q(state=Job.State.PENDING)),
            pending_gpus=Sum("gpus", filter=Q(state=Job.State.PENDING)),
        )
    )
    return {
        r["queue_id"]: QueueUsage(
            used_gpus=r["used"] or 0,
            borrowed_gpus=r["borrowed"] or 0,
            running_jobs=r["running_jobs"],
            pending_jobs=r["pending_jobs"],
            pending_gpus=r["pending_gpus"] or 0,
        )
        for r in rows
    }


def build_line_usage() -> dict[int, QueueUsage]:
    """Usage per business line id (sum of its queues)."""
    per_queue = build_queue_usage()
    line_of = dict(Queue.objects.values_list("id", "business_line_id"))
    totals: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for queue_id, usage in per_queue.items():
        agg = totals[line_of[queue_id]]
        for field in ("used_gpus", "borrowed_gpus", "running_jobs", "pending_jobs", "pending_gpus"):
            agg[field] += getattr(usage, field)
    return {line_id: QueueUsage(**agg) for line_id, agg in totals.items()}


@dataclass(frozen=True)
class ClusterSummary:
    nodes_total: int
    nodes_by_state: dict[str, int]
    gpus_total: int
    gpus_healthy: int
    gpus_allocated: int
    gpus_residual: int


def build_cluster_summary() -> ClusterSummary:
    """Cluster at a glance: nodes by state, GPUs total/healthy/allocated."""
    by_state = dict(Node.objects.values("state").annotate(n=Count("id")).values_list("state", "n"))
    totals = Node.objects.aggregate(
        total=Sum("gpus_total"),
        healthy=Sum("gpus_total", filter=Q(state=Node.State.READY, health=Node.Health.OK)),
        residual=Sum("residual_gpus"),
    )
    return ClusterSummary(
        nodes_total=sum(by_state.values()),
        nodes_by_state=by_state,
        gpus_total=totals["total"] or 0,
        gpus_healthy=totals["healthy"] or 0,
        gpus_allocated=Allocation.objects.count(),
        gpus_residual=totals["residual"] or 0,
    )
