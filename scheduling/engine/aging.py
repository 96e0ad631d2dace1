"""The order of the waiting jobs, with the starvation bound (#19).

``plan()`` considers the waiting jobs one by one in the order ``order`` returns, and
reservations (``PolicyConfig.max_reservations``) go to the first jobs blocked for
capacity in that order. Without ``strict_fifo`` the order is:

1. tier, highest first (a job never ranks above its queue's tier);
2. **overdue jobs first**: a job waiting ``PolicyConfig.starvation_bound_s`` or longer
   since it was submitted is *overdue*; overdue jobs of a tier come before every other
   job of that tier, oldest first, whatever their line's share, size or demotion (with
   ``overdue_across_tiers``, before every job that is not overdue, whatever its tier:
   a steady stream of higher-tier work of a line at its quota otherwise keeps its
   lower tiers waiting for ever);
3. demoted jobs last (preempted more than ``demote_after`` times);
4. the line's fair-share band: the share of its quota the line holds, in steps of
   ``1 / share_bands`` (``share_bands`` 0: the exact share, the order before #19);
5. with ``order_by_work``, the smallest predicted work first: GPUs x the predicted
   runtime (``PendingJob.predicted_runtime_s``, the runtime quantile of ``predict.py``;
   ``default_runtime_s`` when unknown);
6. submit time, then id;
7. with ``user_turns`` (on in ``full``), the people of a line take turns in the line's
   places of that order (``user_turns.py``): overdue jobs are not reordered;
8. last, a person's jobs put first among their own (Slurm's ``scontrol top``) take the
   first of that person's places in the order (``own_order.py``): nobody else's place
   changes.

The promise (stated in docs/engine.md, checked by tests/engine/test_starvation.py): an
overdue job is behind only jobs of a higher tier and older overdue jobs of its tier, so
once it is among the first ``max_reservations`` of them blocked for capacity it holds a
reservation that no later job can take (backfill only fits work predicted to end before
it); with predicted runtimes that hold, its estimated start never moves later and it
starts by it. Its wait is therefore bounded by the bound plus the time the work ahead of
it at that moment needs to start and finish, instead of depending on what arrives later.

Pure: no Django.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from .own_order import own_first
from .policy import effective_tier, job_runtime
from .types import PendingJob, PolicyConfig, QueueView
from .user_turns import take_turns


def overdue_since(now: float, policy: PolicyConfig) -> float:
    """Jobs submitted at or before this instant are overdue (``-inf``: no bound)."""
    bound = policy.starvation_bound_s
    if bound is None or policy.strict_fifo:
        return -math.inf
    return now - bound


def is_overdue(job: PendingJob, now: float, policy: PolicyConfig) -> bool:
    """Has ``job`` waited the starvation bound or longer (and so goes first in its tier)?"""
    return job.submitted_at <= overdue_since(now, policy)


def share_band(share: float, bands: int) -> float:
    """A line's share of its quota, coarsened to ``bands`` steps per quota (0: exact)."""
    if bands <= 0 or math.isinf(share):
        return share
    return float(math.floor(share * bands))


def order(
    pending: Sequence[PendingJob],
    now: float,
    policy: PolicyConfig,
    queues: Mapping[str, QueueView],
    shares: Mapping[str, float],
    held: Mapping[tuple[str, str], int] | None = None,
) -> list[PendingJob]:
    """The waiting jobs in the order ``plan()`` considers them (see the module docstring).
    ``held``: GPUs held by running jobs per ``(line, owner)``, for ``user_turns``."""
    if policy.strict_fifo:
        return sorted(pending, key=lambda j: (j.submitted_at, j.id))
    key = order_key(now, policy, queues, shares)
    keyed = sorted(((key(j), j) for j in pending), key=itemgetter(0))
    # who takes turns together: a line's jobs of one tier and demotion; overdue jobs
    # (``k[1] == 0``: first, oldest first) are not reordered
    groups = [None if k[1] == 0 else (k[0], k[2], j.line) for k, j in keyed]
    jobs = [j for _k, j in keyed]
    if policy.user_turns:
        jobs = take_turns(jobs, held or {}, groups)
    # each person's own order within their places, once every place is given
    return own_first(jobs, groups)  # take_turns keeps each place's group


def order_key(
    now: float,
    policy: PolicyConfig,
    queues: Mapping[str, QueueView],
    shares: Mapping[str, float],
) -> Callable[[PendingJob], tuple[Any, ...]]:
    """The sort key of ``order`` (without ``strict_fifo``)."""
    since = overdue_since(now, policy)
    demote_after = policy.demote_after
    bands = policy.share_bands
    by_work = policy.order_by_work
    band: dict[str, float] = {name: share_band(s, bands) for name, s in shares.items()}

    across = policy.overdue_across_tiers

    def key(j: PendingJob) -> tuple[Any, ...]:
        tier = -effective_tier(j.tier, queues.get(j.queue))
        if j.submitted_at <= since:
            return (-math.inf if across else tier, 0, False, 0.0, 0.0, j.submitted_at, j.id)
        work = j.gpus * job_runtime(j, policy) if by_work else 0.0
        return (
            tier,
            1,
            j.preemption_count > demote_after,
            band.get(j.line, 0.0),
            work,
            j.submitted_at,
            j.id,
        )

    return key
