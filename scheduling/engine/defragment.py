"""Defragmentation (#19): free whole nodes before a gang asks for them (off by default).

Consolidation (``consolidation.py``) moves jobs only once a gang waits for room, so the
gang waits a grace period more, and only if the budgets allow it then. Small jobs ending
at different times leave holes on many nodes, and when fewer jobs wait than GPUs are free
those holes stay: free GPUs no whole-node job can use. After the plan's starts, with
``defragment_nodes`` > 0, the planner empties up to that many partly used nodes by
moving every job on them into holes on fuller nodes (the least used node first), as
consolidation moves jobs: each checkpoints, stops by the grace deadline and restarts
from its checkpoint on the node the plan keeps for it. A node is emptied only when:

- the free GPUs on partly used nodes are at least a node's worth (there is a whole
  node's room to gather);
- every job on it may move (``consolidation.movable``: preemptible, checkpointable, not
  demoted, not urgent, not borrowed, one node, run ``migrate_min_run_s`` since its
  start) and is predicted to run at least ``defragment_min_left_s`` more (a node about
  to come free by itself is left to do so);
- nothing of this plan starts there and no reservation holds it;
- the moves fit the plan's eviction budget (``max_migrations`` overall, shared with
  consolidation, and ``max_migrations_per_queue``) and the guarantees
  (``accounting.preemption_budgets``): guaranteed and demoted work never moves;
- each job has a destination (``consolidation.destinations``: best fit on another
  already used node that can run it; never a wholly free one).

A move is a migration (``Plan.migrations``, ``for_job_id`` None), not a preemption: it is
counted apart from evictions and never demotes. ``check_migrations`` re-derives the rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .consolidation import MoveBudget, MoveIndex, destinations, enabled, within_budget
from .policy import running_end
from .types import Migration, RunningJob

if TYPE_CHECKING:
    from .consolidation import Consolidation


def scattered_free(c: Consolidation) -> int:
    """Free GPUs on usable nodes that are partly used (what no whole-node job can use)."""
    live, total = c.p.live, c.p.topo.total
    return sum(
        f
        for n, f in enumerate(live.nfree)
        if live.usable[n] and 0 < f < total[n] and n not in c.p.excl_held
    )


def sources(c: Consolidation, index: MoveIndex) -> list[int]:
    """Partly used nodes every job of which may move for defragmentation, least used
    first (fewest GPUs to move, then fewest jobs)."""
    p = c.p
    live, total, policy = p.live, p.topo.total, p.policy
    soon = p.now + policy.defragment_min_left_s
    out: list[tuple[int, int, int]] = []
    for n, ranked in index.ranked.items():
        f = live.nfree[n]
        used = total[n] - f
        if not live.usable[n] or f <= 0 or used <= 0 or index.movable_gpus[n] != used:
            continue
        if p.started_on[n] or n in p.reserved or n in p.excl_held:
            continue
        jobs = [index.by_id[i] for _cost, _g, i, _gpus in ranked]
        if any(v.id in p.victim_ids or running_end(v, p.now, policy) < soon for v in jobs):
            continue
        out.append((used, len(jobs), n))
    out.sort()
    return [n for _used, _k, n in out]


def defragment(c: Consolidation) -> None:
    """Empty up to ``defragment_nodes`` partly used nodes (module docstring)."""
    p = c.p
    policy = p.policy
    if policy.defragment_nodes <= 0 or not enabled(policy):  # off: one read per plan
        return
    scattered = scattered_free(c)
    if scattered < p.topo.max_gpus:
        return
    if c.index is None:
        c.index = MoveIndex(p.s.running, p.usage.borrowed_ids, p.topo, p.now, policy)
    index = c.index
    capacity = c.capacity()
    deadline = p.now + policy.grace_seconds
    emptied: set[int] = set()
    for n in sources(c, index):
        left = policy.max_migrations - len(c.migrations)
        if len(emptied) >= policy.defragment_nodes or left <= 0 or scattered < p.topo.max_gpus:
            return
        if p.topo.total[n] - p.live.nfree[n] != index.movable_gpus[n]:
            continue  # a job moved there in this plan: it would not come free
        jobs = [index.by_id[i] for _cost, _g, i, _gpus in index.ranked[n]]
        budget = MoveBudget(
            left, policy.max_migrations_per_queue, c.per_queue, p.budget_q, p.budget_l,
            p.victim_ids,
        )  # fmt: skip
        if not within_budget([v.id for v in jobs], index.by_id, budget):
            continue
        dest = destinations(jobs, emptied | {n}, capacity, index)
        if dest is None:
            continue
        move(c, jobs, dest, deadline)
        emptied.add(n)
        # once they have gone: n is whole, its holes and those the jobs filled are not
        scattered -= p.topo.total[n]


def move(c: Consolidation, jobs: list[RunningJob], dest: dict[int, int], deadline: float) -> None:
    """Move ``jobs`` to their destinations: charge the budgets, keep room there and release
    their GPUs at the deadline (as ``Consolidation.apply`` does for a gang; the plan decides
    nothing after this, so their new ends need not enter the backfill timeline)."""
    p = c.p
    for v in jobs:
        to = dest[v.id]
        c.migrations.append(Migration(v.id, None, deadline, p.topo.nodes[to].name))
        c.per_queue[v.queue] = c.per_queue.get(v.queue, 0) + 1
        p.mark_leaving(v, deadline)
        p.live.take(to, v.gpus, False)
