"""When the jobs waiting for a queue's or line's quota room get it (Q4, V1).

A job waiting for quota room (``QUOTA_EXCEEDED``) is estimated to start when its scope has
room for it. Before session 36 the jobs given ``QUOTA_EXCEEDED`` ahead of it kept the room
they were given for ever: the 3,000th job waiting for a line's room needed the line's
running work to release its own GPUs *plus every GPU of the jobs ahead of it*, more than
the line holds, so it read "no estimate" however soon its turn would come. On the
10,000-GPU demo that was two thirds of the time jobs waited for quota.

``first_fit`` plays the scope's room forward as the planner hands it out, plan after plan:
at each instant the running work (or a job started here) gives room back, the waiting
jobs are taken in the plan's order and each one the room fits starts (a small job behind a
big one that does not fit yet starts first, as it would), holds its room for its predicted
runtime and gives it back. A job's estimate is the instant it starts there.

Like every estimate beyond a reservation it foresees no work arriving later, nor a job
starting by borrowing or by a quota swap instead, nor whether nodes are free; the replay
and ``bench_demo`` measure how right it is (``start_estimates``). It changes no decision:
only the verdicts' estimated starts.

Pure: no Django.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Sequence


def first_fit(
    room: int, releases: Iterable[tuple[float, int]], jobs: Sequence[tuple[int, float]], now: float
) -> list[float | None]:
    """When each of ``jobs`` (``(GPUs, predicted runtime)``, in the plan's order) starts:
    ``room`` is the scope's room now (below 0 when it holds more than its quota),
    ``releases`` the ``(when, GPUs)`` its running work gives back, in time order. None for
    a job the room never fits."""
    out: list[float | None] = [None] * len(jobs)
    waiting: dict[int, deque[int]] = {}  # GPUs -> the jobs of that size, in order
    for i, (gpus, _runtime) in enumerate(jobs):
        waiting.setdefault(gpus, deque()).append(i)
    sizes = sorted(waiting)
    ends: list[tuple[float, int]] = []  # (when, GPUs) the jobs started here give back
    left = len(jobs)

    def start_those_that_fit(t: float) -> None:
        nonlocal room, left
        while left:
            first: int | None = None  # the size whose first job comes first in the order
            for size in sizes:
                if size > room:
                    break
                if waiting[size] and (first is None or waiting[size][0] < waiting[first][0]):
                    first = size
            if first is None:
                return
            i = waiting[first].popleft()
            out[i] = t
            room -= first
            left -= 1
            heapq.heappush(ends, (t + jobs[i][1], first))

    later = iter(releases)
    nxt = next(later, None)
    while nxt is not None and nxt[0] <= now:  # what comes back now is room now
        room += nxt[1]
        nxt = next(later, None)
    start_those_that_fit(now)
    while left and (nxt is not None or ends):
        t = ends[0][0] if ends else math.inf
        if nxt is not None and nxt[0] < t:
            t = nxt[0]
        while nxt is not None and nxt[0] == t:  # every release of this instant first
            room += nxt[1]
            nxt = next(later, None)
        while ends and ends[0][0] == t:
            room += heapq.heappop(ends)[1]
        start_those_that_fit(t)
    return out
