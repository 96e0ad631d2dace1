"""Release timeline and reservation search (S3: backfill with predicted runtimes).

Every GPU held now is expected back at a known time: running work at its
predicted end (``policy.running_end``), preempted work at its grace deadline,
work started in this plan after its predicted runtime. A node held exclusively
comes back whole when its holder ends.

``earliest_start`` sweeps those releases in time order, tracking per block how
many nodes qualify for the job's shape, and stops at the first instant a valid
placement exists: O(nodes + releases) per reservation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .placement import Topology, place_on_counts


class Timeline:
    """Release events ``(time, node, gpus, tag)``; events of moved jobs are voided."""

    __slots__ = ("events", "_sorted", "voided", "_tags", "_next")

    def __init__(self) -> None:
        self.events: list[tuple[float, int, int, int]] = []
        self._sorted = True
        self.voided: set[int] = set()
        self._tags: dict[int, list[int]] = {}
        self._next = 0

    def add(self, t: float, node: int, gpus: int, job_id: int | None = None) -> None:
        tag = self._next
        self._next += 1
        self.events.append((t, node, gpus, tag))
        if job_id is not None:
            self._tags.setdefault(job_id, []).append(tag)
        self._sorted = False

    def move(self, job_id: int, t: float, slots: Sequence[tuple[int, int]]) -> None:
        """The job now frees its GPUs at ``t`` instead (e.g. it was preempted)."""
        self.voided.update(self._tags.pop(job_id, ()))
        for node, gpus in slots:
            self.add(t, node, gpus)

    def with_later(self, later: Mapping[int, tuple[float, Sequence[tuple[int, int]]]]) -> Timeline:
        """A copy in which each job of ``later`` (id -> (time, its released slots)) frees
        its GPUs at that time instead."""
        tl = Timeline()
        tl.events = list(self.events)
        tl._sorted = self._sorted
        tl.voided = set(self.voided)
        tl._tags = {job_id: list(tags) for job_id, tags in self._tags.items()}
        tl._next = self._next
        for job_id, (t, slots) in later.items():
            tl.move(job_id, t, slots)
        return tl

    def ordered(self) -> list[tuple[float, int, int, int]]:
        if not self._sorted:
            self.events.sort()
            self._sorted = True
        return self.events

    def earliest_start(
        self,
        topo: Topology,
        elig: Sequence[int],
        counts0: Sequence[int],
        k: int,
        c: int,
        exclusive: bool,
        model: str | None,
        now: float,
        horizon: float | None = None,
    ) -> tuple[float, list[int]] | None:
        """First time a placement exists on ``elig`` nodes, from ``counts0`` now (None if
        none, or none by ``horizon`` when given: the sweep stops there)."""
        total = topo.total
        rack_of = topo.rack_of
        rack_block = topo.rack_block
        counts = [counts0[n] if elig[n] else 0 for n in range(topo.n)]
        nblocks = len(topo.block_racks)
        block_q = [0] * nblocks
        qual = bytearray(topo.n)

        def qualifies(n: int, f: int) -> bool:
            return f >= c and (not exclusive or f == total[n])

        def qualify(n: int) -> bool:
            """Count node ``n`` as qualifying; True if its block now has ``k``."""
            qual[n] = 1
            b = rack_block[rack_of[n]]
            block_q[b] += 1
            return block_q[b] >= k

        feasible = False
        for n in range(topo.n):
            if elig[n] and qualifies(n, counts[n]) and qualify(n):
                feasible = True
        if feasible:
            nodes = place_on_counts(topo, elig, counts, k, c, exclusive, model)
            if nodes is not None:
                return now, nodes
        voided = self.voided
        events = self.ordered()
        i = 0
        m = len(events)
        while i < m:
            t = events[i][0]
            if horizon is not None and t > horizon:
                return None
            hit = False
            while i < m and events[i][0] == t:
                _, n, g, tag = events[i]
                i += 1
                if not elig[n] or tag in voided:
                    continue
                f = counts[n] + g
                if f > total[n]:
                    f = total[n]
                counts[n] = f
                if not qual[n] and qualifies(n, f) and qualify(n):
                    hit = True
            if hit:
                nodes = place_on_counts(topo, elig, counts, k, c, exclusive, model)
                if nodes is not None:
                    return max(t, now), nodes
        return None
