"""Policy rules shared by the planner and the invariant checker.

Ordering, who may preempt whom, the job-shape arithmetic and the time model
(when running work is expected to free its GPUs) live here so that ``plan()``
and ``check_plan()`` apply one definition of each.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from .types import (
    PREEMPTING,
    PendingJob,
    PolicyConfig,
    QueueView,
    RunningJob,
    Tier,
    default_preempts,
)


def is_demoted(preemption_count: int, policy: PolicyConfig) -> bool:
    """R3: a job preempted more than ``demote_after`` times is demoted."""
    return preemption_count > policy.demote_after


def may_borrow(preemptible: bool, demoted: bool, policy: PolicyConfig) -> bool:
    """Whether the policy lets a waiting job borrow idle capacity beyond its quota at all:
    borrowing on, the job preemptible and not demoted (the plan's own rules, cool-downs,
    forecast and cap, come on top: ``borrowing.py``). One rule for the planner, the
    idle-by-cause reading and the replay."""
    return policy.borrowing and bool(preemptible) and not demoted


def queue_preempts(queue: QueueView | None, tier: Tier) -> frozenset[Tier]:
    """Tiers a job of ``tier`` in ``queue`` may preempt (strictly lower only)."""
    tier = effective_tier(tier, queue)
    allowed = queue.preempts_tiers if queue is not None else default_preempts(tier)
    return frozenset(t for t in allowed if t < tier)


def swaps_before_evicting(job: PendingJob, queue: QueueView | None, policy: PolicyConfig) -> bool:
    """Whether ``job``, short of its quota, displaces its own scope's preemptible work rather
    than evicting it (``quota_swap.py``): it may not borrow, its queue may preempt (R2:
    ``urgent``), and swap, borrowing and preemption are on. Such a job swaps in the first
    pass, without the displaced queues' borrowing rules: for it the alternative to a swap is
    an eviction, not a wait (the displaced work runs on, and goes only if a lender needs its
    GPUs back). One rule for the planner and ``check_borrowing``."""
    return (
        policy.swap_quota
        and policy.borrowing
        and policy.preemption
        and not may_borrow(job.preemptible, is_demoted(job.preemption_count, policy), policy)
        and bool(queue_preempts(queue, job.tier))
    )


def effective_tier(tier: Tier, queue: QueueView | None) -> Tier:
    """A job never ranks above its queue's tier (Q2), whatever it claims."""
    return tier if queue is None or tier <= queue.tier else queue.tier


def job_runtime(job: PendingJob, policy: PolicyConfig) -> float:
    """Predicted runtime used for backfill; conservative default when unknown."""
    rt = job.predicted_runtime_s
    if rt is None or rt <= 0:
        return policy.default_runtime_s
    return float(rt)


def _predicted_end(job: RunningJob, policy: PolicyConfig) -> float:
    """The run's predicted end, or its start plus the conservative default when unknown."""
    end = job.predicted_end
    return job.started_at + policy.default_runtime_s if end is None else float(end)


def overruns(job: RunningJob, now: float, policy: PolicyConfig) -> bool:
    """Whether a running (not preempting) job is past its predicted end, so that
    ``running_end`` takes it to need ``overrun_s`` more."""
    return job.state != PREEMPTING and _predicted_end(job, policy) <= now


def running_end(job: RunningJob, now: float, policy: PolicyConfig) -> float:
    """When a running job is expected to free its GPUs.

    A preempting job is gone by its deadline (now if unknown or past). A running
    job past its predicted end (``overruns``) is assumed to need ``overrun_s`` more.
    """
    if job.state == PREEMPTING:
        deadline = job.preempt_deadline
        return now if deadline is None or deadline < now else float(deadline)
    end = _predicted_end(job, policy)
    return max(end, now + policy.overrun_s) if end <= now else end


def foreseen_end(job: RunningJob, now: float, policy: PolicyConfig) -> float:
    """When a running job is foreseen to free its GPUs, for choosing a reservation's nodes
    (``PolicyConfig.overrun_foresight``): ``running_end``, except that a run past its
    predicted end (``overruns``) is foreseen to run ``overrun_foresight`` times as long
    again as it has run (at least ``overrun_s``): it has outlived what its history
    predicted, and on Philly such runs had a median of 18 hours left, 0.77 times what they
    had run (docs/replay.md, session 38)."""
    end = running_end(job, now, policy)
    if overruns(job, now, policy):
        return max(end, now + policy.overrun_foresight * (now - job.started_at))
    return end


