"""The turns of the jobs waiting for a queue's or line's quota room (Q4, V1).

A job waiting for quota room (``QUOTA_EXCEEDED``) is estimated to start when the room it
lacks comes, after the jobs given ``QUOTA_EXCEEDED`` before it in the same scope have had
theirs (``quota_room.QuotaRoom.reason``). Before session 36 the jobs ahead kept the room
they were given for ever: the 3,000th job waiting for a line's room needed the line's
running work to release its own GPUs *plus every GPU of the jobs ahead of it*, more than
the line holds, so it read "no estimate" however soon its turn would come. On the 10,000-GPU
demo that was two thirds of the time jobs waited for quota.

``Turns`` keeps, per scope, the jobs ahead as they will run: each takes its room when
enough has come (in the plan's order: no job's turn comes before the one ahead of it) and
gives it back after its predicted runtime, so the room goes round. The room at an instant
``t`` is the room left now, plus what the running work (and this plan's starts) has
released by ``t``, less what the jobs ahead hold at ``t``.

Like every estimate beyond a reservation it foresees no work arriving later ahead of the
job, nor a job ahead that starts by borrowing instead; the replay and ``bench_demo``
measure how right it is (``start_estimates``). It changes no decision: only the verdicts'
estimated starts.

Pure: no Django.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable
from heapq import merge


class Turns:
    """One scope's jobs waiting for quota room, as their turns come (the module's rule)."""

    __slots__ = ("at", "back", "held")

    def __init__(self, now: float) -> None:
        self.at = now  # no later job of the scope takes room before this instant
        # (when, GPUs) the jobs ahead give back, all after ``at``
        self.back: list[tuple[float, int]] = []
        self.held = 0  # GPUs the jobs ahead hold at ``at``

    def start(self, gpus: int, room: int, releases: Iterable[tuple[float, int]]) -> float | None:
        """When a job of ``gpus`` gets its turn: ``room`` is the room at ``at`` before the
        jobs ahead take theirs (the room left now plus what was released by ``at``),
        ``releases`` the later releases of the running work in time order. None if the
        room never comes."""
        room -= self.held
        if room >= gpus:
            return self.at
        for t, g in merge(releases, self.back):
            room += g
            if room >= gpus:
                return t
        return None

    def take(self, start: float, gpus: int, end: float) -> None:
        """A job of ``gpus`` takes its turn at ``start`` and gives the room back at
        ``end``; later jobs' turns come after it."""
        start = max(start, self.at)
        if start > self.at:
            gone = 0
            while self.back and self.back[0][0] <= start:
                gone += self.back.pop(0)[1]
            self.held -= gone
            self.at = start
        if end > start:
            self.held += gpus
            insort(self.back, (end, gpus))
