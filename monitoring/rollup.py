"""The metrics rollup (beat entry ``metrics-rollup``): one ``MetricSample`` a minute, and the
alerts that need a time window — eviction ratio too high, jobs pending too long, quota
near its limit (V4, R4)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, Q

from core import events
from core.realtime import publish_on_commit
from monitoring import metrics
from monitoring.idle_account import idle_totals
from monitoring.models import Alert, MetricSample
from monitoring.services import raise_alert, resolve_cleared, resolve_quiet
from quotas.models import BusinessLine, Queue, QuotaPolicy
from scheduling.borrow_inputs import EvictionReading
from scheduling.clock import cluster_now
from scheduling.engine.explain import count, verb
from scheduling.models import CONSOLIDATION, Eviction, Job
from scheduling.nodes.selectors import list_usable_free_gpus
from scheduling.selectors import QueueUsage, build_cluster_summary, build_usage

PENDING_TOO_LONG = timedelta(hours=6)
QUOTA_NEAR = 0.95
# A residual-process alert (the loop already killed the stale processes) closes by itself
# when its node has had no new one for this long (cluster time).
RESIDUAL_QUIET = timedelta(minutes=30)
# A backend_error alert closes after this long without a failed backend call (cluster time).
BACKEND_QUIET = timedelta(minutes=10)
RETENTION = timedelta(days=14)
# The key of a sample's ``idle_gpu_s`` that holds the cluster time its totals are as of.
AS_OF = "as_of"


def eviction_window() -> timedelta:
    """The one eviction-ratio window of the portal: the quota policy's
    ``eviction_window_hours`` (72 by default; admins change it in the Django admin). The
    rollup, the alerts, the guarantee advice, the pages, the API and ``/metrics`` use it."""
    hours = QuotaPolicy.objects.values_list("eviction_window_hours", flat=True).first()
    if hours is None:  # read-only: no policy row yet means the defaults
        hours = QuotaPolicy._meta.get_field("eviction_window_hours").default
    return timedelta(hours=max(1, hours))


def list_evictions_with_use(
    queue_id: int, since: datetime, until: datetime
) -> list[tuple[datetime, int, float, int]]:
    """The queue's evictions in ``[since, until]`` as ``(at, gpus, gpu_seconds, used)``, in
    the order the ratio sums them; ``used``: the queue's GPUs in use at the last rollup
    sample of the window at or before the eviction (else the first after; 0 without one).
    One query: each eviction looks up one sample by the ``at`` index. Migrations
    (consolidation) are not evictions and are left out."""
    samples, evictions = MetricSample._meta.db_table, Eviction._meta.db_table
    use = "round((s.per_queue -> %s ->> 'used')::numeric)::int"
    sql = (
        f"SELECT e.at, e.gpus, e.gpu_seconds, COALESCE("
        f"  (SELECT {use} FROM {samples} s WHERE s.at >= %s AND s.at <= e.at"
        "     ORDER BY s.at DESC LIMIT 1),"
        f"  (SELECT {use} FROM {samples} s WHERE s.at > e.at AND s.at <= %s"
        "     ORDER BY s.at LIMIT 1), 0) "
        f"FROM {evictions} e WHERE e.queue_id = %s AND e.at >= %s AND e.at <= %s "
        "AND e.reason <> %s ORDER BY e.at, e.id"
    )
    key = str(queue_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, [key, since, key, until, queue_id, since, until, CONSOLIDATION])
        return [(at, gpus, gpu_s, used) for at, gpus, gpu_s, used in cursor.fetchall()]


def list_window_evictions(since: datetime, until: datetime) -> dict[int, list[tuple]]:
    """Per queue id, the evictions in ``[since, until]`` as ``(at, gpus, gpu_seconds)``, in
    a fixed order (the ratio and the advice sum them the same way, to the last bit).
    Migrations (consolidation) are not evictions: ``window_migrations`` counts them."""
    out: dict[int, list[tuple]] = defaultdict(list)
    rows = (
        Eviction.objects.filter(at__gte=since, at__lte=until)
        .exclude(reason=CONSOLIDATION)
        .order_by("at", "id")
        .values_list("queue_id", "at", "gpus", "gpu_seconds")
    )
    for queue_id, at, gpus, gpu_s in rows:
        out[queue_id].append((at, gpus, gpu_s))
    return out


def window_migrations(since: datetime, until: datetime) -> dict[int, int]:
    """Per queue id, the jobs moved by consolidation in ``[since, until]`` (#19): shown
    beside the eviction ratio, never in it."""
    rows = (
        Eviction.objects.filter(at__gte=since, at__lte=until, reason=CONSOLIDATION)
        .values("queue_id")
        .annotate(n=Count("id"))
        .values_list("queue_id", "n")
    )
    return dict(rows)


def delivered_in_window(since: datetime, now: datetime) -> dict[int, float]:
    """GPU-seconds each queue was given in ``[since, now]``: the integral of its sampled use
    (a step series: each sample's use holds until the next sample, the last one's until
    ``now``), summed by PostgreSQL (``metrics.delivered_gpu_seconds`` is the same sum)."""
    sql = (
        "SELECT queue_id, SUM(used * EXTRACT(EPOCH FROM (nxt - at))) FROM ("
        "  SELECT q.key::int AS queue_id, s.at AS at,"
        "    COALESCE((q.value->>'used')::numeric, 0) AS used,"
        "    LEAD(s.at, 1, %s) OVER (PARTITION BY q.key ORDER BY s.at) AS nxt"
        f"  FROM {MetricSample._meta.db_table} s"
        "  CROSS JOIN LATERAL jsonb_each(s.per_queue) AS q(key, value)"
        "  WHERE s.at >= %s AND s.at <= %s"
        ") steps GROUP BY queue_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [now, since, now])
        return {queue_id: float(total or 0) for queue_id, total in cursor.fetchall()}


def _eviction_by_queue(now: datetime) -> dict[int, dict]:
    """Per queue: evictions, evicted and delivered GPU-seconds and the ratio in the window
    ending ``now`` (``eviction_ratio`` None: no data yet), and the migrations apart."""
    window = eviction_window()
    since = now - window
    evictions = list_window_evictions(since, now)
    migrations = window_migrations(since, now)
    delivered_by_queue = delivered_in_window(since, now)
    out = {}
    for queue_id in Queue.objects.values_list("id", flat=True):
        delivered = delivered_by_queue.get(queue_id, 0.0)
        rows = evictions.get(queue_id, [])
        evicted = sum(gpu_s for _, _, gpu_s in rows)
        out[queue_id] = {
            "evictions": len(rows),
            "evicted_gpu_s": evicted,
            "delivered_gpu_s": delivered,
            "eviction_ratio": metrics.window_eviction_ratio(evicted, delivered),
            "eviction_window_s": int(window.total_seconds()),
            "migrations": migrations.get(queue_id, 0),
        }
    return out


def rollup() -> MetricSample:
    """Write one sample and raise the windowed alerts."""
    now = cluster_now()
    summary = build_cluster_summary()
    free_per_node = list_usable_free_gpus()
    usage = build_usage()
    queue_usage, line_usage = usage.queues, usage.lines
    evictions = _eviction_by_queue(now)
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
    idle_as_of, idle_gpu_s = idle_totals()
    sample = MetricSample.objects.create(
        at=now,
        gpus_total=summary.gpus_total,
        gpus_healthy=summary.gpus_healthy,
        gpus_allocated=summary.gpus_allocated,
        utilization=summary.utilization,
        fragmentation_gpus=metrics.fragmentation(free_per_node),
        pending_jobs=Job.objects.filter(state=Job.State.PENDING).count(),
        pending_by_reason=pending_by_reason,
        per_line=per_line,
        per_queue=per_queue,
        # cumulative, up to the latest plan (AS_OF: its cluster time, epoch seconds)
        idle_gpu_s={**idle_gpu_s, AS_OF: idle_as_of.timestamp()} if idle_as_of else {},
    )
    MetricSample.objects.filter(at__lt=now - RETENTION).delete()
    _raise_window_alerts(now, per_queue, per_line)
    publish_on_commit(
        *events.eviction_updated({q["name"]: q.get("eviction_ratio") for q in per_queue.values()})
    )
    return sample


def _raise_window_alerts(now, per_queue: dict, per_line: dict) -> None:
    """Raise the condition alerts that hold now; resolve those that no longer do."""
    firing: dict[str, set[str]] = defaultdict(set)
    for row in per_queue.values():
        ratio = row.get("eviction_ratio")
        if (
            ratio is not None
            and ratio > metrics.EVICTION_ALERT_RATIO
            and row.get("evictions", 0) >= metrics.EVICTION_ALERT_MIN_EVENTS
        ):
            firing[Alert.Kind.EVICTION_RATIO].add(row["name"])
            window = metrics.window_label(row["eviction_window_s"])
            raise_alert(
                Alert.Kind.EVICTION_RATIO, Alert.Severity.WARNING, row["name"],
                f"{row['evictions']:,} evictions in the {window}: "
                f"{row['evicted_gpu_s'] / 3600:,.0f} GPU-hours evicted, eviction ratio "
                f"{metrics.ratio_text(ratio)} of delivered GPU time. "
                f"Consider a guarantee for {row['name']} (see the line's page).",
            )  # fmt: skip
    cutoff = now - PENDING_TOO_LONG
    # a job that waited for others (``Job.after``, ``after_arrays``) has waited since the
    # last of them ended (succeeded, or for ``after_condition`` ``ended`` whatever the
    # outcome: one waiting for a job that failed long ago was cancelled by the loop then)
    not_long_released = Job.objects.filter(
        ~Q(state__in=Job.TERMINAL_STATES) | Q(finished_at__gte=cutoff)
    ).values("pk")
    # a held job is not waiting for the cluster; a released one waits since its release
    stale = (
        Job.objects.filter(state=Job.State.PENDING, submitted_at__lt=cutoff, held_at__isnull=True)
        .exclude(released_at__gte=cutoff)
        .exclude(begin_at__gte=cutoff)  # asked to begin later: it waits since then
        .exclude(after__in=not_long_released)
        .exclude(after_arrays__tasks__in=not_long_released)
        .values("queue__name")
        .annotate(n=Count("id"))
    )
    for row in stale:
        firing[Alert.Kind.PENDING_TOO_LONG].add(row["queue__name"])
        raise_alert(
            Alert.Kind.PENDING_TOO_LONG, Alert.Severity.WARNING, row["queue__name"],
            f"{count(row['n'], 'job')} in {row['queue__name']} "
            f"{verb(row['n'], 'has', 'have')} waited more than "
            f"{PENDING_TOO_LONG.total_seconds() / 3600:.0f} h; check "
            f"{verb(row['n'], 'its pending reason', 'their pending reasons')}.",
        )  # fmt: skip
    for name, row in per_line.items():
        if row["quota"] and row["used"] >= QUOTA_NEAR * row["quota"]:
            firing[Alert.Kind.QUOTA_NEAR_LIMIT].add(name)
            raise_alert(Alert.Kind.QUOTA_NEAR_LIMIT, Alert.Severity.INFO, name,
                        _quota_use(name, row["used"], row["quota"]))  # fmt: skip

    for kind in (Alert.Kind.EVICTION_RATIO, Alert.Kind.PENDING_TOO_LONG,
                 Alert.Kind.QUOTA_NEAR_LIMIT):  # fmt: skip
        resolve_cleared(kind, firing[kind], "the condition cleared")
    # Quiet periods are cluster time, like the alerts' own stamps (core.clock).
    resolve_quiet(
        Alert.Kind.RESIDUAL_PROCESS,
        RESIDUAL_QUIET,
        f"handled by the loop and not seen again for {RESIDUAL_QUIET.total_seconds() / 60:.0f} min",
    )  # fmt: skip
    resolve_quiet(
        Alert.Kind.BACKEND_ERROR,
        BACKEND_QUIET,
        f"no failed backend call for {BACKEND_QUIET.total_seconds() / 60:.0f} min",
    )  # fmt: skip


@dataclass(frozen=True)
class EvictionFigures:
    """The eviction figures of the latest rollup sample (what every surface shows).

    ``window_s``: the window of the ratios (the policy's when there is no sample yet);
    ``sampled_at``: the sample's cluster time (None: no sample yet); ``by_queue``: per queue
    id ``{evictions, evicted_gpu_s, delivered_gpu_s, eviction_ratio, migrations}``, the
    ratio None when the window holds no data yet; ``migrations``: jobs moved by
    consolidation in the window, not counted in the ratio.
    """

    window_s: int
    sampled_at: datetime | None
    by_queue: dict[int, dict]

    def ratio(self, queue_id: int) -> float | None:
        return self.by_queue.get(queue_id, {}).get("eviction_ratio")

    def migrations(self, queue_id: int) -> int:
        """Jobs of the queue moved by consolidation in the window (not evictions)."""
        return int(self.by_queue.get(queue_id, {}).get("migrations", 0))

    @property
    def window_label(self) -> str:
        return metrics.window_label(self.window_s)


def eviction_figures_of(sample: dict | None) -> EvictionFigures:
    """The eviction figures of a sample read as ``{"at", "per_queue"}`` (None: no sample)."""
    if sample is None:
        return EvictionFigures(int(eviction_window().total_seconds()), None, {})
    by_queue = {int(k): v for k, v in sample["per_queue"].items()}
    windows = {v["eviction_window_s"] for v in by_queue.values() if "eviction_window_s" in v}
    window_s = windows.pop() if len(windows) == 1 else int(eviction_window().total_seconds())
    return EvictionFigures(
        window_s=window_s,
        sampled_at=sample["at"],
        by_queue={
            qid: {
                "evictions": int(v.get("evictions", 0)),
                "evicted_gpu_s": float(v.get("evicted_gpu_s", 0.0)),
                "delivered_gpu_s": float(v.get("delivered_gpu_s", 0.0)),
                "eviction_ratio": v.get("eviction_ratio"),
                "migrations": int(v.get("migrations", 0)),
            }
            for qid, v in by_queue.items()
        },
    )


def get_eviction_figures() -> EvictionFigures:
    """The latest sample's eviction figures (one query; two without a sample yet)."""
    return eviction_figures_of(
        MetricSample.objects.order_by("-at").values("at", "per_queue").first()
    )


def get_eviction_readings() -> dict[int, EvictionReading]:
    """Latest eviction figures per queue id, from the last sample (the loop's input)."""
    return {
        qid: EvictionReading(row["eviction_ratio"], row["evicted_gpu_s"], row["delivered_gpu_s"])
        for qid, row in get_eviction_figures().by_queue.items()
    }


# -- cadence ------------------------------------------------------------------------------
# One sample per cluster minute. The beat entry asks every BEAT_SECONDS of wall time
# (portal/celery.py): on a real backend that writes one sample a minute, as before; on the
# simulator at 60x each ask is five simulated minutes later, so it writes every time (12
# samples per simulated hour, where one a wall minute gave the dashboard's "last hour" a
# single point). A sample due within half a beat is written now rather than a beat late.
SAMPLE_EVERY = timedelta(minutes=1)
BEAT_SECONDS = 5.0


def sample_due(now: datetime) -> bool:
    """True when the latest sample is a cluster minute old (less half a beat) or missing."""
    last = MetricSample.objects.order_by("-at").values_list("at", flat=True).first()
    return last is None or now - last >= SAMPLE_EVERY - timedelta(seconds=BEAT_SECONDS / 2)


def rollup_if_due() -> MetricSample | None:
    """The beat's entry point: ``rollup()`` when a sample is due, else nothing."""
    return rollup() if sample_due(cluster_now()) else None


__all__ = ["EvictionFigures", "eviction_window", "get_eviction_figures",
           "get_eviction_readings", "rollup"]  # fmt: skip


def _quota_use(line: str, used: int, quota: int) -> str:
    """The quota alert's words: a line past its quota (borrowed capacity, or a quota cut
    below what runs) read "holds 3,038 of its 2,750 GPU quota (110%)"."""
    share = f"{used / quota:.0%}"
    if used > quota:
        return (f"line {line} holds {used:,} GPUs, {used - quota:,} more than its "
                f"{quota:,} GPU quota ({share}).")  # fmt: skip
    return f"line {line} holds {used:,} of its {quota:,} GPU quota ({share})."
