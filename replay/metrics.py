"""Time integrals and summary statistics of a replay (pure, stdlib only).

Definitions (also in docs/replay.md):

* **utilization** = busy GPU-seconds inside the submission window ``[0, W]``
  divided by ``capacity x W``. Busy = held by a job (running, or checkpointing on
  its way out after a preemption). Per queue, capacity is its pool (isolated) or
  its quota (shared; borrowing can push a queue above 1).
* **backlog_utilization**: the same ratio counted only over the instants of the
  window when some job of that scope has arrived and waits (overall: any job).
* **fragmentation**: over the instants a job of the pool waits, the share of the
  pool's idle GPUs that sit on partly used nodes (idle GPUs a whole-node job cannot
  use), as a ratio of integrals. Per pool; ``None`` per queue in a shared pool.
* Queueing delay = first start - submit; JCT = finish - submit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


class Meter:
    """Piecewise-constant GPU accounting for one scope, integrated over ``[0, window]``.

    Call ``at(t)`` (times never decrease) before changing ``busy``/``waiting``.
    ``bucket_s`` > 0 also keeps busy GPU-seconds per bucket for the whole replay.
    """

    __slots__ = (
        "capacity",
        "window",
        "busy",
        "waiting",
        "last",
        "busy_s",
        "backlog_s",
        "backlog_busy_s",
        "waiting_s",
        "max_waiting",
        "bucket_s",
        "buckets",
    )

    def __init__(self, capacity: float, window: float, bucket_s: float = 0.0) -> None:
        self.capacity = float(capacity)
        self.window = float(window)
        self.busy = 0
        self.waiting = 0
        self.last = 0.0
        self.busy_s = 0.0
        self.backlog_s = 0.0
        self.backlog_busy_s = 0.0
        self.waiting_s = 0.0
        self.max_waiting = 0
        self.bucket_s = float(bucket_s)
        self.buckets: list[float] = []

    def at(self, t: float) -> None:
        last = self.last
        if t <= last:
            return
        busy = self.busy
        lo = last if last > 0.0 else 0.0
        hi = t if t < self.window else self.window
        if hi > lo:
            dt = hi - lo
            self.busy_s += busy * dt
            waiting = self.waiting
            if waiting:
                self.backlog_s += dt
                self.backlog_busy_s += busy * dt
                self.waiting_s += waiting * dt
                if waiting > self.max_waiting:
                    self.max_waiting = waiting
        if self.bucket_s and busy:
            self._spread(last, t, busy)
        self.last = t

    def _spread(self, a: float, b: float, busy: int) -> None:
        size = self.bucket_s
        buckets = self.buckets
        i = int(a // size)
        while a < b:
            end = min(b, (i + 1) * size)
            while len(buckets) <= i:
                buckets.append(0.0)
            buckets[i] += busy * (end - a)
            a = end
            i += 1

    def utilization(self) -> float:
        return _ratio(self.busy_s, self.capacity * self.window)

    def backlog_utilization(self) -> float | None:
        if self.backlog_s <= 0:
            return None
        return _ratio(self.backlog_busy_s, self.capacity * self.backlog_s)

    def avg_waiting(self) -> float:
        """Time-averaged number of waiting jobs over the window."""
        return _ratio(self.waiting_s, self.window)

    def series(self, length_s: float) -> list[float]:
        """Utilization per bucket from 0 to ``length_s``."""
        if not self.bucket_s:
            return []
        n = max(1, math.ceil(length_s / self.bucket_s))
        out = []
        for i in range(n):
            v = self.buckets[i] if i < len(self.buckets) else 0.0
            out.append(round(_ratio(v, self.capacity * self.bucket_s), 4))
        return out


class FragMeter:
    """Idle GPUs of one pool on partly used nodes, integrated while its jobs wait."""

    __slots__ = (
        "window",
        "idle",
        "whole",
        "waiting",
        "last",
        "scattered_s",
        "idle_s",
        "node_gpus",
        "claims",
        "claimed",
        "by_cause",
    )

    def __init__(self, idle: int, whole_nodes: int, node_gpus: int, window: float) -> None:
        self.window = float(window)
        self.idle = idle
        self.whole = whole_nodes
        self.node_gpus = node_gpus
        self.waiting = 0
        self.last = 0.0
        self.scattered_s = 0.0
        self.idle_s = 0.0
        # idle capacity by cause (``replay.idle``): the last plan's idle GPUs per cause
        # and their sum, and the idle GPU-seconds integrated with them
        self.claims: dict[str, float] = {}
        self.claimed = 0
        self.by_cause: dict[str, float] = {}

    def at(self, t: float) -> None:
        last = self.last
        if t <= last:
            return
        if self.waiting and self.idle:
            lo = last if last > 0.0 else 0.0
            hi = t if t < self.window else self.window
            if hi > lo:
                dt = hi - lo
                self.idle_s += self.idle * dt
                self.scattered_s += (self.idle - self.whole * self.node_gpus) * dt
                self._attribute(dt)
        self.last = t

    def _attribute(self, dt: float) -> None:
        """The last plan's causes hold for as many idle GPUs as it left (scaled down if
        fewer are idle now); GPUs freed since then are ``awaiting_cycle``."""
        idle = self.idle
        claimed = self.claimed
        by_cause = self.by_cause
        scale = min(1.0, idle / claimed) if claimed > 0 else 0.0
        for cause, g in self.claims.items():
            by_cause[cause] = by_cause.get(cause, 0.0) + g * scale * dt
        extra = idle - claimed
        if extra > 0:
            by_cause["awaiting_cycle"] = by_cause.get("awaiting_cycle", 0.0) + extra * dt

    def set_claims(self, claims: dict[str, int]) -> None:
        """Idle GPUs per cause after a plan (call ``at(now)`` first)."""
        self.claims = dict(claims)
        self.claimed = sum(claims.values())

    def value(self) -> float | None:
        if self.idle_s <= 0:
            return None
        return self.scattered_s / self.idle_s


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def quantile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation quantile (numpy's default) of already sorted values."""
    n = len(sorted_values)
    if n == 0:
        return None
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(n - 1, lo + 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def percentiles(sorted_values: Sequence[float], step: int = 1) -> list[float]:
    """Percentiles 0, step, ..., 100 (for compact distribution plots)."""
    if not sorted_values:
        return []
    return [round(quantile(sorted_values, p / 100), 1) for p in range(0, 101, step)]  # type: ignore[arg-type]


def rounded(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)
