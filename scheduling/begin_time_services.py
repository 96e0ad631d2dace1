"""The writer of a waiting job's earliest start after submission (Slurm's ``scontrol update
StartTime=``), ``scheduling.begin_time``.

Who: whoever may cancel the job (its owner, their team lead, an admin), as in Slurm, where
a job's owner may move its start time while it is pending. Only a **waiting** job: a run
that has started has no earliest start left to move. The new time is read as at
submission (``begin_time.of_request``: a zone required, at most a year ahead; a time
already past is no wait), and:

- put later (or given one it did not have), the job leaves the queue until then, as a job
  submitted with it, and its wait counts from then;
- put earlier, it queues from the new time;
- cleared (none, ``now`` or a time already past) while it was still held for it, the job
  queues **from now** (``Job.released_at``): the time it was asked to wait does not count
  as waiting, in the fair order, the starvation bound or the alert, exactly as a release
  from hold.

The loop re-reads the time under the job's lock before it starts it
(``cycle.launch.start_all``), so a start put off while a cycle plans it is not launched.
Shares cancel's plumbing (``services.lock_active_job``: the job row alone locked,
``may_cancel``, compare-and-set on its state; ``services.record_action``: timeline, audit of
someone else's job, live event).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from core import clock
from scheduling import begin_time
from scheduling.engine.explain import when
from scheduling.hold_services import clean_hold_reason
from scheduling.models import Job
from scheduling.services import lock_active_job, record_action

STARTED = "it has started: only a waiting job's earliest start can change"


def change_begin_time(
    user: Any, job_id: int, value: Any, reason: Any = "", *, source_ip: str | None = None
) -> Job:
    """Set a waiting job's earliest start to ``value`` (an aware datetime, RFC 3339 text;
    None or "" for none), by the module's rules.

    Refused, nothing written: a job that ended or has started (``ValidationError`` on
    ``state``); a time that is not one, or too far ahead, or what it is already (on
    ``begin_at``); a reason that is not one clean line (on ``reason``); anyone who may not
    cancel the job (``PermissionDenied``).
    """
    with transaction.atomic():
        job = lock_active_job(user, job_id, "change its earliest start")
        reason = clean_hold_reason(reason, required=False)
        if job.state != Job.State.PENDING:
            raise ValidationError({"state": [STARTED]})
        now = clock.now()
        new = begin_time.of_request(value, lambda: now)
        before = waiting_for(job, now)
        if new == before:
            raise ValidationError({"begin_at": [_unchanged(before)]})
        fields = put_off(job, new, now)
        job.save(update_fields=[*fields, "updated_at"])
        record_action(
            user, job, "begin_time", ("begin_time", timeline_line(user, before, new, reason)),
            ({"begin_at": iso(before)}, {"begin_at": iso(new)}),
            reason=reason, source_ip=source_ip,
        )  # fmt: skip
    return job


def waiting_for(job: Job, now: datetime) -> datetime | None:
    """The earliest start a waiting job still waits for at ``now``: None when it has none,
    or it is past (a time already past is no wait: the job queues as if it had none)."""
    return job.begin_at if job.begin_at and job.begin_at > now else None


def put_off(job: Job, new: datetime | None, now: datetime) -> tuple[str, ...]:
    """Give ``job`` (waiting, its row locked) the earliest start ``new`` (None: none); the
    fields written. Cleared while it still waited for one, it queues from ``now``
    (``released_at``): the time it was asked to wait is not counted as waiting."""
    if new is None and waiting_for(job, now) is not None:
        job.begin_at, job.released_at = None, now
        return ("begin_at", "released_at")
    job.begin_at = new
    return ("begin_at",)


def _unchanged(before: datetime | None) -> str:
    if before is None:
        return "it has no earliest start: it already queues"
    return f"its earliest start is already {when(before.timestamp())}"


def timeline_line(user: Any, before: datetime | None, new: datetime | None, reason: str) -> str:
    """The timeline's line: from what to what, and what it means for the job's wait."""
    was = when(before.timestamp()) if before else "none"
    if new is None:
        line = f"earliest start cleared by {user.username} (was {was}); it queues from now"
    else:
        line = (
            f"earliest start changed by {user.username} from {was} to {when(new.timestamp())} "
            "(Slurm's --begin); it queues from then"
        )
    return line + (f": {reason}" if reason else "")


def iso(at: datetime | None) -> str | None:
    """An earliest start as an audit record keeps it."""
    return at.isoformat() if at else None
