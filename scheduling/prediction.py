"""Runtime prediction for the loop: the engine's pure ``HistoryPredictor`` fed from finished jobs.

History is the most recent successful runs (their total run time, i.e. the
progress they reached), rebuilt at most once a minute per process. The
predictor answers the plan's quantile (p80) of the most specific level of
owner + model + queue + size ... global with enough runs, the user's estimate
ranking between their own history and everybody's (docs/engine.md, "Runtime
prediction").
"""

from __future__ import annotations

import time

from scheduling.engine.predict import FinishedJob, HistoryPredictor
from scheduling.models import Job

HISTORY_SIZE = 5000
REFRESH_S = 60.0
_cache: dict[str, tuple[float, HistoryPredictor]] = {}


def load_history() -> list[FinishedJob]:
    rows = (
        Job.objects.filter(state=Job.State.SUCCEEDED, progress_seconds__gt=0)
        .order_by("-finished_at")
        .values_list("owner__username", "model_name", "queue__name", "gpus", "progress_seconds",
                     "finished_at")[:HISTORY_SIZE]
    )  # fmt: skip
    return [
        FinishedJob(
            owner=o,
            model_name=m or None,
            queue=q,
            gpus=g,
            runtime_s=r,
            finished_at=f.timestamp() if f else 0.0,
        )  # fmt: skip
        for o, m, q, g, r, f in rows
    ]


class RuntimePredictor:
    """Predicts a job's total run time in seconds from history, else the user's estimate."""

    def __init__(self, predictor: HistoryPredictor) -> None:
        self.predictor = predictor

    @classmethod
    def from_history(cls) -> RuntimePredictor:
        cached = _cache.get("p")
        if cached is None or time.monotonic() - cached[0] > REFRESH_S:
            cached = (time.monotonic(), HistoryPredictor(load_history()))
            _cache["p"] = cached
        return cls(cached[1])

    def predict_row(self, row: dict, queue_name: str) -> float:
        """The predicted whole runtime (s) of a job row (``snapshot.FIELDS``) in ``queue_name``."""
        minutes = row.get("estimated_runtime_minutes")
        return self.predictor.predict(
            owner=row.get("owner__username") or "",
            model_name=row.get("model_name") or None,
            queue=queue_name,
            gpus=row["gpus"],
            estimate_s=float(minutes) * 60 if minutes else None,
        ).seconds
