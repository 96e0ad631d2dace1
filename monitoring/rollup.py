"""The metrics rollup (beat entry ``metrics-rollup``): one ``MetricSample`` a minute, and the
alerts that need a time window — eviction ratio too high, jobs pending too long, quota
near its limit (V4, R4)."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.db.models import Count, Sum

from core import events
from core.realtime import publish_on_commit
from monitoring import metrics
from monitoring.models import Alert, MetricSample
from monitoring.services import raise_alert, resolve_cleared, resolve_quiet
from quotas.models import BusinessLine, Queue
from scheduling.clock import cluster_now, wall_seconds
from scheduling.models import Eviction, Job
from scheduling.nodes.selectors import list_usable_free_gpus
from scheduling.selectors import (
    QueueUsage,
    build_cluster_summary,
    build_line_usage,
    build_queue_usage,
)

EVICTION_WINDOW = timedelta(hours=24)
EVICTION_ALERT_RATIO = 0.15
EVICTION_ALERT_MIN_EVENTS = 3
PENDING_TOO_LONG = timedelta(hours=6)
QUOTA_NEAR = 0.95
# A residual-process alert (the loop already killed the stale processes) closes by itself
# when its node has had no new one for this long (cluster time).
RESIDUAL_QUIET = timedelta(minutes=30)
# A backend_error alert closes after this long without a failed backend call (cluster time).
BACKEND_QUIET = timedelta(minutes=10)
RETENTION = timedelta(days=14)


def _eviction_by_queue(now, usage: dict[int, QueueUsage]) -> dict[int, dict]:
    since = now - EVICTION_WINDOW
    evicted = {
        r["queue_id"]: r
        for r in Eviction.objects.filter(at__gte=since)
        .values("queue_id")
        .annotate(gpu_s=Sum("gpu_seconds"), n=Count("id"))
    }
    series: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for at, per_queue in (
        MetricSample.objects.filter(at__gte=since).order_by("at").values_list("at", "per_queue")
    ):
        for qid, row in per_queue.items():
            series[int(qid)].append((at.timestamp(), int(row.get("used", 0))))
    now_ts = now.timestamp()
    out = {}
    for queue_id in Queue.objects.values_list("id", flat=True):
        points = series.get(queue_id, [])
        points.append((now_ts, usage.get(queue_id, QueueUsage()).used_gpus))
        delivered = metrics.delivered_gpu_seconds(points, now_ts)
        ev = evicted.get(queue_id, {"gpu_s": 0.0, "n": 0})
        out[queue_id] = {
            "evicted_gpu_s": float(ev["gpu_s"] or 0.0),
            "evictions": ev["n"],
            "eviction_ratio": round(
                metrics.eviction_ratio(float(ev["gpu_s"] or 0.0), delivered), 4
            ),
        }
    return out


def rollup() -> MetricSample:
    """Write one sample and raise the windowed alerts."""
    now = cluster_now()
    summary = build_cluster_summary()
    free_per_node = list_usable_free_gpus()
    queue_usage = build_queue_usage()
    line_usage = build_line_usage()
    evictions = _eviction_by_queue(now, queue_usage)
    queues = {q.pk: q for q in Queue.objects.select_related("business_line")}
    per_queue = {
        str(qid): {
            "name": q.name,
            "line": q.business_line.name,
            "used": queue_usage.get(qid, QueueUsage()).used_gpus,
            "pending_jobs": queue_usage.get(qid, QueueUsage()).pending_jobs,
            **evictions.get(qid, {}),
        }
        for qid, q in queues.items()
    }
    per_line = {
        line.name: {
            "used": line_usage.get(line.pk, QueueUsage()).used_gpus,
            "borrowed": line_usage.get(line.pk, QueueUsage()).borrowed_gpus,
            "pending_gpus": line_usage.get(line.pk, QueueUsage()).pending_gpus,
            "quota": line.quota_gpus,
            "guarantee": line.guarantee_gpus,
        }
        for line in BusinessLine.objects.all()
    }
    pending_by_reason = dict(
        Job.objects.filter(state=Job.State.PENDING)
        .exclude(pending_code="")
        .values_list("pending_code")
        .annotate(n=Count("id"))
    )
    sample = MetricSample.objects.create(
        at=now,
        gpus_total=summary.gpus_total,
        gpus_healthy=summary.gpus_healthy,
        gpus_allocated=summary.gpus_allocated,
        utilization=round(metrics.utilization(summary.gpus_allocated, summary.gpus_healthy), 4),
        fragmentation_gpus=metrics.fragmentation(free_per_node),
        pending_jobs=Job.objects.filter(state=Job.State.PENDING).count(),
        pending_by_reason=pending_by_reason,
        per_line=per_line,
        per_queue=per_queue,
    )
    MetricSample.objects.filter(at__lt=now - RETENTION).delete()
    _raise_window_alerts(now, per_queue, per_line)
    publish_on_commit(
        *events.eviction_updated(
            {q["name"]: q.get("eviction_ratio", 0.0) for q in per_queue.values()}
        )
    )
    return sample


def _raise_window_alerts(now, per_queue: dict, per_line: dict) -> None:
    """Raise the condition alerts that hold now; resolve those that no longer do."""
    firing: dict[str, set[str]] = defaultdict(set)
    for row in per_queue.values():
        if (
            row.get("eviction_ratio", 0) > EVICTION_ALERT_RATIO
            and row.get("evictions", 0) >= EVICTION_ALERT_MIN_EVENTS
        ):
            firing[Alert.Kind.EVICTION_RATIO].add(row["name"])
            raise_alert(
                Alert.Kind.EVICTION_RATIO, Alert.Severity.WARNING, row["name"],
                f"{row['evictions']} evictions in 24 h: {row['evicted_gpu_s'] / 3600:.0f} "
                f"GPU-hours evicted, ratio {row['eviction_ratio']:.0%} of delivered. "
                f"Consider a guarantee for {row['name']} (see the line's page).",
            )  # fmt: skip
    stale = (
        Job.objects.filter(state=Job.State.PENDING, submitted_at__lt=now - PENDING_TOO_LONG)
        .values("queue__name")
        .annotate(n=Count("id"))
    )
    for row in stale:
        firing[Alert.Kind.PENDING_TOO_LONG].add(row["queue__name"])
        raise_alert(
            Alert.Kind.PENDING_TOO_LONG, Alert.Severity.WARNING, row["queue__name"],
            f"{row['n']} job(s) in {row['queue__name']} have waited more than "
            f"{PENDING_TOO_LONG.total_seconds() / 3600:.0f} h; check their pending reasons.",
        )  # fmt: skip
    for name, row in per_line.items():
        if row["quota"] and row["used"] >= QUOTA_NEAR * row["quota"]:
            firing[Alert.Kind.QUOTA_NEAR_LIMIT].add(name)
            raise_alert(
                Alert.Kind.QUOTA_NEAR_LIMIT, Alert.Severity.INFO, name,
                f"line {name} holds {row['used']} of its {row['quota']} GPU quota "
                f"({row['used'] / row['quota']:.0%}).",
            )  # fmt: skip

    for kind in (Alert.Kind.EVICTION_RATIO, Alert.Kind.PENDING_TOO_LONG,
                 Alert.Kind.QUOTA_NEAR_LIMIT):  # fmt: skip
        resolve_cleared(kind, firing[kind], "the condition cleared")
    # The quiet periods are cluster time (the simulator demo runs 60x faster than the wall).
    resolve_quiet(
        Alert.Kind.RESIDUAL_PROCESS,
        timedelta(seconds=wall_seconds(RESIDUAL_QUIET.total_seconds())),
        f"handled by the loop and not seen again for {RESIDUAL_QUIET.total_seconds() / 60:.0f} min",
    )  # fmt: skip
    resolve_quiet(
        Alert.Kind.BACKEND_ERROR,
        timedelta(seconds=wall_seconds(BACKEND_QUIET.total_seconds())),
        f"no failed backend call for {BACKEND_QUIET.total_seconds() / 60:.0f} min",
    )  # fmt: skip


def get_eviction_ratios() -> dict[int, float]:
    """Latest eviction ratio per queue id (from the last sample)."""
    latest = MetricSample.objects.order_by("-at").values_list("per_queue", flat=True).first()
    return {int(k): float(v.get("eviction_ratio", 0.0)) for k, v in (latest or {}).items()}


__all__ = ["get_eviction_ratios", "rollup"]
