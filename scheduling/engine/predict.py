"""Runtime prediction (S3): quantiles of finished jobs' runtimes, pure and pluggable.

``HistoryPredictor`` learns from finished jobs, one at a time (``add``) or all at
once (the constructor). Every finished job is recorded under one key per level of
a hierarchy, from the most specific to the most general:

    owner + model + queue + size     the user's own runs of this model, here, this big
    owner + model                    the user's own runs of this model
    owner                            the user's own runs
    (the user's estimate, when the job gives one)
    model + queue + size             everybody's runs of this model, here, this big
    model                            everybody's runs of this model
    queue + size                     this queue's runs of this size
    queue                            this queue's runs
    global                           every run

``size`` is the power-of-two size class of the GPU count (``size_bucket``). A job
without an owner or a model skips the levels that need one. A prediction comes
from the first level holding at least ``min_samples`` runs; the user's own
estimate, when given, ranks above history shared with other users (it knows this
job; the queue's history only knows its neighbours). Nothing at all: ``default_s``.
Every answer is capped by the job's time limit when one is given (``limit_s``):
the job cannot run longer.

Each key keeps a ``RecentQuantiles``: the ``max_samples`` most recent runtimes
(a bounded, deterministic reservoir: recency matters more than volume, users'
jobs drift), read as any quantile. The predictor answers a *quantile*, not a
mean: runtimes are heavy-tailed, and a mean is both too long for most jobs and
too short for the long ones. ``quantile`` (default p80) is the one the plan uses
for reservations and backfill; ``predict(..., quantile=0.5)`` asks another (see
docs/engine.md, "Runtime prediction", for which and why).

The engine never calls a predictor itself: the caller fills
``PendingJob.predicted_runtime_s`` and ``RunningJob.predicted_end`` (see
``fill_predictions``), so another predictor plugs in by subclassing
``HistoryPredictor`` and overriding ``predict`` (as the replay's memoising
predictor does).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .types import RunningJob, Snapshot

DEFAULT_RUNTIME_S = 12 * 3600.0
#: The quantile the plan uses (reservations, backfill): see docs/engine.md.
PLAN_QUANTILE = 0.8


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
    """A predicted whole runtime, the level it came from and how many runs it rests on."""

    seconds: float
    source: str  # "history:<level>", "estimate" or "default"
    samples: int = 0


def size_bucket(gpus: int) -> int:
    """Jobs are compared with others of the same power-of-two size class."""
    return 1 << max(0, math.ceil(math.log2(max(1, gpus))))


#: The levels, most specific first; ``ESTIMATE_AFTER`` of them rank above the user's estimate.
LEVELS: tuple[tuple[str, ...], ...] = (
    ("owner", "model", "queue", "size"),
    ("owner", "model"),
    ("owner",),
    ("model", "queue", "size"),
    ("model",),
    ("queue", "size"),
    ("queue",),
    ("global",),
)
ESTIMATE_AFTER = 3
LEVEL_NAMES: tuple[str, ...] = tuple("+".join(level) for level in LEVELS)


def _usable(level: tuple[str, ...], owner: str | None, model: str | None) -> bool:
    return ("model" not in level or bool(model)) and ("owner" not in level or bool(owner))


def _key(level: tuple[str, ...], owner: str, model: str | None, queue: str, gpus: int) -> tuple:
    values = {
        "owner": owner,
        "model": model,
        "queue": queue,
        "size": size_bucket(gpus),
        "global": "",
    }
    return (level, *(values[f] for f in level))


def _quantile(sorted_values: tuple[float, ...], q: float) -> float:
    """Linear-interpolation quantile of sorted values (numpy's default)."""
    if not sorted_values:
        raise ValueError("no samples")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class RecentQuantiles:
    """A streaming quantile estimate: the ``size`` most recent values, read as quantiles.

    Deterministic (no sampling), bounded (``size`` floats per key), monotone in
    ``q`` and always within the smallest and largest retained value. The sorted
    view is rebuilt on the first read after an ``add``.
    """

    __slots__ = ("_recent", "_sorted")

    def __init__(self, size: int = 50) -> None:
        self._recent: deque[float] = deque(maxlen=max(1, size))
        self._sorted: tuple[float, ...] | None = ()

    def add(self, value: float) -> None:
        self._recent.append(float(value))
        self._sorted = None

    def __len__(self) -> int:
        return len(self._recent)

    def sorted(self) -> tuple[float, ...]:
        got = self._sorted
        if got is None:
            got = self._sorted = tuple(sorted(self._recent))
        return got

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the retained values; ValueError when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError("quantile must be within [0, 1]")
        return _quantile(self.sorted(), q)

    def longer_than(self, elapsed_s: float) -> tuple[float, ...]:
        """The retained values of at least ``elapsed_s``, sorted (runs that got that far)."""
        values = self.sorted()
        return values[bisect.bisect_left(values, elapsed_s) :] if elapsed_s > 0 else values


class HistoryPredictor:
    """Predicts a job's whole runtime from finished jobs (a hierarchy of quantile estimates)."""

    def __init__(
        self,
        history: Iterable[FinishedJob] = (),
        *,
        quantile: float = PLAN_QUANTILE,
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
        self._table: dict[tuple, RecentQuantiles] = {}
        for job in sorted(history, key=lambda j: j.finished_at):
            self.add(
                owner=job.owner,
                model_name=job.model_name,
                queue=job.queue,
                gpus=job.gpus,
                runtime_s=job.runtime_s,
            )

    def add(
        self, *, owner: str, model_name: str | None, queue: str, gpus: int, runtime_s: float
    ) -> bool:
        """Record one finished run (in completion order); False if its runtime is unusable."""
        if runtime_s is None or not runtime_s > 0 or math.isinf(runtime_s):
            return False
        table = self._table
        for level in LEVELS:
            if _usable(level, owner, model_name):
                key = _key(level, owner, model_name, queue, gpus)
                est = table.get(key)
                if est is None:
                    est = table[key] = RecentQuantiles(self.max_samples)
                est.add(runtime_s)
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
        """The whole runtime of such a job: the first level with enough history, else the
        user's estimate, else the default; capped by ``limit_s`` (the job's time limit).

        ``elapsed_s``: how long the job has already run. History is then conditioned on
        it: the quantile of the runs that lasted at least as long (a job that has run
        for a day is no longer a typical job of its key). A level with fewer than
        ``min_samples`` such runs is skipped; an answer below ``elapsed_s`` (the
        estimate, the default) is not corrected here: the caller's overrun rule is."""
        q = self.quantile if quantile is None else quantile
        if not 0.0 <= q <= 1.0:
            raise ValueError("quantile must be within [0, 1]")
        got = self._lookup(owner, model_name, queue, gpus, estimate_s, q, elapsed_s)
        if limit_s is not None and limit_s > 0 and got.seconds > limit_s:
            got = Prediction(float(limit_s), got.source + ":capped", got.samples)
        return got

    def _lookup(
        self,
        owner: str,
        model_name: str | None,
        queue: str,
        gpus: int,
        estimate_s: float | None,
        q: float,
        elapsed_s: float,
    ) -> Prediction:
        has_estimate = estimate_s is not None and estimate_s > 0
        for i, level in enumerate(LEVELS):
            if i == ESTIMATE_AFTER and has_estimate:
                return Prediction(float(estimate_s), "estimate")  # type: ignore[arg-type]
            if not _usable(level, owner, model_name):
                continue
            est = self._table.get(_key(level, owner, model_name, queue, gpus))
            if est is None:
                continue
            runs = est.longer_than(elapsed_s)
            if len(runs) >= self.min_samples:
                return Prediction(_quantile(runs, q), "history:" + LEVEL_NAMES[i], len(runs))
        return Prediction(self.default_s, "default")


def waiting_runtime_s(
    whole_s: Callable[[float], float], progress_s: float, overrun_s: float
) -> float:
    """What a waiting job still has to run, for ``PendingJob.predicted_runtime_s``.

    ``whole_s(elapsed_s)`` is the predicted whole runtime of a job that has run
    ``elapsed_s`` (``HistoryPredictor.predict``'s). A job that never ran needs its whole
    runtime; one with progress (restarted from a checkpoint) the whole runtime predicted
    from the runs that got as far, less its progress, at least ``overrun_s``."""
    if progress_s <= 0:
        return whole_s(0.0)
    return max(whole_s(progress_s) - progress_s, overrun_s)


def run_end(
    whole_s: Callable[[float], float],
    started_at: float,
    start_progress_s: float,
    now: float,
    reached_at: float | None = None,
) -> float:
    """When a running job is predicted to end, for ``RunningJob.predicted_end``.

    The run started at ``started_at`` from ``start_progress_s`` of progress (0, or its
    checkpoint's) and is known to have run until ``reached_at`` (its last checkpoint; None:
    only its start), so it ends when it has done the rest of its whole runtime predicted
    from the runs that got that far. A run already past that end is predicted again from
    the runs that lasted as long as it has now; if it is past that too, the engine's
    overrun rule applies (``policy.running_end``: ``overrun_s`` from now)."""
    reached = start_progress_s + max(
        0.0, (started_at if reached_at is None else reached_at) - started_at
    )
    end = started_at + max(0.0, whole_s(reached) - start_progress_s)
    if end <= now:
        elapsed = start_progress_s + (now - started_at)
        end = started_at + max(0.0, whole_s(elapsed) - start_progress_s)
    return end


def fill_predictions(snapshot: Snapshot, predictor: HistoryPredictor, now: float) -> Snapshot:
    """Fill missing ``predicted_runtime_s`` / ``predicted_end`` from the predictor, by the
    rules the loop and the replay use (``waiting_runtime_s``, ``run_end``; the engine's
    views carry no progress, so a run is taken to have started from none)."""
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

    def end(r: RunningJob) -> float:
        def whole_s(elapsed: float) -> float:
            return predictor.predict(
                owner=r.owner, model_name=r.model_name, queue=r.queue, gpus=r.gpus,
                elapsed_s=elapsed,
            ).seconds  # fmt: skip

        return run_end(whole_s, r.started_at, 0.0, now, reached_at=r.last_checkpoint_at)

    running = tuple(
        r if r.predicted_end is not None else dataclasses.replace(r, predicted_end=end(r))
        for r in snapshot.running
    )
    return dataclasses.replace(snapshot, pending=pending, running=running)
