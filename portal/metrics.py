"""Prometheus text exposition at ``/metrics`` (admins, or the ``METRICS_TOKEN`` bearer).

Two sources, each at a cost that does not grow with history:

- gauges of the present (queues, lines, pending jobs, nodes, GPUs by model, open alerts)
  read the live tables through the same selectors as the REST API
  (``scheduling.selectors``, ``monitoring.metrics_api``), in a custom collector;
- counters and histograms of what happened (cycle durations, preemptions, evicted
  GPU-seconds, admissions, wait times) are recorded where the work happens
  (``core.telemetry``), summed across processes in multiprocess mode when
  ``PROMETHEUS_MULTIPROC_DIR`` is set, never recounted from tables.

Every known queue, reason and kind has a series from the start (0 until it happens). Names follow Prometheus conventions: ``gpuportal_`` prefix, base units
(seconds, GPUs, ratios 0..1) and ``_total`` only on counters.

Access: a cluster admin (session or ``Authorization: Token <key>``), or a
scraper sending ``Authorization: Bearer <METRICS_TOKEN>`` when that variable
is set in the web server's environment. Anyone else gets 401 (no or bad
credentials) or 403 (signed in, not an admin).
"""

from __future__ import annotations

import hmac
import importlib.metadata
import os
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, generate_latest
from prometheus_client import multiprocess as prometheus_multiprocess
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from rest_framework.exceptions import AuthenticationFailed, Throttled

from core import telemetry
from core.roles import is_admin
from core.security import RateLimitedTokenAuthentication
from monitoring.idle import CAUSES
from monitoring.idle_account import idle_now, idle_totals
from monitoring.metrics_api import UNEXPLAINED, build_pending_by_reason
from monitoring.models import Alert
from monitoring.rollup import get_eviction_figures
from quotas.models import BusinessLine, Queue
from scheduling.cycle.verdicts import PENDING_CODES
from scheduling.models import Allocation, Job, Node
from scheduling.selectors import QueueUsage, build_cluster_summary, build_usage

CYCLE_BUCKETS_S = telemetry.CYCLE_BUCKETS_S
# Every pending reason a job can show, each a series from the start.
PENDING_REASONS = (*PENDING_CODES, UNEXPLAINED)
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
    by_reason = dict.fromkeys(PENDING_REASONS, 0) | build_pending_by_reason()
    for reason, n in sorted(by_reason.items()):
        pending.add_metric([reason], n)
    yield pending

    # Live states only: finished jobs are history, kept forever, and counting them at every
    # scrape made /metrics grow with it (1M finished jobs: +500 ms). The (state, queue)
    # index finds the live ones without reading the finished.
    jobs = GaugeMetricFamily(
        "gpuportal_jobs", "Jobs in each live state (pending, running, preempting)", labels=["state"]
    )
    by_state = dict(
        Job.objects.filter(state__in=Job.ACTIVE_STATES).values("state").annotate(n=Count("id"))
        .order_by().values_list("state", "n")
    )  # fmt: skip
    for state in Job.ACTIVE_STATES:
        jobs.add_metric([state], by_state.get(state, 0))
    yield jobs


def _alert_family() -> Metric:
    open_alerts = GaugeMetricFamily(
        "gpuportal_alerts",
        "Unresolved portal alerts (open or acknowledged) by kind and severity",
        labels=["kind", "severity"],
    )
    rows = (
        Alert.objects.exclude(status=Alert.Status.RESOLVED)
        .values_list("kind", "severity")
        .annotate(n=Count("id"))
    )
    counts = {(kind, sev): 0 for kind in Alert.Kind.values for sev in Alert.Severity.values}
    counts.update({(kind, sev): n for kind, sev, n in rows})
    for (kind, severity), n in sorted(counts.items()):
        open_alerts.add_metric([kind, severity], n)
    return open_alerts


