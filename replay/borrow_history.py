"""What the engine's borrowing rules (#19, ``scheduling.engine.borrowing``) need from the
past, kept by the replay as the portal keeps it from its own records:

* the pool's *entitled demand* (summed over lines: the GPUs a line holds plus the GPUs
  its waiting jobs ask for, at most its quota) sampled at every plan, as a maximum per
  15-minute bucket; the peak over each look-ahead of ``borrowing.HORIZONS_S`` is
  ``Snapshot.demand_peaks``;
* per engine queue, its runs started and its evictions over the last ``window_s``
  (72 h, the portal's default eviction window): ``QueueView.eviction_ratio`` (once it
  has at least ``MIN_EVICTIONS`` evictions, as the portal's alert) and the time of its
  last eviction, ``QueueView.last_reclaim_at``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from scheduling.engine import QueueView
from scheduling.engine.borrowing import HORIZONS_S

BUCKET_S = 900.0
_KEEP = int(HORIZONS_S[-1] // BUCKET_S)  # buckets kept (24 h)
MIN_EVICTIONS = 3


class BorrowHistory:
    """Entitled-demand peaks of the pool and eviction figures per queue, in virtual time."""

    def __init__(self, window_s: float = 72 * 3600.0) -> None:
        self.window_s = window_s
        self._buckets: deque[tuple[int, int]] = deque(maxlen=_KEEP)  # finished, newest last
        self._cur: tuple[int, int] | None = None  # (bucket, max demand) of the current one
        self._base = [0] * len(HORIZONS_S)  # peaks of the finished buckets per horizon
        self._runs: dict[str, deque[float]] = {}
        self._evictions: dict[str, deque[float]] = {}
        self._views: dict[tuple, QueueView] = {}

    # -- demand -----------------------------------------------------------------------
    def sample(self, demand: int, now: float) -> None:
        """Record the pool's entitled demand now."""
        b = int(now // BUCKET_S)
        cur = self._cur
        if cur is None or cur[0] == b:
            if cur is None or demand > cur[1]:
                self._cur = (b, demand)
            return
        self._buckets.append(cur)
        self._cur = (b, demand)
        for i, h in enumerate(HORIZONS_S):  # once per bucket: the finished ones per horizon
            oldest = b - int(h // BUCKET_S) + 1
            self._base[i] = max((d for k, d in self._buckets if k >= oldest), default=0)

    def peaks(self) -> tuple[int, ...]:
        if self._cur is None:
            return ()
        d = self._cur[1]
        return tuple(x if x > d else d for x in self._base)

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
