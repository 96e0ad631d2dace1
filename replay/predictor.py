"""Online runtime prediction for a replay: the engine's ``HistoryPredictor``, incrementally.

The portal rebuilds ``scheduling.engine.predict.HistoryPredictor`` from the most
recent finished jobs. A replay finishes tens of thousands of jobs, so rebuilding
it after every completion would dominate the run time. ``OnlinePredictor`` is a
``HistoryPredictor`` whose table of samples (per key of every level of
``predict.LEVELS``: the ``max_samples`` most recent runtimes) grows one finished job
at a time; the answer is the engine's own ``predict`` over that table. Fed finished
jobs in completion order, it equals ``HistoryPredictor(all jobs finished so far)``;
a test checks it.
"""

from __future__ import annotations

from collections import deque

from scheduling.engine.predict import (
    DEFAULT_RUNTIME_S,
    LEVELS,
    HistoryPredictor,
    Prediction,
    _key,
)


class _RecentSamples:
    """The predictor's table, filled as jobs finish: key -> sorted recent runtimes.

    ``HistoryPredictor.predict`` only reads the table with ``get``; the sorted tuple
    of a key is rebuilt on the first read after that key changed.
    """

    def __init__(self, max_samples: int) -> None:
        self.max_samples = max(1, max_samples)
        self._recent: dict[tuple, deque[float]] = {}
        self._sorted: dict[tuple, tuple[float, ...]] = {}

    def add(self, key: tuple, runtime_s: float) -> None:
        recent = self._recent.get(key)
        if recent is None:
            recent = self._recent[key] = deque(maxlen=self.max_samples)
        recent.append(runtime_s)
        self._sorted.pop(key, None)

    def get(self, key: tuple, default: tuple[float, ...] | None = None):
        got = self._sorted.get(key)
        if got is None:
            recent = self._recent.get(key)
            if recent is None:
                return default
            got = self._sorted[key] = tuple(sorted(recent))
        return got


class OnlinePredictor(HistoryPredictor):
    """Learns job runtimes as jobs finish; durations of unfinished jobs stay unknown."""

    def __init__(
        self,
        *,
        quantile: float = 0.8,
        min_samples: int = 3,
        max_samples: int = 50,
        default_s: float = DEFAULT_RUNTIME_S,
    ) -> None:
        super().__init__(
            (),
            quantile=quantile,
            min_samples=min_samples,
            max_samples=max_samples,
            default_s=default_s,
        )
        self._table = _RecentSamples(max_samples)  # type: ignore[assignment]
        self._memo: dict[tuple, Prediction] = {}
        self.finished = 0

    def add(self, *, owner: str, model_name: str | None, queue: str, gpus: int, runtime_s: float):
        """Record one finished job (call in completion order)."""
        if not runtime_s > 0:
            return
        self.finished += 1
        for level in LEVELS:
            if "model" not in level or model_name:
                self._table.add(_key(level, owner, model_name, queue, gpus), float(runtime_s))
        self._memo.clear()

    def predict(
        self,
        *,
        owner: str,
        model_name: str | None,
        queue: str,
        gpus: int,
        estimate_s: float | None = None,
    ) -> Prediction:
        """The engine's answer, memoized until the next finished job (replays ask often)."""
        memo_key = (owner, model_name, queue, gpus, estimate_s)
        got = self._memo.get(memo_key)
        if got is None:
            got = self._memo[memo_key] = super().predict(
                owner=owner, model_name=model_name, queue=queue, gpus=gpus, estimate_s=estimate_s
            )
        return got
