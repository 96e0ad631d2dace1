"""The result of a replay: per-queue and overall figures, in one field order (docs/replay.md).

Pure: reads a finished ``Replay`` and returns plain dicts (JSON as printed by
``--json`` and written by ``--out``). Every figure is defined in ``metrics``.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from monitoring.metrics import EVICTION_ALERT_RATIO, window_eviction_ratio

from . import metrics as m
from .idle import table as idle_table
from .pools import DONE, REJECTED, ReplayJob
from .prediction_error import prediction_error
from .wait_reasons import WaitLedger

if TYPE_CHECKING:
    from .replay import Replay

DAY = 86400.0

FIELD_ORDER = (
    "jobs",
    "finished",
    "rejected",
    "unfinished",
    "capacity_gpus",
    "quota_gpus",
    "avg_queue_s",
    "median_queue_s",
    "p95_queue_s",
    "p99_queue_s",
    "max_queue_s",
    "avg_jct_s",
    "utilization",
    "backlog_utilization",
    "fragmentation",
    "avg_waiting_jobs",
    "max_waiting_jobs",
    "preemptions",
    "evictions",
    "migrations",
    "moves",
    "runs",
    "eviction_ratio",
    "eviction_ratio_gpu_time",
    "jobs_demoted",
    "borrowed_starts",
    "swaps",
    "peak_window_eviction_ratio",
    "queues_over_alert_line",
)

#: Keys of ``overall`` that measure the wall clock (differ between identical runs).
TIMING_KEYS = ("plan_wall_s", "wall_s", "sim_days_per_wall_s")


def ordered(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with the keys of ``FIELD_ORDER`` first, in that order, then the others."""
    out = {k: d[k] for k in FIELD_ORDER if k in d}
    out.update((k, v) for k, v in d.items() if k not in out)
    return out


def job_stats(jobs: list[ReplayJob], waits: WaitLedger) -> tuple[dict[str, Any], list[float]]:
    """Counts, queueing delays (and what they were spent waiting for) and JCTs of
    ``jobs``; also their sorted queueing delays."""
    finished = [j for j in jobs if j.state == DONE]
    delays = sorted(j.first_start - j.submit for j in finished)  # type: ignore[operator]
    jcts = [j.finish - j.submit for j in finished]  # type: ignore[operator]
    runs = sum(j.runs for j in jobs)
    evictions = sum(j.evictions for j in jobs)
    # A restart after a move (consolidation) continues the same run for the eviction
    # ratio: the ratio is evictions over runs started other than by a move, as before #19.
    moves = sum(j.moves for j in jobs)
    own_runs = runs - moves
    stats = {
        "jobs": len(jobs),
        "finished": len(finished),
        "rejected": sum(1 for j in jobs if j.state == REJECTED),
        "unfinished": sum(1 for j in jobs if j.state not in (DONE, REJECTED)),
        "avg_queue_s": m.rounded(m.mean(delays), 1),
        "median_queue_s": m.rounded(m.quantile(delays, 0.5), 1),
        "p95_queue_s": m.rounded(m.quantile(delays, 0.95), 1),
        # the longest waits: what starvation is about (#19)
        "p99_queue_s": m.rounded(m.quantile(delays, 0.99), 1),
        "max_queue_s": m.rounded(delays[-1], 1) if delays else None,
        "avg_jct_s": m.rounded(m.mean(jcts), 1),
        "wait_by_reason_s": waits.per_job([j.idx for j in finished]),
        "runs": runs,
        "evictions": evictions,
        "moves": moves,
        "eviction_ratio": m.rounded(evictions / own_runs if own_runs > 0 else 0.0),
        # R4's ratio, the one the portal shows: GPU time of evicted runs over GPU time given
        "eviction_ratio_gpu_time": window_eviction_ratio(
            sum(j.evicted_gpu_s for j in jobs), sum(j.gpu_s for j in jobs)
        )
        or 0.0,
        "jobs_moved": sum(1 for j in jobs if j.moves),
        "jobs_demoted": sum(1 for j in jobs if j.demoted),
    }
    return stats, delays


def moved_restarts(restarts: list[tuple[float, bool]]) -> dict[str, Any]:
    """How moved jobs came back: the average and p90 seconds from a move's stop to the
    restart, and the share restarted in the room kept for them (``kept_rooms``)."""
    waits = sorted(w for w, _ in restarts)
    return {
        "moved_restart_avg_s": m.rounded(m.mean(waits), 1),
        "moved_restart_p90_s": m.rounded(m.quantile(waits, 0.9), 1),
        "moved_restarts_in_kept_room": m.rounded(
            sum(1 for _, kept in restarts if kept) / len(restarts) if restarts else None
        ),
    }


def per_queue(r: Replay) -> dict[str, dict[str, Any]]:
    """The figures of each trace queue, in the workload's queue order."""
    layout = r.layout
    by_queue: dict[str, list[ReplayJob]] = {q: [] for q in r.w.queues}
    for j in r.jobs:
        by_queue[j.queue].append(j)
    out = {}
    for q in r.w.queues:
        st, _ = job_stats(by_queue[q], r.waits)
        qm = r.qmeter[q]
        frag = r.pools[q].frag.value() if layout.kind == "isolated" else None
        st.update(
            capacity_gpus=layout.capacity[q],
            quota_gpus=layout.quota[q],
            utilization=m.rounded(qm.utilization()),
            backlog_utilization=m.rounded(qm.backlog_utilization()),
            fragmentation=m.rounded(frag),
            avg_waiting_jobs=m.rounded(qm.avg_waiting(), 2),
            max_waiting_jobs=qm.max_waiting,
            preemptions=r.preemptions[q],
            migrations=r.migrations[q],
            borrowed_starts=r.borrowed_starts[q],
            swaps=r.swaps[q],
        )
        out[q] = ordered(st)
    return out


