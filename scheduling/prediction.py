"""Runtime prediction for the loop: the engine's pure predictor fed from finished jobs."""

from __future__ import annotations


class RuntimePredictor:
    """Predicts a job's total run time in seconds (None: unknown, the engine assumes long).

    Until history is fitted, the user's estimate is the prediction.
    """

    def __init__(self) -> None:
        self._engine = None

    @classmethod
    def from_history(cls) -> RuntimePredictor:
        return cls()

    def predict_row(self, row: dict, queue_name: str) -> float | None:
        minutes = row.get("estimated_runtime_minutes")
        return float(minutes) * 60 if minutes else None
