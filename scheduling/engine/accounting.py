"""Quota, guarantee and borrowing arithmetic over the running jobs (Q4, Q5, Q7).

Which running jobs are *borrowed* is re-derived every plan rather than trusted
from history: per queue (and per line) the jobs are stacked in the order
non-preemptible first, then preemptible ones not flagged as borrowed, then those
flagged, each group oldest first; preemptible jobs that end above the quota are
borrowed. A job borrowed at either level is borrowed. Non-borrowed use
(``nb_*``) is what counts against a quota; borrowed work sits on idle capacity
and is the first thing reclaimed.

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
from collections.abc import Iterable
from dataclasses import dataclass

from .types import RUNNING, LineView, QueueView, RunningJob, Snapshot


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


def _borrowed_over(jobs: list[RunningJob], quota: int | None) -> list[int]:
    if quota is None:
        return []
    total = 0
    for j in jobs:
        total += j.gpus
    if total <= quota:
        return []
    jobs = sorted(
        jobs, key=lambda j: (j.preemptible, j.preemptible and j.borrowed, j.started_at, j.id)
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
    for r in running:
        by_queue[r.queue].append(r)
        by_line[r.line].append(r)
        held_queue[r.queue] += r.gpus
        held_line[r.line] += r.gpus
        if r.state == RUNNING:
            active_queue[r.queue] += r.gpus
            active_line[r.line] += r.gpus
    borrowed: set[int] = set()
    for name, jobs in by_queue.items():
        q = queues.get(name)
        borrowed.update(_borrowed_over(jobs, q.quota_gpus if q is not None else None))
    for name, jobs in by_line.items():
        line = lines.get(name)
        borrowed.update(_borrowed_over(jobs, line.quota_gpus if line is not None else None))
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
