"""What the engine's borrowing rules (#19, ``scheduling.engine.borrowing``) read from the
portal's records, for ``snapshot.build_snapshot`` and ``cycle.context.production_policy``.

* the knobs: ``QuotaPolicy.borrow_cooldown_minutes``, ``QuotaPolicy.eviction_target``
  (the target above which the guarantee advice speaks, and, with ``borrow_cap``,
  borrowing tightens) and
  ``QuotaPolicy.preempt_after_minutes`` / ``urgent_preempt_after_minutes`` (patience
  before reclaiming / before an urgent job preempts), ``predictive_patience`` and
  ``borrow_cap`` (the eviction target caps a queue's borrowing, or only advises),
  ``defragment_nodes`` (nodes a cycle may empty before a gang asks, ``engine.defragment``),
  ``starvation_bound_hours`` (the starvation bound and, with it, the quota hold for
  overdue jobs, ``engine.aging``; 0: neither);
* the peak of the cluster's entitled demand over each look-ahead of ``HORIZONS_S``, from
  the per-minute ``UsageSample`` rows of the lines (held within quota plus waiting:
  ``used - borrowed + pending``, at most the line's quota, summed per sample);
* per job and per queue, the last eviction within the cool-down (``Eviction`` rows; moves
  by consolidation are not evictions);
* per queue, the eviction figures of the monitoring rollup (the ratio, and the evicted
  and delivered GPU time it divides: ``EvictionReading``). Monitoring sits above
  scheduling, so it registers its reader here (``provide_eviction_readings``, in
  ``MonitoringConfig.ready``) as it connects to the loop's signals.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import NamedTuple

from django.db.models import Case, F, IntegerField, Sum, When
from django.db.models.functions import Least

from quotas.models import QuotaPolicy, UsageSample
from scheduling.clock import to_epoch
from scheduling.engine.borrowing import HORIZONS_S
from scheduling.models import CONSOLIDATION, INFERENCE_STOP, Eviction


class EvictionReading(NamedTuple):
    """A queue's eviction figures over the eviction window: R4's ratio (None: no data
    yet), the GPU time of its evicted runs and the GPU time it was given."""

    ratio: float | None
    evicted_gpu_s: float
    delivered_gpu_s: float


EvictionReadings = Callable[[], dict[int, EvictionReading]]
_reading_source: list[EvictionReadings] = []


def provide_eviction_readings(source: EvictionReadings) -> None:
    """Register the reader of the latest per-queue eviction figures (queue id -> reading)."""
    _reading_source[:] = [source]


def queue_eviction_readings() -> dict[int, EvictionReading]:
    """Latest eviction figures per queue id ({} when monitoring is not installed)."""
    return _reading_source[0]() if _reading_source else {}


def queue_view_fields(reading: EvictionReading | None) -> dict[str, float | None]:
    """``QueueView``'s eviction fields from a queue's reading (all None: no reading)."""
    if reading is None:
        return {"eviction_ratio": None, "evicted_gpu_s": None, "delivered_gpu_s": None}
    return {
        "eviction_ratio": reading.ratio,
        "evicted_gpu_s": reading.evicted_gpu_s,
        "delivered_gpu_s": reading.delivered_gpu_s,
    }


def policy_knobs() -> dict[str, float | bool | int | None]:
    """``PolicyConfig`` overrides from the admins' quota policy (defaults when no row)."""
    names = ("borrow_cooldown_minutes", "eviction_target", "preempt_after_minutes",
             "urgent_preempt_after_minutes", "predictive_patience", "borrow_cap",
             "defragment_nodes", "starvation_bound_hours")  # fmt: skip
    row = QuotaPolicy.objects.values(*names).first()
    if row is None:
        row = {name: QuotaPolicy._meta.get_field(name).get_default() for name in names}
    cooldown = float(row["borrow_cooldown_minutes"]) * 60.0
    bound = row["starvation_bound_hours"]
    return {
        "borrow_cooldown_s": cooldown,
        "borrow_queue_cooldown_s": cooldown,
        "borrow_eviction_target": float(row["eviction_target"]),
        "preempt_after_s": float(row["preempt_after_minutes"]) * 60.0,
        "tier_preempt_after_s": float(row["urgent_preempt_after_minutes"]) * 60.0,
        "predictive_patience": bool(row["predictive_patience"]),
        "borrow_cap": bool(row["borrow_cap"]),
        "defragment_nodes": int(row["defragment_nodes"]),
        "starvation_bound_s": float(bound) * 3600.0 if bound else None,
        "hold_quota_when_overdue": bool(bound),
    }


def entitled_demand_peaks(now: datetime) -> tuple[int, ...]:
    """Peak of the cluster's entitled demand over each horizon: per usage sample, summed
    over lines, ``used - borrowed + pending`` at most the line's quota (one query)."""
    demand = F("used_gpus") - F("borrowed_gpus") + F("pending_gpus")
    capped = Case(
        When(business_line__quota_gpus__isnull=True, then=demand),
        default=Least(demand, F("business_line__quota_gpus")),
        output_field=IntegerField(),
    )
    rows = list(
        UsageSample.objects.filter(
            queue__isnull=True, at__gte=now - timedelta(seconds=HORIZONS_S[-1]), at__lte=now
        )
        .values("at")
        .annotate(total=Sum(capped))
        .values_list("at", "total")
    )
    peaks = [0] * len(HORIZONS_S)
    for at, total in rows:
        age = (now - at).total_seconds()
        for i, h in enumerate(HORIZONS_S):
            if age <= h and (total or 0) > peaks[i]:
                peaks[i] = total
    return tuple(peaks) if rows else ()


def recent_evictions(now: datetime, cooldown_s: float) -> tuple[dict[int, float], dict[int, float]]:
    """Last eviction (epoch seconds) within the cool-down, per job id and per queue id.

    A stop for online inference (reason ``inference``: traffic took a shared node's GPUs
    back) starts the job's own cool-down but not its queue's: the queue cool-down is for
    lenders reclaiming what the queue borrowed, and on the live demo inference stops on
    shared nodes kept whole experiment queues from borrowing most of the time."""
    if cooldown_s <= 0:
        return {}, {}
    rows = (
        Eviction.objects.filter(at__gte=now - timedelta(seconds=cooldown_s))
        .exclude(reason=CONSOLIDATION)
        .values_list("job_id", "queue_id", "at", "reason")
    )
    by_job: dict[int, float] = {}
    by_queue: dict[int, float] = {}
    for job_id, queue_id, at, reason in rows:
        t = to_epoch(at)
        if t is None:
            continue
        by_job[job_id] = max(by_job.get(job_id, t), t)
        if reason != INFERENCE_STOP:
            by_queue[queue_id] = max(by_queue.get(queue_id, t), t)
    return by_job, by_queue
