"""REST: ``GET /api/v1/metrics/summary/``, the cluster at a glance for scripts.

Live numbers (GPUs, utilization of healthy GPUs, pending jobs by reason) are read now;
the eviction ratio (R4: evicted over delivered GPU-seconds in the window
``eviction_window_seconds`` of cluster time, the quota policy's) is the one the metrics
rollup computed in its latest sample (``monitoring.rollup``, once a minute), the same
figure the queues API, the pages and ``/metrics`` report; ``null`` while the window
holds no data yet.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from monitoring.rollup import get_eviction_figures
from quotas.models import Queue
from scheduling.clock import cluster_now
from scheduling.models import Job
from scheduling.selectors import build_cluster_summary

# pending jobs no cycle has explained yet (submitted since the last cycle)
UNEXPLAINED = "NEW"


def build_pending_by_reason() -> dict[str, int]:
    """Pending jobs per pending-reason code, live (``NEW``: not yet seen by a cycle)."""
    rows = (
        Job.objects.filter(state=Job.State.PENDING)
        .values("pending_code")
        .annotate(n=Count("id"))
        .values_list("pending_code", "n")
    )
    return {code or UNEXPLAINED: n for code, n in rows}


def build_metrics_summary(now: datetime | None = None) -> dict:
    """GPUs, utilization, why jobs wait, and the latest eviction ratios per queue name."""
    cluster = build_cluster_summary()
    eviction = get_eviction_figures()
    names = Queue.objects.order_by("name").values_list("id", "name")
    return {
        "cluster_time": now or cluster_now(),
        "gpus_total": cluster.gpus_total,
        "gpus_allocated": cluster.gpus_allocated,
        "gpus_allocated_healthy": cluster.gpus_allocated_healthy,
        "gpus_healthy": cluster.gpus_healthy,
        "gpus_residual": cluster.gpus_residual,
        "gpus_inference_healthy": cluster.gpus_inference_healthy,
        "utilization": cluster.utilization,
        "nodes_by_state": cluster.nodes_by_state,
        "pending_by_reason": build_pending_by_reason(),
        "eviction_window_seconds": eviction.window_s,
        "eviction_window": eviction.window_label,
        "eviction_sampled_at": eviction.sampled_at,
        "eviction_ratio_by_queue": {name: eviction.ratio(qid) for qid, name in names},
        "migrations_by_queue": {name: eviction.migrations(qid) for qid, name in names},
    }


class MetricsSummarySerializer(serializers.Serializer):
    cluster_time = serializers.DateTimeField()
    gpus_total = serializers.IntegerField()
    gpus_allocated = serializers.IntegerField(help_text="GPUs allocated to jobs, on any node")
    gpus_allocated_healthy = serializers.IntegerField(
        help_text="GPUs allocated to jobs on healthy nodes"
    )
    gpus_healthy = serializers.IntegerField(help_text="GPUs of ready nodes whose health is ok")
    gpus_residual = serializers.IntegerField(help_text="GPUs held by stale processes")
    gpus_inference_healthy = serializers.IntegerField(
        help_text="GPUs serving online inference on healthy shared nodes (in use, by no job)"
    )
    utilization = serializers.FloatField(
        help_text="utilization of healthy GPUs: GPUs in use by jobs or by online inference "
        "over healthy GPUs, (gpus_allocated_healthy + gpus_inference_healthy) / gpus_healthy, "
        "0..1"
    )
    nodes_by_state = serializers.DictField(child=serializers.IntegerField())
    pending_by_reason = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="pending jobs per reason code; NEW: submitted since the last cycle",
    )
    eviction_window_seconds = serializers.IntegerField(
        help_text="the window of every eviction ratio, in seconds of cluster time"
    )
    eviction_window = serializers.CharField(help_text='the window in words, e.g. "last 72 h"')
    eviction_sampled_at = serializers.DateTimeField(
        allow_null=True, help_text="cluster time of the rollup sample the ratios come from"
    )
    eviction_ratio_by_queue = serializers.DictField(
        child=serializers.FloatField(allow_null=True),
        help_text="per queue name: evicted over delivered GPU-seconds in the window, 0..1; "
        "null while the window holds no data yet",
    )
    migrations_by_queue = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="per queue name: jobs moved by consolidation in the same window (checkpoint, "
        "then restart elsewhere to make room for a gang); not evictions, not in the ratio",
    )


class MetricsSummaryView(GenericAPIView):
    """Utilization, GPUs, why jobs wait and eviction ratios (everyone signed in may read)."""

    serializer_class = MetricsSummarySerializer
    pagination_class = None
    filter_backends: list = []

    @extend_schema(responses={200: MetricsSummarySerializer})
    def get(self, request: Request) -> Response:
        return Response(MetricsSummarySerializer(build_metrics_summary()).data)
