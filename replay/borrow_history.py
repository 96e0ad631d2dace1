"""What the engine's borrowing rules (#19, ``scheduling.engine.borrowing``) need from the
past, kept by the replay as the portal keeps it from its own records:

* per line, its *entitled demand* (GPUs it holds plus GPUs its waiting jobs ask for; the
  engine caps it at the quota) sampled at every plan, as a maximum per 15-minute bucket;
  the peak over each look-ahead of ``borrowing.HORIZONS_S`` is ``LineView.demand_peaks``;
* per engine queue, its runs started and its evictions over the last ``window_s``
  (72 h, the portal's default eviction window): ``QueueView.eviction_ratio`` (once it
  has at least ``MIN_EVICTIONS`` evictions, as the portal's alert) and the time of its
  last eviction, ``QueueView.last_reclaim_at``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from scheduling.engine import LineView, QueueView
from scheduling.engine.borrowing import HORIZONS_S

BUCKET_S = 900.0
_KEEP = int(HORIZONS_S[-1] // BUCKET_S)  # buckets kept per line (24 h)
MIN_EVICTIONS = 3


class BorrowHistory:
    """Demand peaks per line and eviction figures per queue, in virtual time."""

    def __init__(self, window_s: float = 72 * 3600.0) -> None:
        self.window_s = window_s
        # per line: finished buckets (index, max demand), newest last; the current bucket
        self._buckets: dict[str, deque[tuple[int, int]]] = {}
        self._cur: dict[str, tuple[int, int]] = {}
        self._base: dict[str, list[int]] = {}  # peaks of the finished buckets per horizon
        self._runs: dict[str, deque[float]] = {}
        self._evictions: dict[str, deque[float]] = {}
        self._views: dict[tuple, QueueView] = {}

    # -- demand -----------------------------------------------------------------------
    def sample(self, demand: dict[str, int], now: float) -> None:
        """Record each line's entitled demand now (lines absent: 0)."""
        b = int(now // BUCKET_S)
        for line in set(demand) | set(self._cur):
            d = demand.get(line, 0)
            cur = self._cur.get(line)
            if cur is None:
                self._cur[line] = (b, d)
                self._buckets[line] = deque(maxlen=_KEEP)
                self._base[line] = [0] * len(HORIZONS_S)
            elif cur[0] == b:
                if d > cur[1]:
                    self._cur[line] = (b, d)
            else:
                self._buckets[line].append(cur)
                self._cur[line] = (b, d)
                self._rebase(line, b)

    def _rebase(self, line: str, b: int) -> None:
        """Peaks per horizon over the finished buckets still inside it (once per bucket)."""
        base = [0] * len(HORIZONS_S)
        buckets = self._buckets[line]
        for i, h in enumerate(HORIZONS_S):
            oldest = b - int(h // BUCKET_S) + 1
            base[i] = max((d for k, d in buckets if k >= oldest), default=0)
        self._base[line] = base

    def peaks(self, line: str) -> tuple[int, ...]:
        cur = self._cur.get(line)
        if cur is None:
            return ()
        d = cur[1]
        return tuple(x if x > d else d for x in self._base[line])

    def lines(self, lines: tuple[LineView, ...]) -> tuple[LineView, ...]:
        return tuple(replace(ln, demand_peaks=self.peaks(ln.name)) for ln in lines)

    # -- evictions --------------------------------------------------------------------
    def run_started(self, queue: str, t: float) -> None:
        self._runs.setdefault(queue, deque()).append(t)

    def evicted(self, queue: str, t: float) -> None:
        self._evictions.setdefault(queue, deque()).append(t)

    def queues(self, queues: tuple[QueueView, ...], now: float) -> tuple[QueueView, ...]:
        out = []
        old = now - self.window_s
        for q in queues:
            runs = self._runs.get(q.name)
            ev = self._evictions.get(q.name)
            while runs and runs[0] < old:
                runs.popleft()
            while ev and ev[0] < old:
                ev.popleft()
            n_ev = len(ev) if ev else 0
            ratio = None
            if n_ev >= MIN_EVICTIONS and runs:
                ratio = round(n_ev / len(runs), 3)
            last = ev[-1] if ev else None
            key = (q.name, ratio, last)
            v = self._views.get(key)
            if v is None:
                v = replace(q, eviction_ratio=ratio, last_reclaim_at=last)
                if len(self._views) > 10_000:
                    self._views.clear()
                self._views[key] = v
            out.append(v)
        return tuple(out)
