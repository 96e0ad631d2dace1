"""Rooms kept for moved jobs (#19): a move restarts the job at once, where the plan
kept room for it.

A plan that moves a job (consolidation or defragmentation, ``Migration``) keeps room for
it on an already used node (``Migration.to_node``). The job checkpoints for up to the
grace period first, and later plans would otherwise see that room free: best fit gives
exactly such a hole to the next small job, and the moved job then restarts wherever room
is left (breaking a whole node) or waits its turn in the queue. On the Philly replay
(640 GPUs, seed 0) two moved jobs in three restarted elsewhere and the moved jobs waited
2,376 s on average before restarting (docs/replay.md, "Session 23").

So every plan, from the snapshot alone:

- **while it checkpoints** (``RunningJob.move_to``, ``migrating``, ``preempting``) its
  room is taken from the plan's free capacity (busy until the job's predicted end), so
  no start, move or reservation of the plan uses it (``keep_rooms``);
- **once stopped** (``PendingJob.move_to``) it is considered before every other waiting
  job while its room is still free, and placed there (``restarts``, ``kept_node``): a move
  continues the run; the move's room was its own. It still passes every quota and
  borrowing rule like any start: within its quota, or, if it is over its quota by then
  (the borrowed flags follow the quotas: its queue's borrowed runs may have become its
  quota's while it checkpointed), borrowing its room at once, before the jobs within quota
  are placed, if the borrowing rules let it.

A room that is no longer there (the node left service, is held exclusively, or no longer
has the GPUs free) is not kept: the job then waits its turn like any other.
``check_kept_rooms`` is the invariant checker's part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from .policy import running_end
from .types import PREEMPTING, READY, RUNNING, NodeView, PendingJob, Plan, RunningJob, Snapshot

if TYPE_CHECKING:
    from .planner import Planner


def rooms_kept(snapshot: Snapshot) -> list[tuple[RunningJob, NodeView]]:
    """The moved jobs still checkpointing whose room is kept, with the node: the node is
    ready, not held exclusively and still has their GPUs free (in the snapshot's order,
    while the node's free GPUs last)."""
    moving = [
        r
        for r in snapshot.running
        if r.move_to is not None and r.migrating and r.state == PREEMPTING
    ]
    if not moving:
        return []
    nodes = {n.name: n for n in snapshot.nodes}
    left: dict[str, int] = {}
    kept = []
    for r in moving:
        node = nodes.get(r.move_to)
        if node is None or node.state != READY or node.exclusive:
            continue
        free = left.get(node.name, len(node.free_gpus))
        if free < r.gpus:
            continue
        left[node.name] = free - r.gpus
        kept.append((r, node))
    return kept


def keep_rooms(p: Planner) -> None:
    """Take the kept rooms from the plan's free capacity, busy from now until each moved
    job's predicted end (at the earliest its deadline plus ``overrun_s``)."""
    policy = p.policy
    live = p.live
    index = p.topo.index
    for r, node in rooms_kept(p.s):
        n = index[node.name]
        if not live.usable[n] or live.nfree[n] < r.gpus:
            continue
        live.take(n, r.gpus, False)
        deadline = running_end(r, p.now, policy)
        rest = running_end(replace(r, state=RUNNING), p.now, policy)
        end = max(rest, deadline + policy.overrun_s)
        if live.ends is not None and end > live.ends[n]:
            live.ends[n] = end
        p._start_events.append((end, n, r.gpus))


def kept_node(p: Planner, job: PendingJob) -> int | None:
    """The node whose room was kept for ``job`` if it can still run it there now (None: no
    room kept, or gone)."""
    if job.move_to is None:
        return None
    n = p.topo.index.get(job.move_to)
    live = p.live
    if n is None or not live.usable[n] or live.nfree[n] < job.gpus:
        return None
    key, k, _c, _last, excl = p.shape(job)
    if k != 1 or excl or not live.node_class(key).elig[n]:
        return None
    return n


def restarts(p: Planner, order: Sequence[PendingJob]) -> tuple[list[PendingJob], list[PendingJob]]:
    """``order`` split in two: the moved jobs whose room is still free (the plan considers
    them first, each through both passes: one now over its quota borrows its own room
    before the jobs within quota are placed), then the others."""
    first = [j for j in order if j.move_to is not None and kept_node(p, j) is not None]
    if not first:
        return [], list(order)
    ids = {j.id for j in first}
    return first, [j for j in order if j.id not in ids]


def check_kept_rooms(snapshot: Snapshot, plan: Plan) -> list[str]:
    """No start or move of the plan takes a room kept for a moved job still checkpointing
    (empty list = OK)."""
    kept: dict[str, int] = {}
    for r, node in rooms_kept(snapshot):
        kept[node.name] = kept.get(node.name, 0) + r.gpus
    if not kept:
        return []
    used = dict.fromkeys(kept, 0)
    for s in plan.starts:
        for slot in s.placement:
            if slot.node in used:
                used[slot.node] += len(slot.gpus)
    running = {r.id: r for r in snapshot.running}
    for m in plan.migrations:
        if m.to_node in used and m.job_id in running:
            used[m.to_node] += running[m.job_id].gpus
    free = {n.name: len(n.free_gpus) for n in snapshot.nodes}
    return [
        f"node {name}: the room kept for moved jobs ({kept[name]} GPUs) is taken"
        for name in sorted(kept)
        if used[name] + kept[name] > free[name]
    ]


__all__ = ["check_kept_rooms", "keep_rooms", "kept_node", "restarts", "rooms_kept"]