def _gpu_model_families() -> Iterator[Metric]:
    gpus = GaugeMetricFamily(
        "gpuportal_gpus",
        "GPUs by model and their node's scheduling state and health",
        labels=["gpu_model", "state", "health"],
    )
    rows = Node.objects.values_list("gpu_model", "state", "health").annotate(n=Sum("gpus_total"))
    for model, state, health, n in sorted(rows):
        gpus.add_metric([model, state, health], n or 0)
    yield gpus
    allocated = GaugeMetricFamily(
        "gpuportal_allocated_gpus", "GPUs allocated to jobs, by GPU model", labels=["gpu_model"]
    )
    # order_by(): Node's default ordering would make it DISTINCT (gpu_model, name), a row a node
    by_model = dict.fromkeys(
        Node.objects.values_list("gpu_model", flat=True).order_by().distinct(), 0
    )
    by_model.update(
        Allocation.objects.values_list("node__gpu_model").annotate(n=Count("id")).order_by()
    )
    for model, n in sorted(by_model.items()):
        allocated.add_metric([model], n)
    yield allocated


def _build_info() -> Metric:
    info = InfoMetricFamily("gpuportal_build", "Version of the portal serving this scrape")
    info.add_metric([], {"version": _version(), "revision": os.environ.get("BUILD_REVISION", ""),
                         "backend": getattr(settings, "SCHEDULING_BACKEND", "")})  # fmt: skip
    return info


def _version() -> str:
    try:
        return importlib.metadata.version("gpu-portal")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


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
        ("gpuportal_cluster_inference_healthy_gpus",
         "GPUs serving online inference on healthy shared nodes", summary.gpus_inference_healthy),
        ("gpuportal_gpu_utilization_ratio",
         "Utilization of healthy GPUs: GPUs in use by jobs or by online inference on healthy "
         "nodes over healthy GPUs (0..1)",
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


def _idle_families() -> Iterator[Metric]:
    """Idle GPUs while jobs wait, by cause (``monitoring.idle``): the loop's running totals
    (kept in the database by ``monitoring.idle_account``) and the latest plan's counts."""
    _, totals = idle_totals()
    seconds = CounterMetricFamily(
        "gpuportal_idle_gpu_seconds",
        "GPU-seconds (cluster time) GPUs sat idle while some job waited, by cause (one cause "
        "each; cause unavailable: on nodes out of service, every other cause: healthy GPUs); "
        "summed after every applied plan",
        labels=["cause"],
    )
    now = GaugeMetricFamily(
        "gpuportal_idle_gpus",
        "GPUs idle while some job waits, by cause, as the latest applied plan left them",
        labels=["cause"],
    )
    claims = idle_now()
    for cause in CAUSES:
        seconds.add_metric([cause], totals.get(cause, 0.0))
        now.add_metric([cause], claims.get(cause, 0))
    yield seconds
    yield now


class PortalCollector(Collector):
    """Reads the database on every scrape; holds no state of its own."""

    def collect(self) -> Iterator[Metric]:
        yield from _queue_families()
        yield from _job_families()
        yield _alert_family()
        yield from _cluster_families()
        yield from _gpu_model_families()
        yield from _idle_families()
        yield _build_info()


class RecordedCollector(Collector):
    """The counters and histograms ``core.telemetry`` recorded: of every process (summed
    from PROMETHEUS_MULTIPROC_DIR) in multiprocess mode, else of this one. Each scrape
    first gives every known queue, kind and reason its zero series."""

    def collect(self) -> Iterator[Metric]:
        telemetry.touch(list(Queue.objects.values_list("name", flat=True)))
        path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if path:
            source = CollectorRegistry()
            prometheus_multiprocess.MultiProcessCollector(source, path=path)
        else:
            source = telemetry.REGISTRY
        yield from source.collect()


registry = CollectorRegistry(auto_describe=False)
registry.register(PortalCollector())
registry.register(RecordedCollector())


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
        # as bytes: compare_digest refuses str with non-ASCII characters, which a
        # (Latin-1) header may hold
        given = credentials.strip().encode()
        if not expected or not hmac.compare_digest(given, expected.encode()):
            return _deny(401, "bad metrics token")
    else:
        user = request.user
        if scheme.lower() == "token":
            try:
                # The API's own check: DRF tokens and self-service ``gpt_`` tokens alike.
                found = RateLimitedTokenAuthentication().authenticate(request)
            except (AuthenticationFailed, Throttled) as exc:
                return _deny(401, str(exc.detail))
            user = found[0] if found else user
        if not user.is_authenticated:
            return _deny(401, "authentication required: an admin, or Bearer <METRICS_TOKEN>")
        if not is_admin(user):
            return _deny(403, "cluster admins only")
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_PLAIN_0_0_4)
