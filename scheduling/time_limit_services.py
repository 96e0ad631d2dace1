"""The writer of a job's time limit after submission (Slurm's ``scontrol update
TimeLimit=``), ``scheduling.time_limits``.

Who: whoever may cancel the job (its owner, their team lead, an admin) may **lower** it,
or give one to a job that has none; only an admin may **raise** it, or give one above the
queue's max, as in Slurm (the scheduler planned other work around the run ending by
then: a reservation behind it). An admin's limit above the queue's max is the admin's
choice: the queue's bound does not hold the job back (``Job.time_limit_past_queue_max``;
a pending job above it otherwise waits, ``time_limits.queue_verdict``), and lowering the
limit within the max may be done by whoever may cancel the job: the way out of that wait. A pending job's next run gets the new limit; a running
job's run is measured against it from its start, so a limit lowered below what the run
has lasted stops it at the next cycle. The loop re-reads the limit under the job's lock
before it stops a run (``cycle.stops.request_stops``), so a limit raised while a cycle
runs is never stopped on the old one.

Shares cancel's plumbing (``services.lock_active_job``: the job row alone locked,
``may_cancel``, compare-and-set on its state; ``services.record_action``: timeline, audit
of someone else's job, live event).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from scheduling import limits
from scheduling.engine.explain import when
from scheduling.hold_services import clean_hold_reason
from scheduling.models import Job
from scheduling.permissions import may_raise_time_limit
from scheduling.services import lock_active_job, record_action
from scheduling.time_limits import TIME_LIMIT, limit_words

RAISE_ADMINS_ONLY = (
    "only a cluster admin may raise a time limit (as in Slurm: other jobs were planned "
    "around this run ending by then); lower it, or ask an admin"
)


def clean_minutes(value: Any) -> int:
    """A whole number of minutes from 1 to ``limits.RUNTIME_MAX_MINUTES``, or a
    ``ValidationError`` on ``time_limit_minutes``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError({"time_limit_minutes": ["a whole number of minutes"]})
    if not 1 <= value <= limits.RUNTIME_MAX_MINUTES:
        raise ValidationError(
            {"time_limit_minutes": [f"from 1 to {limits.RUNTIME_MAX_MINUTES:,} minutes"]}
        )
    return value


def change_time_limit(
    user: Any, job_id: int, minutes: Any, reason: Any = "", *, source_ip: str | None = None
) -> Job:
    """Set an active job's time limit to ``minutes`` (see the module's rules).

    Refused, nothing written: a job that ended, or whose run is already being stopped at its
    limit (``ValidationError`` on ``state``); the same limit again, a value out of range, a
    reason that is not one clean line (on their fields); a raise, or a limit above the
    queue's max, by anyone but an admin (``PermissionDenied``).
    """
    minutes = clean_minutes(minutes)
    with transaction.atomic():
        job = lock_active_job(user, job_id, "change its time limit")
        reason = clean_hold_reason(reason, required=False)
        if job.state == Job.State.PREEMPTING and job.stop_reason == TIME_LIMIT:
            raise ValidationError({"state": ["its run is already being stopped at its time limit"]})
        before = job.time_limit_minutes
        if minutes == before:
            raise ValidationError(
                {"time_limit_minutes": [f"the time limit is already {limit_words(minutes)}"]}
            )
        most = job.queue.max_time_limit_minutes
        if not may_raise_time_limit(user):
            if before is not None and minutes > before:
                raise PermissionDenied(RAISE_ADMINS_ONLY)
            if most and minutes > most:
                raise PermissionDenied(
                    f"queue {job.queue.name} lets a run last at most {limit_words(most)}; only "
                    "a cluster admin may give a longer limit"
                )
        job.time_limit_minutes = minutes
        # an admin's limit past the queue's max: the queue's bound does not hold it back
        # (``time_limits.queue_verdict``); within it, the bound holds again if lowered
        job.time_limit_past_queue_max = bool(most and minutes > most)
        job.save(update_fields=["time_limit_minutes", "time_limit_past_queue_max", "updated_at"])
        record_action(
            user, job, "time_limit", ("time_limit", _message(user, job, before, reason)),
            ({"time_limit_minutes": before}, {"time_limit_minutes": minutes}),
            reason=reason, source_ip=source_ip,
        )  # fmt: skip
    return job


def _message(user: Any, job: Job, before: int | None, reason: str) -> str:
    """The timeline's line of a changed limit, with what it means for the run on now."""
    was = f"{limit_words(before)} a run" if before else "none"
    message = (
        f"time limit changed by {user.username} from {was} to "
        f"{limit_words(job.time_limit_minutes or 0)} a run"
    )
    if reason:
        message += f": {reason}"
    most = job.queue.max_time_limit_minutes
    if job.time_limit_past_queue_max and most:
        message += (
            f"; above queue {job.queue.name}'s longest run ({limit_words(most)}), by an admin: "
            "the queue's bound does not hold it back"
        )
    if job.state == Job.State.RUNNING and job.started_at:
        stop = job.started_at + timedelta(minutes=job.time_limit_minutes or 0)
        message += f"; this run is asked to stop at {when(stop.timestamp())} if still running"
    return message
