"""The replay's exact shortcuts: plans it may skip or shorten without changing a decision.

``ReplayConfig(shortcuts=False)`` turns them off; tests compare both ways.

* A plan is skipped when it could not start anything: no waiting job fits the
  pool's free GPUs and the policy cannot preempt for one.
* Without borrowing and preemption, jobs whose line is at its quota are left out of
  the snapshot: they can neither start nor change the other decisions.
* Without backfill (``fifo``, ``priority``) the engine starts nothing behind the
  first job blocked for capacity, so a plan over the first ``plan_prefix`` (256)
  waiting jobs in the engine's order settles the cycle whenever one of them is
  blocked; a long queue then costs O(256) per plan instead of O(queue).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from scheduling.engine import Code, Plan, PolicyConfig, Tier
from scheduling.engine.policy import is_demoted

from .metrics import Meter
from .pools import Pool, ReplayJob

#: Verdicts that, in a plan without backfill, mean a job was blocked for capacity and
#: so blocked everything after it in its pool (``Planner.consider`` sets head-of-line).
CAPACITY_BLOCK = frozenset(
    {Code.PRIORITY, Code.TOPOLOGY, Code.INSUFFICIENT_GPUS, Code.PREEMPTING, Code.DEMOTED}
)


def head_blocked(decided: Plan) -> bool:
    """Whether some job of the plan waits for capacity (so, without backfill, all behind it)."""
    return any(v.code in CAPACITY_BLOCK for v in decided.verdicts.values())


def candidates(
    pool: Pool, policy: PolicyConfig, held: Mapping[str, Meter], shortcuts: bool = True
) -> list[ReplayJob] | None:
    """The waiting jobs a plan must see, or None when it could not start anything.

    Without borrowing and preemption (every policy but ``full``), a job whose line
    is at its quota can neither start nor change the engine's decisions for the
    others (``Planner.consider`` records QUOTA_EXCEEDED and moves on), and usage
    only grows within a plan, so such jobs are left out. A plan can start nothing
    if no candidate fits in the pool's free GPUs and the policy cannot preempt
    for one (only urgent queues preempt, and anyone within quota may reclaim
    borrowed work). ``held`` maps each line to the meter of the GPUs it holds.
    """
    jobs = list(pool.pending.values())
    if not shortcuts:
        return jobs
    if policy.preemption and (pool.borrowed_running or any(j.tier == Tier.URGENT for j in jobs)):
        return jobs
    if not (policy.borrowing or policy.preemption):
        room = {}
        for line in pool.lines:
            if line.quota_gpus is not None:
                room[line.name] = line.quota_gpus - held[line.name].busy
        if room:
            jobs = [j for j in jobs if j.gpus <= room.get(j.queue, j.gpus)]
    if not jobs or pool.free_total < min(j.gpus for j in jobs):
        return None
    return jobs


def plan_prefix(
    pool: Pool, jobs: list[ReplayJob], policy: PolicyConfig, k: int, held: Mapping[str, Meter]
) -> list[ReplayJob] | None:
    """Without backfill, the first ``k`` jobs in the engine's order, or None (sorts ``jobs``).

    With backfill, borrowing and preemption all off (``fifo``, ``priority``), the
    engine starts jobs in its order until the first one blocked for capacity and
    nothing after it (head-of-line blocking), and a job's fate depends only on the
    jobs before it. So if a plan over the first K jobs ends with one of them
    blocked for capacity, a plan over all of them starts exactly the same jobs.
    The order is the engine's: ``(submitted_at, id)`` under ``strict_fifo``, else
    ``(-tier, demoted, line share, submitted_at, id)`` with the line share as in
    ``Planner._line_shares`` (GPUs held / line quota, or / pool size without one).
    """
    if not k or len(jobs) <= k or policy.backfill or policy.borrowing or policy.preemption:
        return None
    if policy.strict_fifo:
        jobs.sort(key=lambda j: (j.submit, j.idx))
        return jobs[:k]
    if policy.starvation_bound_s is not None or policy.order_by_work or policy.share_bands:
        return None  # the prefix below mirrors only the exact-share order (``aging.py``)
    share: dict[str, float] = {}
    for line in pool.lines:
        busy = held[line.name].busy
        quota = line.quota_gpus
        if quota is None:
            share[line.name] = busy / (pool.capacity or 1)
        elif quota <= 0:
            share[line.name] = math.inf if busy else 0.0
        else:
            share[line.name] = busy / quota
    jobs.sort(
        key=lambda j: (-j.tier, is_demoted(j.evictions, policy), share[j.queue], j.submit, j.idx)
    )
    return jobs[:k]
