"""Online runtime prediction for a replay: the engine's ``HistoryPredictor``, incrementally.

The portal rebuilds ``scheduling.engine.predict.HistoryPredictor`` from the most
recent finished jobs. A replay finishes tens of thousands of jobs, so rebuilding
it after every completion would dominate the run time. ``OnlinePredictor`` keeps
the same table (per key of every level of ``predict.LEVELS``: the
``max_samples`` most recent runtimes) and answers with the same rule (first
level with ``min_samples`` samples, quantile ``quantile`` of them), updated one
finished job at a time. Fed finished jobs in completion order, its answer equals
``HistoryPredictor(all jobs finished so far).predict(...)``; a test checks it.
"""

from __future__ import annotations

from collections import deque

from scheduling.engine.predict import (
    DEFAULT_RUNTIME_S,
    LEVELS,
    Prediction,
    _key,
    _quantile,
)


class OnlinePredictor:
    """Learns job runtimes as jobs finish; durations of unfinished jobs stay unknown."""

    def __init__(
        self,
        *,
        quantile: float = 0.8,
        min_samples: int = 3,
        max_samples: int = 50,
        default_s: float = DEFAULT_RUNTIME_S,
    ) -> None:
        if not 0.0 <= quantile <= 1.0:
            raise ValueError("quantile must be within [0, 1]")
        self.quantile = quantile
        self.min_samples = max(1, min_samples)
        self.max_samples = max(1, max_samples)
        self.default_s = default_s
        self._recent: dict[tuple, deque[float]] = {}
        self._sorted: dict[tuple, tuple[float, ...]] = {}
        self._memo: dict[tuple, Prediction] = {}
        self.finished = 0

    def add(self, *, owner: str, model_name: str | None, queue: str, gpus: int, runtime_s: float):
        """Record one finished job (call in completion order)."""
        if not runtime_s > 0:
            return
        self.finished += 1
        for level in LEVELS:
            if "model" in level and not model_name:
                continue
            key = _key(level, owner, model_name, queue, gpus)
            dq = self._recent.get(key)
            if dq is None:
                dq = self._recent[key] = deque(maxlen=self.max_samples)
            dq.append(float(runtime_s))
            self._sorted.pop(key, None)
        self._memo.clear()

    def _samples(self, key: tuple) -> tuple[float, ...] | None:
        s = self._sorted.get(key)
        if s is None:
            dq = self._recent.get(key)
            if dq is None:
                return None
            s = self._sorted[key] = tuple(sorted(dq))
        return s

    def predict(
        self,
        *,
        owner: str,
        model_name: str | None,
        queue: str,
        gpus: int,
        estimate_s: float | None = None,
    ) -> Prediction:
        memo_key = (owner, model_name, queue, gpus, estimate_s)
        got = self._memo.get(memo_key)
        if got is not None:
            return got
        got = self._predict(owner, model_name, queue, gpus, estimate_s)
        self._memo[memo_key] = got
        return got

    def _predict(
        self, owner: str, model_name: str | None, queue: str, gpus: int, estimate_s: float | None
    ) -> Prediction:
        for level in LEVELS:
            if "model" in level and not model_name:
                continue
            samples = self._samples(_key(level, owner, model_name, queue, gpus))
            if samples and len(samples) >= self.min_samples:
                return Prediction(
                    _quantile(samples, self.quantile), "history:" + "+".join(level), len(samples)
                )
        if estimate_s is not None and estimate_s > 0:
            return Prediction(float(estimate_s), "estimate")
        return Prediction(self.default_s, "default")
