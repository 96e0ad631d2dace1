"""Quota, guarantee and borrowing arithmetic over the running jobs (Q4, Q5, Q7).

Which running jobs are *borrowed* is re-derived every plan rather than trusted
from history: per queue (and per line) the jobs are stacked in the order
non-preemptible first, then preemptible ones not flagged as borrowed, then those
flagged, each group oldest first; preemptible jobs that end above the quota are
borrowed. A job borrowed at either level is borrowed. Non-borrowed use
(``nb_*``) is what counts against a quota; borrowed work sits on idle capacity
and is the first thing reclaimed.

The flags are settled: the derivation is repeated with the flags set to what it found
until nothing changes (``settle``), so a flagged job its scope no longer needs above the
quota (work of the scope ended) is not borrowed and stacks by its start again, and the
result is the flags the plan writes back (``Plan.marks``). What is borrowed then only
shrinks from one round to the next (the jobs below the flagged ones were within the
quota before), so it ends; in steady state one round confirms the flags.

Guarantees protect *active* use (running, not already preempting): a queue's
victims in one plan may total at most ``active - guarantee``.

The *number* every page, the API and ``/metrics`` show as a scope's borrowed GPUs is
``borrowed_gpus(used, quota)``: its use beyond its own quota. Which *jobs* the scheduler
reclaims first (``Usage.borrowed_ids``) is the job-level rule above; the two differ by job
granularity (a job straddling the quota is reclaimable in full) and by level (a job
above its queue's quota is reclaimable even while its line is within quota).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .types import RUNNING, LineView, Mark, QueueView, RunningJob, Snapshot


def borrowed_gpus(used: int, quota: int | None) -> int:
    """GPUs a scope (a queue or a line) holds beyond its own quota: ``max(0, used - quota)``,
    0 for a scope without a quota of its own (a queue bounded only by its line). The one
    definition of "borrowed" the portal shows; ``used - borrowed`` is use within quota."""
    return 0 if quota is None else max(0, used - quota)


@dataclass(slots=True)
class Usage:
    held_queue: dict[str, int]
    held_line: dict[str, int]
    nb_queue: dict[str, int]
    nb_line: dict[str, int]
    active_queue: dict[str, int]
    active_line: dict[str, int]
    borrowed_ids: frozenset[int]


def _borrowed_over(jobs: list[RunningJob], quota: int | None, flagged: set[int]) -> list[int]:
    if quota is None:
        return []
    total = 0
    for j in jobs:
        total += j.gpus
    if total <= quota:
        return []
    jobs = sorted(
        jobs, key=lambda j: (j.preemptible, j.preemptible and j.id in flagged, j.started_at, j.id)
    )
    out: list[int] = []
    used = 0
    over = False
    for j in jobs:
        used += j.gpus
        if not over and used > quota and j.preemptible:
            over = True
        if over and j.preemptible:
            out.append(j.id)
    return out


def settle(borrowed_with: Callable[[set[int]], set[int]], flagged: set[int]) -> set[int]:
    """The borrowed jobs, derived again with the flags set to the last result until it
    no longer changes (see the module's words)."""
    borrowed = borrowed_with(flagged)
    while borrowed != flagged:
        flagged, borrowed = borrowed, borrowed_with(borrowed)
    return borrowed


def derive_usage(
    running: Iterable[RunningJob],
    queues: dict[str, QueueView],
    lines: dict[str, LineView],
) -> Usage:
    by_queue: dict[str, list[RunningJob]] = defaultdict(list)
    by_line: dict[str, list[RunningJob]] = defaultdict(list)
    held_queue: dict[str, int] = defaultdict(int)
    held_line: dict[str, int] = defaultdict(int)
    active_queue: dict[str, int] = defaultdict(int)
    active_line: dict[str, int] = defaultdict(int)
    flagged: set[int] = set()
    for r in running:
        if r.borrowed:
            flagged.add(r.id)
        by_queue[r.queue].append(r)
        by_line[r.line].append(r)
        held_queue[r.queue] += r.gpus
        held_line[r.line] += r.gpus
        if r.state == RUNNING:
            active_queue[r.queue] += r.gpus
            active_line[r.line] += r.gpus
    quota_q = {name: q.quota_gpus for name, q in queues.items()}
    quota_l = {name: line.quota_gpus for name, line in lines.items()}

    def borrowed_with(flagged: set[int]) -> set[int]:
        out: set[int] = set()
        for name, jobs in by_queue.items():
            out.update(_borrowed_over(jobs, quota_q.get(name), flagged))
        for name, jobs in by_line.items():
            out.update(_borrowed_over(jobs, quota_l.get(name), flagged))
        return out

    borrowed = settle(borrowed_with, flagged)
    nb_queue: dict[str, int] = defaultdict(int)
    nb_line: dict[str, int] = defaultdict(int)
    for name, jobs in by_queue.items():
        for r in jobs:
            if r.id not in borrowed:
                nb_queue[name] += r.gpus
                nb_line[r.line] += r.gpus
    return Usage(
        held_queue=dict(held_queue),
        held_line=dict(held_line),
        nb_queue=dict(nb_queue),
        nb_line=dict(nb_line),
        active_queue=dict(active_queue),
        active_line=dict(active_line),
        borrowed_ids=frozenset(borrowed),
    )


def marks(
    running: Iterable[RunningJob], borrowed: frozenset[int], decided: set[int]
) -> tuple[Mark, ...]:
    """The flags a plan writes back: each running job's that the settled accounting
    (``borrowed``) disagrees with, except jobs the plan itself stops, moves or displaces
    (``decided``; a swap flags what it displaces)."""
    return tuple(
        Mark(r.id, r.id in borrowed)
        for r in sorted(running, key=lambda r: r.id)
        if r.state == RUNNING and r.borrowed != (r.id in borrowed) and r.id not in decided
    )


def snapshot_usage(snapshot: Snapshot) -> Usage:
    return derive_usage(
        snapshot.running,
        {q.name: q for q in snapshot.queues},
        {line.name: line for line in snapshot.lines},
    )


def preemption_budgets(
    usage: Usage, queues: dict[str, QueueView], lines: dict[str, LineView]
) -> tuple[dict[str, int], dict[str, int]]:
    """GPUs each queue/line may lose to preemption in one plan (above guarantee)."""
    bq: dict[str, int] = {}
    for name, active in usage.active_queue.items():
        q = queues.get(name)
        bq[name] = max(0, active - (q.guarantee_gpus if q is not None else 0))
    bl: dict[str, int] = {}
    for name, active in usage.active_line.items():
        line = lines.get(name)
        bl[name] = max(0, active - (line.guarantee_gpus if line is not None else 0))
    return bq, bl