def shape_counts(gpus: int, gpus_per_node: int | None, node_gpus: int) -> tuple[int, int, int]:
    """(nodes k, GPUs per node c, GPUs on the last node).

    Up to ``node_gpus`` GPUs (and no smaller ``gpus_per_node``) go on one node.
    Larger jobs spread evenly over the fewest nodes (whole nodes when the size
    is a multiple of the node size), or use ``gpus_per_node`` per node.
    """
    gpus = max(1, int(gpus))
    node_gpus = max(1, int(node_gpus))
    if gpus_per_node is not None and gpus_per_node >= 1:
        c = int(gpus_per_node)
        if gpus <= c:
            return 1, gpus, gpus
        k = math.ceil(gpus / c)
        return k, c, gpus - c * (k - 1)
    if gpus <= node_gpus:
        return 1, gpus, gpus
    k = math.ceil(gpus / node_gpus)
    c = math.ceil(gpus / k)
    return k, c, gpus - c * (k - 1)


def victim_cost_gpu_h(
    gpus: int, started_at: float, last_checkpoint_at: float | None, now: float, given_weight: float
) -> float:
    """What stopping a run now costs, in GPU-hours: the progress lost since its last
    checkpoint, plus ``given_weight`` per GPU-hour the run has been given (R4 counts an
    evicted run's whole GPU time). Victim selection and inference yields both weigh it.
    A checkpoint from before this run started (the one it restarted from) loses nothing of
    this run's work before its start."""
    since = started_at if last_checkpoint_at is None else max(started_at, last_checkpoint_at)
    lost_s = max(0.0, now - since)
    given_s = max(0.0, now - started_at)
    return gpus * (lost_s + given_weight * given_s) / 3600.0


def given_gpu_s(job: RunningJob, now: float) -> float:
    """GPU-seconds the job's current run has been given by ``now``: what R4's eviction
    ratio would count as evicted if it stopped now (``Eviction.gpu_seconds``)."""
    return job.gpus * max(0.0, now - job.started_at)


#: A displaced run is weighed by the GPU time it will have been given an hour from now, what
#: a reclaim then would count as evicted (R4): its past, and its GPUs for the hour to come.
AT_RISK_HORIZON_S = 3600.0


def at_risk_per_gpu(r: RunningJob, now: float) -> float:
    """Seconds of run per GPU of ``r`` a reclaim an hour from now would count as evicted."""
    return max(0.0, now - r.started_at) + AT_RISK_HORIZON_S


def at_risk(r: RunningJob, now: float) -> float:
    """GPU-seconds of ``r`` a reclaim an hour from now would count as evicted (what a quota
    swap puts at risk by displacing it, ``quota_swap.py``)."""
    return r.gpus * at_risk_per_gpu(r, now)


def swap_too_costly(
    job: PendingJob, displaced: Iterable[RunningJob], now: float, policy: PolicyConfig
) -> bool:
    """Whether displacing ``displaced`` so that ``job`` starts puts more GPU time at risk
    than ``policy.swap_risk_cap_gpu_h`` allows per GPU the job starts. One rule for the
    planner (``QuotaSwap.consider``) and ``check_borrowing``."""
    cap = policy.swap_risk_cap_gpu_h
    if cap <= 0:
        return False
    return sum(at_risk(r, now) for r in displaced) > cap * 3600.0 * max(job.gpus, 1) + 1e-6


def inference_ok(job: PendingJob) -> bool:
    """Training may share an inference node only if preemptible and willing."""
    return bool(job.preemptible) and not job.avoid_inference


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a plan is computed.

    A plan allocates many small, short-lived, acyclic objects; with tens of
    thousands of live snapshot objects, generation-2 collections triggered by
    those allocations cost ~20 % at 20,000 pending jobs. Reference counting
    still frees everything; the collector is re-enabled (if it was on) on exit.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
