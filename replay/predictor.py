"""Online runtime prediction for a replay: the engine's ``HistoryPredictor``, memoised.

The portal rebuilds ``scheduling.engine.predict.HistoryPredictor`` from the most
recent finished jobs. A replay finishes tens of thousands of jobs and asks for
predictions at every plan, so ``OnlinePredictor`` feeds the engine's streaming
predictor one finished job at a time (``add``, in completion order) and memoises
its answers until the next one. Fed finished jobs in completion order, it equals
``HistoryPredictor(all jobs finished so far)``; a test checks it.
"""

from __future__ import annotations

from scheduling.engine.predict import (
    DEFAULT_RUNTIME_S,
    PLAN_QUANTILE,
    HistoryPredictor,
    Prediction,
)


class OnlinePredictor(HistoryPredictor):
    """Learns job runtimes as jobs finish; durations of unfinished jobs stay unknown."""

    def __init__(
        self,
        *,
        quantile: float = PLAN_QUANTILE,
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
        self._memo: dict[tuple, Prediction] = {}
        self.finished = 0

    def add(
        self, *, owner: str, model_name: str | None, queue: str, gpus: int, runtime_s: float
    ) -> bool:
        """Record one finished job (call in completion order)."""
        if not super().add(
            owner=owner, model_name=model_name, queue=queue, gpus=gpus, runtime_s=runtime_s
        ):
            return False
        self.finished += 1
        self._memo.clear()
        return True

    def predict(
        self,
        *,
        owner: str,
        model_name: str | None,
        queue: str,
        gpus: int,
        estimate_s: float | None = None,
        limit_s: float | None = None,
        quantile: float | None = None,
        elapsed_s: float = 0.0,
    ) -> Prediction:
        """The engine's answer, memoized until the next finished job (replays ask often)."""
        memo_key = (owner, model_name, queue, gpus, estimate_s, limit_s, quantile, elapsed_s)
        got = self._memo.get(memo_key)
        if got is None:
            got = self._memo[memo_key] = super().predict(
                owner=owner,
                model_name=model_name,
                queue=queue,
                gpus=gpus,
                estimate_s=estimate_s,
                limit_s=limit_s,
                quantile=quantile,
                elapsed_s=elapsed_s,
            )
        return got
