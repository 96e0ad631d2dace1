"""Runtime prediction for the loop: the engine's pure ``HistoryPredictor`` fed from finished jobs.

History is the most recent successful runs (their total run time, i.e. the
progress they reached), rebuilt at most once a minute per process. The
predictor answers the plan's quantile (p80) of the most specific level of
owner + model + queue + size ... global with enough runs, the user's estimate
ranking between their own history and everybody's (docs/engine.md, "Runtime
prediction"). A run never lasts longer than its job's time limit
(``scheduling.time_limits``), so no answer here is longer either.
"""

from __future__ import annotations

import time

from scheduling.engine.predict import FinishedJob, HistoryPredictor, run_end, waiting_runtime_s
from scheduling.models import Job
from scheduling.time_limits import limit_s

HISTORY_SIZE = 5000
REFRESH_S = 60.0
# The process's predictor: when it was built, itself, and its answers so far by key.
_cache: dict[str, tuple[float, HistoryPredictor, dict[tuple, float]]] = {}


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
    """Predicts a job's total run time in seconds from history, else the user's estimate.

    A prediction depends only on the job's key (owner, model, queue, size, estimate, and
    how long it has already run) and the history, which is fixed while the predictor
    lives: answers are remembered per key (``memo``), so a cycle asks the history once per
    kind of job, not once per job. A running job asks with the time it is known to have run
    (to its last checkpoint: a new key an hour), one past its predicted end with its own
    elapsed time (a new key each cycle); the memo goes with the predictor (``REFRESH_S``).
    """

    def __init__(self, predictor: HistoryPredictor, memo: dict[tuple, float] | None = None) -> None:
        self.predictor = predictor
        self.memo: dict[tuple, float] = {} if memo is None else memo

    @classmethod
    def from_history(cls) -> RuntimePredictor:
        cached = _cache.get("p")
        if cached is None or time.monotonic() - cached[0] > REFRESH_S:
            cached = (time.monotonic(), HistoryPredictor(load_history()), {})
            _cache["p"] = cached
        return cls(cached[1], cached[2])

    def predict_row(self, row: dict, queue_name: str, elapsed_s: float = 0.0) -> float:
        """The predicted whole runtime (s) of a job row (``snapshot.FIELDS``) in ``queue_name``
        that has already run ``elapsed_s`` (``HistoryPredictor.predict``)."""
        minutes = row.get("estimated_runtime_minutes")
        key = (row.get("owner__username") or "", row.get("model_name") or None, queue_name,
               row["gpus"], float(minutes) * 60 if minutes else None, elapsed_s)  # fmt: skip
        seconds = self.memo.get(key)
        if seconds is None:
            owner, model_name, queue, gpus, estimate_s, _ = key
            seconds = self.memo[key] = self.predictor.predict(
                owner=owner, model_name=model_name, queue=queue, gpus=gpus,
                estimate_s=estimate_s, elapsed_s=elapsed_s,
            ).seconds  # fmt: skip
        return seconds

    def new_run_s(self, row: dict, queue_name: str) -> float:
        """How long a job that has never run is predicted to run (the what-if's candidate):
        its whole runtime, at most its time limit."""
        return _at_most(self.predict_row(row, queue_name), limit_s(row["time_limit_minutes"]))

    def waiting_s(self, row: dict, queue_name: str, overrun_s: float) -> float:
        """What a waiting job still has to run (``predict.waiting_runtime_s``): its whole
        runtime, or after a checkpoint the rest of it, predicted from the runs that got as
        far; at most its time limit (its next run lasts no longer)."""
        rest = waiting_runtime_s(
            lambda elapsed: self.predict_row(row, queue_name, elapsed),
            row["progress_seconds"],
            overrun_s,
        )
        return _at_most(rest, limit_s(row["time_limit_minutes"]))

    def run_end(self, row: dict, queue_name: str, started_at: float, now: float) -> float:
        """When a running job is predicted to end (``predict.run_end``): from the progress
        its run started from (``run_start_progress_seconds``), not the progress it has made
        since (``progress_seconds``, which moves on as it runs), and known to have run until
        its last checkpoint; at the latest when the run reaches its time limit."""
        end = run_end(
            lambda elapsed: self.predict_row(row, queue_name, elapsed),
            started_at,
            row["run_start_progress_seconds"],
            now,
            reached_at=row["last_checkpoint_at_ts"],
        )
        limit = limit_s(row["time_limit_minutes"])
        return end if limit is None else min(end, started_at + limit)


def _at_most(seconds: float, limit: float | None) -> float:
    """``seconds``, at most ``limit`` (None: no limit)."""
    return seconds if limit is None else min(seconds, limit)
