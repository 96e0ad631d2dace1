"""What the engine's borrowing rules (#19, ``scheduling.engine.borrowing``) need from the
past, kept by the replay as the portal keeps it from its own records:

* the pool's *entitled demand* (summed over lines: the GPUs a line holds plus the GPUs
  its waiting jobs ask for, at most its quota) sampled at every plan, as a maximum per
  15-minute bucket; the peak over each look-ahead of ``borrowing.HORIZONS_S`` is
  ``Snapshot.demand_peaks``;
* per engine queue, R4's eviction ratio over the last ``window_s`` (72 h, the portal's
  default eviction window) as the portal computes it for the engine
  (``monitoring.rollup``): GPU time of the runs evicted in the window over the GPU time
  the queue was given in it (``monitoring.metrics.window_eviction_ratio``), as
  ``QueueView.eviction_ratio`` (and its two sides, ``evicted_gpu_s`` and
  ``delivered_gpu_s``, for the quota swap's eviction budget), and the time of its last
  eviction, ``QueueView.last_reclaim_at``; the highest such ratio each queue reached at a
  plan while its window held at least ``EVICTION_ALERT_MIN_EVENTS`` evictions is kept
  (``peak_ratio``: what the portal's eviction alert watches, by its rule). (Until
  session 9 the replay fed evictions per run here, once a queue had 3: not what the
  portal's engine reads.)
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from monitoring.metrics import EVICTION_ALERT_MIN_EVENTS, window_eviction_ratio
from scheduling.engine import QueueView
from scheduling.engine.borrowing import HORIZONS_S

BUCKET_S = 900.0
_KEEP = int(HORIZONS_S[-1] // BUCKET_S)  # buckets kept (24 h)


class BorrowHistory:
    """Entitled-demand peaks of the pool and eviction figures per queue, in virtual time."""

    def __init__(self, window_s: float = 72 * 3600.0) -> None:
        self.window_s = window_s
        self._buckets: deque[tuple[int, int]] = deque(maxlen=_KEEP)  # finished, newest last
        self._cur: tuple[int, int] | None = None  # (bucket, max demand) of the current one
        self._base = [0] * len(HORIZONS_S)  # peaks of the finished buckets per horizon
        self._use: dict[str, QueueUse] = {}
        self._views: dict[tuple, QueueView] = {}
        self.peak_ratio: dict[str, float] = {}  # per engine queue, the highest window ratio

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
    def _q(self, queue: str) -> QueueUse:
        got = self._use.get(queue)
        if got is None:
            got = self._use[queue] = QueueUse()
        return got

    def run_started(self, queue: str, gpus: int, t: float) -> None:
        self._q(queue).busy_by(gpus, t)

    def run_ended(self, queue: str, gpus: int, t: float) -> None:
        self._q(queue).busy_by(-gpus, t)

    def evicted(self, queue: str, gpu_s: float, t: float) -> None:
        """A run of ``queue`` was evicted at ``t`` after being given ``gpu_s`` GPU-seconds."""
        use = self._q(queue)
        use.evictions.append((t, gpu_s))
        use.evicted_gpu_s += gpu_s

    def queues(self, queues: tuple[QueueView, ...], now: float) -> tuple[QueueView, ...]:
        out = []
        old = now - self.window_s
        for q in queues:
            use = self._use.get(q.name)
            fig = (None, None, None, None) if use is None else use.window(old, now)
            key = (q.name, *fig)
            if (
                fig[0] is not None
                and fig[0] > self.peak_ratio.get(q.name, 0.0)
                and len(use.evictions) >= EVICTION_ALERT_MIN_EVENTS  # type: ignore[union-attr]
            ):
                self.peak_ratio[q.name] = fig[0]
            v = self._views.get(key)
            if v is None:
                ratio, last, evicted, delivered = fig
                v = replace(q, eviction_ratio=ratio, last_reclaim_at=last,
                            evicted_gpu_s=evicted, delivered_gpu_s=delivered)  # fmt: skip
                if len(self._views) > 10_000:
                    self._views.clear()
                self._views[key] = v
            out.append(v)
        return tuple(out)


class QueueUse:
    """One queue's GPU time given (integrated as its runs start and end, kept as a
    cumulative total every ``BUCKET_S``) and its evictions, for a sliding window."""

    __slots__ = ("busy", "at", "total", "marks", "evictions", "evicted_gpu_s")

    def __init__(self) -> None:
        self.busy = 0  # GPUs its runs hold now
        self.at = 0.0  # time ``total`` was last brought up to
        self.total = 0.0  # GPU-seconds given since the start
        self.marks: deque[tuple[float, float]] = deque()  # (t, total at t), every BUCKET_S
        self.evictions: deque[tuple[float, float]] = deque()  # (t, GPU-seconds of the run)
        self.evicted_gpu_s = 0.0  # the sum of ``evictions``

    def _advance(self, t: float) -> None:
        if t > self.at:
            self.total += self.busy * (t - self.at)
            self.at = t
        if not self.marks or t - self.marks[-1][0] >= BUCKET_S:
            self.marks.append((t, self.total))

    def busy_by(self, gpus: int, t: float) -> None:
        self._advance(t)
        self.busy += gpus

    def window(self, old: float, now: float) -> tuple[float | None, float | None, float, float]:
        """Over ``[old, now]``: R4's ratio, the time of the last eviction, the evicted and
        the delivered GPU-seconds."""
        self._advance(now)
        marks, ev = self.marks, self.evictions
        while len(marks) > 1 and marks[1][0] <= old:  # keep the last mark at or before old
            marks.popleft()
        while ev and ev[0][0] < old:
            self.evicted_gpu_s -= ev.popleft()[1]
        since = marks[0][1] if marks and marks[0][0] <= old else 0.0
        evicted, delivered = max(0.0, self.evicted_gpu_s), self.total - since
        ratio = window_eviction_ratio(evicted, delivered)
        return ratio, (ev[-1][0] if ev else None), evicted, delivered
