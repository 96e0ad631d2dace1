"""Time limits (Slurm's ``--time``): the longest one run of a job may last.

A job may give ``time_limit_minutes``. Each of its runs may last that long, counted from
the run's start, as Slurm counts a requeued job's new run (a run restarted after a
preemption, a move or a retry has the whole limit again). The loop asks a run that has
reached its limit to checkpoint and stop, with the grace a preemption gets
(``cycle.stops.request_stops``); once stopped, the job fails, with no retry
(Slurm's ``TIMEOUT``), its progress kept as its checkpoint saved it
(``cycle.finished.run_ended``). A backend that enforces the limit itself (Slurm's
``--time``, Kubernetes' ``activeDeadlineSeconds``, given a grace more than ours as a
backstop) reports a failed or stopped run; one that lasted its limit ends the job the same
way. The runtime predictor never predicts a run longer than its limit
(``scheduling.prediction``), so a job with a limit can start in a gap its history would
not fit. A queue may bound the limits of its jobs and give one to a job that asks none
(Slurm's partition ``MaxTime`` and ``DefaultTime``: ``of_request``), fixed on the job at
submission. A pending job whose limit is above its queue's max *now* (the max was lowered
after it was submitted) does not start as it is: the loop holds it from the engine as a
job waiting for others (``scheduling.snapshot``) and says so, ``QUEUE_TIME_LIMIT`` (Slurm's
``PartitionTimeLimit``: ``queue_verdict``), until its limit is lowered
(``time_limit_services``) or the queue's raised. A job without a limit submitted before
its queue had one is not held: it takes the queue's limit for jobs that give none when it
starts (``for_start``), as Slurm gives a job without ``--time`` its partition's when it
starts. A running job keeps its limit.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from scheduling.engine import explain
from scheduling.engine import types as et
from scheduling.engine.explain import duration

if TYPE_CHECKING:
    from quotas.models import Queue

#: ``Job.stop_reason`` of a run asked to stop at its time limit.
TIME_LIMIT = "time_limit"
#: How the ``failure_reason`` of a job failed on its time limit begins.
TIMEOUT = "time limit reached (Slurm's TIMEOUT)"
#: A run the backend ended within this much of its limit reached it (the backend's clock
#: and the portal's may differ by a second or two: Slurm's times are whole seconds).
SLACK_S = 5.0


#: The pending reason of a job whose limit is above its queue's (``queue_verdict``).
QUEUE_LIMIT_CODE = "QUEUE_TIME_LIMIT"


def limit_s(minutes: int | None) -> float | None:
    """A ``time_limit_minutes`` in seconds (None: no limit)."""
    return float(minutes) * 60.0 if minutes else None


def reached(started: float | None, minutes: int | None, now: float, slack_s: float = 0.0) -> bool:
    """Has a run started at ``started`` (epoch seconds) reached a limit of ``minutes`` by
    ``now`` (within ``slack_s``)? (No run, no limit: no.)"""
    limit = limit_s(minutes)
    return started is not None and limit is not None and now - started >= limit - slack_s


def lasted_limit(started_at: datetime | None, minutes: int | None, ended_at: datetime) -> bool:
    """Did a run that started at ``started_at`` and ended at ``ended_at`` last its limit?
    (How a run the backend ended on its own is told apart from any other failure.)"""
    if started_at is None:
        return False
    return reached(started_at.timestamp(), minutes, ended_at.timestamp(), SLACK_S)


def of_request(
    asked: int | None, estimate: int | None, queue: Queue
) -> tuple[int | None, dict[str, list[str]]]:
    """The time limit a job submitted to ``queue`` gets, and the errors by field if it
    may not: the one it asks, or the queue's for a job that asks none
    (``Queue.time_limit_for_unlimited_jobs``: Slurm's ``DefaultTime``, else ``MaxTime``).
    Refused: a limit above the queue's max, and an estimate longer than the limit."""
    most = queue.max_time_limit_minutes
    if asked and most and asked > most:
        return None, {
            "time_limit_minutes": [
                f"queue {queue.name} lets a run last at most {limit_words(most)} ({most:,} "
                "min): ask for that or less, or submit to another queue"
            ]
        }
    limit = asked or queue.time_limit_for_unlimited_jobs
    if limit and estimate and estimate > limit:
        whose = "" if asked else f", queue {queue.name}'s for a job that gives none"
        return limit, {
            "estimated_runtime_minutes": [
                f"your estimate ({estimate:,} min) is longer than the time limit ({limit:,} "
                f"min{whose}): the run would be stopped before it ends; raise the limit or "
                "lower the estimate"
            ]
        }
    return limit, {}


def above_queue_max(minutes: int | None, queue_max: int | None) -> bool:
    """Is a job's limit (None: none, taken from the queue at its start: ``for_start``)
    above its queue's max (None: no bound)?"""
    return queue_max is not None and minutes is not None and minutes > queue_max


def for_start(minutes: int | None, default: int | None, most: int | None) -> int | None:
    """The limit a job starts with: its own, else its queue's for jobs that give none now
    (its ``default``, else its ``most``; ``Queue.time_limit_for_unlimited_jobs``), else none."""
    return minutes or default or most


def queue_verdict(minutes: int, queue: str, queue_max: int) -> et.Verdict:
    """``QUEUE_TIME_LIMIT``: the verdict of a pending job whose limit (``minutes``) is above
    what its queue (``queue``) lets a run last now (``queue_max``)."""
    most = limit_words(queue_max)
    message = (
        f"Its time limit ({limit_words(minutes)} a run) is longer than queue {queue} lets a "
        f"run last now ({most}): the queue's bound was lowered after it was submitted, and it "
        "does not start as it is."
    )
    details: dict = {
        "queue": queue, "queue_max_time_limit_seconds": queue_max * 60,
        "time_limit_seconds": minutes * 60,
        explain.NO_ESTIMATE: "it starts only once its time limit is within its queue's",
    }  # fmt: skip
    remedy = (
        f"Lower its time limit to {most} ({queue_max:,} min) or less: Change the time limit on "
        f"its page, or gpuctl time-limit JOB {queue_max}. Or ask an admin to raise the queue's."
    )
    return et.Verdict(QUEUE_LIMIT_CODE, message, details, remedy)


def limit_words(minutes: int) -> str:
    """``4 h``, ``90 min``: a limit as the pages and the timeline say it."""
    return duration(minutes * 60)


def stop_words(minutes: int) -> str:
    """The timeline's line of a run asked to stop at its limit."""
    return (
        f"asked to checkpoint and stop: it reached its time limit of {limit_words(minutes)} "
        "a run; the job then ends failed, with no retry"
    )


def failure_reason(minutes: int, ran_s: float, how: str) -> str:
    """``Job.failure_reason`` of a job whose run reached its limit (``how``: how the run
    stopped, e.g. ``after its checkpoint``)."""
    return (
        f"{TIMEOUT}: the run lasted {duration(ran_s)} of the "
        f"{limit_words(minutes)} a run may last, and stopped {how}; it is not retried: "
        "submit it again with a longer time limit"
    )