def per_tier(r: Replay) -> dict[str, dict[str, Any]]:
    """The job figures of each priority tier (urgent first): who pays for a policy."""
    by_tier: dict[Any, list[ReplayJob]] = {}
    for j in r.jobs:
        by_tier.setdefault(j.tier, []).append(j)
    return {
        tier.label: ordered(job_stats(by_tier[tier], r.waits)[0])
        for tier in sorted(by_tier, key=lambda t: -int(t))
    }


def longest_waits(jobs: list[ReplayJob], waits: WaitLedger, n: int = 5) -> list[dict[str, Any]]:
    """The ``n`` finished jobs that waited longest for their first start, longest first:
    who starved, and for what (seconds per pending reason) (#19)."""
    finished = (j for j in jobs if j.state == DONE)
    longest = heapq.nsmallest(n, finished, key=lambda j: (j.submit - j.first_start, j.idx))  # type: ignore[operator]
    return [
        {
            "job": j.key,
            "queue": j.equeue,
            "gpus": j.gpus,
            "wait_s": m.rounded(j.first_start - j.submit, 1),  # type: ignore[operator]
            "predicted_s": m.rounded(j.predicted_s, 1),
            "duration_s": m.rounded(j.duration, 1),
            "wait_by_reason_s": {
                k: round(v, 1)
                for k, v in sorted(waits.charges.get(j.idx, {}).items(), key=lambda kv: -kv[1])
            },
        }
        for j in longest
    ]


def result_of(r: Replay, end: float, wall: float) -> dict[str, Any]:
    """The whole result of a replay that ended at virtual time ``end`` after ``wall`` s."""
    layout = r.layout
    overall, delays = job_stats(r.jobs, r.waits)
    scattered = sum(p.frag.scattered_s for p in r.pools.values())
    idle = sum(p.frag.idle_s for p in r.pools.values())
    by_cause: dict[str, float] = {}
    for p in r.pools.values():
        for cause, gs in p.frag.by_cause.items():
            by_cause[cause] = by_cause.get(cause, 0.0) + gs
    sim_days = end / DAY
    peaks = r.history.peak_ratio if r.history is not None else {}
    overall.update(
        # the engine queues' eviction ratio over the sliding window (72 h), as the portal's
        # alert reads it (3 evictions in the window at least), at its highest; and the
        # queues that passed the alert line (None: the policy does not borrow, no window)
        peak_window_eviction_ratio=(
            max(peaks.values(), default=0.0) if r.history is not None else None
        ),
        queues_over_alert_line=sorted(q for q, x in peaks.items() if x > EVICTION_ALERT_RATIO),
        prediction=prediction_error(r.jobs),
        start_estimates=r.estimates.summary(),
        longest_waits=longest_waits(r.jobs, r.waits),
        idle_gpu_s_by_cause={c: round(gs) for c, gs, _share in idle_table(by_cause)},
        capacity_gpus=layout.total_gpus,
        utilization=m.rounded(r.meter.utilization()),
        backlog_utilization=m.rounded(r.meter.backlog_utilization()),
        fragmentation=m.rounded(scattered / idle if idle > 0 else None),
        avg_waiting_jobs=m.rounded(r.meter.avg_waiting(), 2),
        max_waiting_jobs=r.meter.max_waiting,
        preemptions=sum(r.preemptions.values()),
        migrations=sum(r.migrations.values()),
        **moved_restarts(r.moved_restarts),
        borrowed_starts=sum(r.borrowed_starts.values()),
        swaps=sum(r.swaps.values()),
        simulated_days=round(sim_days, 3),
        plan_calls=r.plan_calls,
        plan_skips=r.plan_skips,
        plan_wall_s=round(r.plan_s, 2),
        wall_s=round(wall, 2),
        sim_days_per_wall_s=round(sim_days / wall, 2) if wall > 0 else None,
    )
    cfg = r.cfg
    return {
        "trace": r.w.trace,
        "source": r.w.source,
        "policy": cfg.policy,
        "layout": layout.kind,
        "pool_gpus": cfg.pool_gpus,
        "window": r.w.window_label,
        "window_s": r.window,
        "seed": cfg.seed,
        "cycle_s": cfg.cycle_s,
        "replan_s": cfg.replan_s,
        "predict_quantile": cfg.predict_quantile,
        "true_runtimes": cfg.true_runtimes,
        "borrow": dict(cfg.borrow),
        "order": dict(cfg.order),
        "layout_rule": layout.rule,
        "overall": ordered(overall),
        "per_queue": per_queue(r),
        "per_tier": per_tier(r),
        "series": {
            "bucket_s": cfg.bucket_s,
            "utilization": r.meter.series(end),
            "queue_delay_percentiles": m.percentiles(delays),
        },
    }
