"""Runtime prediction for backfill (S3): pure and pluggable.

``HistoryPredictor`` learns from finished jobs. It looks for the most specific
history with enough samples, in this order:

    owner + model + queue + size bucket
    owner + model + size bucket
    owner + model
    model + queue + size bucket
    model + size bucket
    queue + size bucket

and predicts a high quantile (default p80) of the most recent runtimes there,
so a backfilled job rarely overruns its prediction. With no usable history it
falls back to the user's own estimate, then to a conservative default.

The engine never calls a predictor itself: the caller fills
``PendingJob.predicted_runtime_s`` and ``RunningJob.predicted_end`` (see
``fill_predictions``), so another predictor plugs in by subclassing
``HistoryPredictor`` and overriding ``predict`` (as the replay's memoising
predictor does).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

from .types import Snapshot

DEFAULT_RUNTIME_S = 12 * 3600.0


@dataclass(frozen=True, slots=True)
class FinishedJob:
    """One finished run: who, what, where, how big and how long it ran."""

    owner: str
    model_name: str | None
    queue: str
    gpus: int
    runtime_s: float
    finished_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Prediction:
    seconds: float
    source: str  # "history:<level>", "estimate" or "default"
    samples: int = 0


def size_bucket(gpus: int) -> int:
    """Jobs are compared with others of the same power-of-two size class."""
    return 1 << max(0, math.ceil(math.log2(max(1, gpus))))


LEVELS: tuple[tuple[str, ...], ...] = (
    ("owner", "model", "queue", "size"),
    ("owner", "model", "size"),
    ("owner", "model"),
    ("model", "queue", "size"),
    ("model", "size"),
    ("queue", "size"),
)


def _key(level: tuple[str, ...], owner: str, model: str | None, queue: str, gpus: int) -> tuple:
    values = {"owner": owner, "model": model, "queue": queue, "size": size_bucket(gpus)}
    return (level, *(values[f] for f in level))


def _quantile(sorted_values: tuple[float, ...], q: float) -> float:
    if not sorted_values:
        raise ValueError("no samples")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class HistoryPredictor:
    """Predicts from finished jobs; immutable once built."""

    def __init__(
        self,
        history: Iterable[FinishedJob] = (),
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
        self.default_s = default_s
        grouped: dict[tuple, list[tuple[float, float]]] = {}
        for job in history:
            if job.runtime_s is None or not job.runtime_s > 0 or math.isinf(job.runtime_s):
                continue
            for level in LEVELS:
                if "model" in level and not job.model_name:
                    continue
                key = _key(level, job.owner, job.model_name, job.queue, job.gpus)
                grouped.setdefault(key, []).append((job.finished_at, float(job.runtime_s)))
        self._table: dict[tuple, tuple[float, ...]] = {}
        for key, rows in grouped.items():
            recent = sorted(rows)[-max_samples:]
            self._table[key] = tuple(sorted(r for _, r in recent))

    def predict(
        self,
        *,
        owner: str,
        model_name: str | None,
        queue: str,
        gpus: int,
        estimate_s: float | None = None,
    ) -> Prediction:
        for level in LEVELS:
            if "model" in level and not model_name:
                continue
            samples = self._table.get(_key(level, owner, model_name, queue, gpus))
            if samples and len(samples) >= self.min_samples:
                return Prediction(
                    _quantile(samples, self.quantile), "history:" + "+".join(level), len(samples)
                )
        if estimate_s is not None and estimate_s > 0:
            return Prediction(float(estimate_s), "estimate")
        return Prediction(self.default_s, "default")


def fill_predictions(snapshot: Snapshot, predictor: HistoryPredictor) -> Snapshot:
    """Fill missing ``predicted_runtime_s`` / ``predicted_end`` from the predictor."""
    pending = tuple(
        j
        if j.predicted_runtime_s is not None
        else dataclasses.replace(
            j,
            predicted_runtime_s=predictor.predict(
                owner=j.owner,
                model_name=j.model_name,
                queue=j.queue,
                gpus=j.gpus,
                estimate_s=j.estimated_runtime_s,
            ).seconds,
        )
        for j in snapshot.pending
    )
    running = tuple(
        r
        if r.predicted_end is not None
        else dataclasses.replace(
            r,
            predicted_end=r.started_at
            + predictor.predict(
                owner=r.owner, model_name=r.model_name, queue=r.queue, gpus=r.gpus
            ).seconds,
        )
        for r in snapshot.running
    )
    return dataclasses.replace(snapshot, pending=pending, running=running)
