"""People of a line take turns (``PolicyConfig.user_turns``, on in ``full``).

Within a tier, a line's jobs were ordered by submit time alone (after the fair-share band
of the line, ``aging``): one person who submitted 300 jobs at nine held the line's quota
until all of them had started, and a colleague's one job submitted at one past nine waited
behind every one of them. Slurm's fair-share tree goes down to the user and YuniKorn sorts
a queue's applications by their users' usage; here the people of a line take turns.

The rule: among the jobs of one line, tier and demotion (``group``), the next place goes
to the person holding the fewest GPUs of the line, counting the GPUs of their running jobs
and of their jobs already placed ahead in this order; ties go to the job that came first
in the plain order, and each person's own jobs keep their plain order. Only the line's own
places in the plain order are handed out again: where the line's jobs sit among other
lines' jobs does not change, nor does anything about overdue jobs (the starvation bound,
``aging``: they come first, oldest first, and are not reordered). A line whose waiting
jobs are all one person's keeps its plain order, so replays of traces without users
(every owner ``""``) plan exactly as before.

Pure: no Django.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Mapping, Sequence

from .types import PendingJob


def take_turns(
    order: Sequence[PendingJob],
    held: Mapping[tuple[str, str], int],
    groups: Sequence[Hashable | None],
) -> list[PendingJob]:
    """``order`` with each group's jobs (``groups[i]``: the group of ``order[i]``, the jobs
    that take turns together; None for a job left in place) handed out in turns (the
    module's rule). ``held``: GPUs held now by running jobs, by ``(line, owner)``."""
    out = list(order)
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(groups):
        if key is not None:
            members.setdefault(key, []).append(i)
    for places in members.values():
        jobs = [out[i] for i in places]
        if len({job.owner for job in jobs}) > 1:
            for i, job in zip(places, _turns(jobs, held), strict=True):
                out[i] = job
    return out


def _turns(jobs: Sequence[PendingJob], held: Mapping[tuple[str, str], int]) -> list[PendingJob]:
    """One line's jobs (in their plain order) in turns: the person with the fewest GPUs
    held and given so far next, the earlier job first on a tie."""
    mine: dict[str, deque[tuple[int, PendingJob]]] = {}
    for i, job in enumerate(jobs):
        mine.setdefault(job.owner, deque()).append((i, job))
    heap = [
        (held.get((queue[0][1].line, owner), 0), queue[0][0], owner)
        for owner, queue in mine.items()
    ]
    heapq.heapify(heap)
    out: list[PendingJob] = []
    while heap:
        gpus, _i, owner = heapq.heappop(heap)
        queue = mine[owner]
        _, job = queue.popleft()
        out.append(job)
        if queue:
            heapq.heappush(heap, (gpus + job.gpus, queue[0][0], owner))
    return out
