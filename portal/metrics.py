"""Prometheus text exposition at ``/metrics`` (admins, or the ``METRICS_TOKEN`` bearer).

Every scrape reads the database through the same selectors as the REST API
(``scheduling.selectors``, ``monitoring.metrics_api``), in a custom collector
on a private registry: no process-local state, so any web worker answers the
same. Names follow Prometheus conventions: ``gpuportal_`` prefix, base units
(seconds, GPUs, ratios 0..1) and ``_total`` only on counters.

Access: a cluster admin (session or ``Authorization: Token <key>``), or a
scraper sending ``Authorization: Bearer <METRICS_TOKEN>`` when that variable
is set in the web server's environment. Anyone else gets 401 (no or bad
credentials) or 403 (signed in, not an admin).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterator

from django.db.models import Count, Q, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from core.roles import is_admin
from monitoring.metrics_api import build_pending_by_reason
from monitoring.rollup import get_eviction_figures
from quotas.models import BusinessLine, Queue
from scheduling.models import Eviction, Job, Node, SchedulingCycle
from scheduling.selectors import QueueUsage, build_cluster_summary, build_usage

# Cycle duration buckets in seconds: a steady 10,000-GPU cycle takes ~0.7 s (docs/benchmarks.md).
CYCLE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BORROWED_DOC = "beyond its own quota: max(0, used - quota), 0 without a quota of its own"


def _queue_gauges(window: str) -> tuple[tuple[str, str], ...]:
    return (
        ("quota_gpus", "Quota of the queue in GPUs (absent: bounded only by its line's quota)"),
        ("guarantee_gpus", "Guaranteed GPUs of the queue"),
        ("used_gpus", "GPUs held by running and checkpointing jobs of the queue"),
        ("borrowed_gpus", f"GPUs the queue holds {BORROWED_DOC}"),
        ("pending_gpus", "GPUs asked by pending jobs of the queue"),
        ("running_jobs", "Running jobs of the queue"),
        ("pending_jobs", "Pending jobs of the queue"),
        ("eviction_ratio", f"Eviction ratio of the queue, {window} of cluster time: evicted "
         "over delivered GPU-seconds (0..1), from the latest metrics rollup sample; absent "
         "while the window holds no data yet"),
    )  # fmt: skip


LINE_GAUGES = (
    ("quota_gpus", "Quota of the business line in GPUs"),
    ("guarantee_gpus", "Guaranteed GPUs of the business line"),
    ("used_gpus", "GPUs held by running and checkpointing jobs of the line"),
    ("borrowed_gpus", f"GPUs the line holds {BORROWED_DOC}"),
    ("pending_gpus", "GPUs asked by pending jobs of the line"),
)


def _gauges(prefix: str, docs: tuple[tuple[str, str], ...], labels: list[str],
            rows: Iterator[tuple[list[str], dict]]) -> Iterator[Metric]:  # fmt: skip
    """One labelled gauge per ``docs`` entry (``prefix`` + name), a sample per row and name;
    a None value (a queue without its own quota) is left out."""
    families = {name: GaugeMetricFamily(prefix + name, doc, labels=labels) for name, doc in docs}
    for label_values, values in rows:
        for name, value in values.items():
            if value is not None:
                families[name].add_metric(label_values, value)
    yield from families.values()


def _usage_values(contract: BusinessLine | Queue, u: QueueUsage) -> dict:
    return {"quota_gpus": contract.quota_gpus, "guarantee_gpus": contract.guarantee_gpus,
            "used_gpus": u.used_gpus, "borrowed_gpus": u.borrowed_gpus,
            "pending_gpus": u.pending_gpus}  # fmt: skip


def _queue_families() -> Iterator[Metric]:
    usage = build_usage()
    eviction = get_eviction_figures()
    queues = Queue.objects.select_related("business_line").order_by("name")
    yield from _gauges(
        "gpuportal_queue_", _queue_gauges(eviction.window_label), ["queue", "business_line", "tier"],
        (
            ([q.name, q.business_line.name, q.tier],
             {**_usage_values(q, u), "running_jobs": u.running_jobs,
              "pending_jobs": u.pending_jobs, "eviction_ratio": eviction.ratio(q.pk)})
            for q in queues
            for u in [usage.queues.get(q.pk, QueueUsage())]
        ),
    )  # fmt: skip
    window = GaugeMetricFamily(
        "gpuportal_eviction_window_seconds",
        "Length of the window (cluster time) of gpuportal_queue_eviction_ratio",
    )
    window.add_metric([], eviction.window_s)
    yield window
    if eviction.sampled_at is not None:
        stamp = GaugeMetricFamily(
            "gpuportal_metrics_rollup_timestamp_seconds",
            "Cluster time (Unix seconds) of the rollup sample the eviction ratios come from",
        )
        stamp.add_metric([], eviction.sampled_at.timestamp())
        yield stamp
    yield from _gauges(
        "gpuportal_line_", LINE_GAUGES, ["business_line"],
        (([line.name], _usage_values(line, usage.lines.get(line.pk, QueueUsage())))
         for line in BusinessLine.objects.order_by("name")),
    )  # fmt: skip


def _job_families() -> Iterator[Metric]:
    pending = GaugeMetricFamily(
        "gpuportal_pending_jobs",
        "Pending jobs by pending-reason code (NEW: not yet seen by a cycle)",
        labels=["reason"],
    )
    for reason, n in sorted(build_pending_by_reason().items()):
        pending.add_metric([reason], n)
    yield pending

    jobs = GaugeMetricFamily("gpuportal_jobs", "Jobs by state", labels=["state"])
    by_state = dict(Job.objects.values("state").annotate(n=Count("id")).values_list("state", "n"))
    for state in Job.State.values:
        jobs.add_metric([state], by_state.get(state, 0))
    yield jobs

    preemptions = CounterMetricFamily(
        "gpuportal_preemptions",
        "Running jobs stopped to make room, by queue and reason (preemption, inference)",
        labels=["queue", "reason"],
    )
    evicted = CounterMetricFamily(
        "gpuportal_evicted_gpu_seconds",
        "GPU-seconds of runs stopped to make room, by queue",
        labels=["queue"],
    )
    rows = Eviction.objects.values("queue__name", "reason").annotate(
        n=Count("id"), s=Sum("gpu_seconds")
    )
    evicted_by_queue: dict[str, float] = {}
    for r in rows.order_by("queue__name", "reason"):
        preemptions.add_metric([r["queue__name"], r["reason"]], r["n"])
        evicted_by_queue[r["queue__name"]] = evicted_by_queue.get(r["queue__name"], 0.0) + (
            r["s"] or 0.0
        )
    for queue, seconds in evicted_by_queue.items():
        evicted.add_metric([queue], seconds)
    yield preemptions
    yield evicted


def _cycle_family() -> Metric:
    histogram = HistogramMetricFamily(
        "gpuportal_scheduling_cycle_duration_seconds",
        "Wall-clock duration of scheduling-loop iterations (kind: cycle or sweep)",
        labels=["kind"],
    )
    buckets = {
        f"le_{i}": Count("id", filter=Q(duration_ms__lte=le * 1000))
        for i, le in enumerate(CYCLE_BUCKETS_S)
    }
    rows = SchedulingCycle.objects.values("kind").annotate(
        n=Count("id"), total_ms=Sum("duration_ms"), **buckets
    )
    for r in rows.order_by("kind"):
        histogram.add_metric(
            [r["kind"]],
            buckets=[(str(le), r[f"le_{i}"]) for i, le in enumerate(CYCLE_BUCKETS_S)]
            + [("+Inf", r["n"])],
            sum_value=(r["total_ms"] or 0.0) / 1000.0,
        )
    return histogram


def _cluster_families() -> Iterator[Metric]:
    summary = build_cluster_summary()
    for name, doc, value in (
        ("gpuportal_cluster_gpus", "GPUs in the cluster", summary.gpus_total),
        ("gpuportal_cluster_allocated_gpus", "GPUs allocated to jobs, on any node",
         summary.gpus_allocated),
        ("gpuportal_cluster_allocated_healthy_gpus", "GPUs allocated to jobs on healthy nodes",
         summary.gpus_allocated_healthy),
        ("gpuportal_cluster_healthy_gpus", "GPUs of ready nodes whose health is ok",
         summary.gpus_healthy),
        ("gpuportal_cluster_residual_gpus", "GPUs held by stale processes of finished jobs",
         summary.gpus_residual),
        ("gpuportal_gpu_utilization_ratio",
         "Utilization of healthy GPUs: GPUs allocated on healthy nodes over healthy GPUs (0..1)",
         summary.utilization),
    ):  # fmt: skip
        family = GaugeMetricFamily(name, doc)
        family.add_metric([], value)
        yield family

    nodes = GaugeMetricFamily(
        "gpuportal_nodes", "Nodes by scheduling state and health", labels=["state", "health"]
    )
    rows = (
        Node.objects.values("state", "health").annotate(n=Count("id")).order_by("state", "health")
    )
    healthy = isolated = 0
    for r in rows:
        nodes.add_metric([r["state"], r["health"]], r["n"])
        if r["state"] == Node.State.READY and r["health"] == Node.Health.OK:
            healthy += r["n"]
        elif r["state"] != Node.State.READY:
            isolated += r["n"]
    yield nodes
    for name, doc, value in (
        ("gpuportal_healthy_nodes", "Ready nodes whose health is ok", healthy),
        ("gpuportal_isolated_nodes",
         "Nodes taken out of scheduling (cordoned, draining, unhealthy or down)", isolated),
    ):  # fmt: skip
        family = GaugeMetricFamily(name, doc)
        family.add_metric([], value)
        yield family


class PortalCollector(Collector):
    """Reads the database on every scrape; holds no state of its own."""

    def collect(self) -> Iterator[Metric]:
        yield from _queue_families()
        yield from _job_families()
        yield _cycle_family()
        yield from _cluster_families()


registry = CollectorRegistry(auto_describe=False)
registry.register(PortalCollector())


def _deny(status: int, message: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=status, content_type="text/plain")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the exposition, for admins or the metrics bearer token."""
    if request.method not in ("GET", "HEAD"):
        return _deny(405, "GET only")
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() == "bearer":
        expected = os.environ.get("METRICS_TOKEN", "")
        if not expected or not hmac.compare_digest(credentials.strip(), expected):
            return _deny(401, "bad metrics token")
    else:
        user = request.user
        if scheme.lower() == "token":
            try:
                found = TokenAuthentication().authenticate(request)
            except AuthenticationFailed as exc:
                return _deny(401, str(exc.detail))
            user = found[0] if found else user
        if not user.is_authenticated:
            return _deny(401, "authentication required: an admin, or Bearer <METRICS_TOKEN>")
        if not is_admin(user):
            return _deny(403, "cluster admins only")
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_PLAIN_0_0_4)
