"""Writers of holds: hold (and so suspend) and release a job (``scheduling.holds``).

One action each, whatever the job is doing. ``hold_job`` on a pending job keeps it out of
the engine from the next cycle; on a running (or checkpointing) job it also asks the loop
to suspend it: the next cycle checkpoints and stops it gracefully and it comes back pending
and held. ``release_job`` clears the hold: a pending job queues again from now; a running
job not suspended yet keeps running. Both share cancel's plumbing
(``services.lock_active_job``: the job row alone locked, ``may_cancel``, compare-and-set on
its state; ``services.record_action``: timeline, audit of someone else's job, live event).

Who: the owner, their team lead or an admin (``may_cancel``). A hold an admin puts on
someone else's job is an *admin* hold (Slurm's): only an admin may release it, and it needs
a reason; the owner's reason is optional.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core import clock
from core.security import has_control_characters, invisible_character_error
from scheduling.holds import ADMIN, USER
from scheduling.models import Job
from scheduling.permissions import holds_as_admin, may_release
from scheduling.services import lock_active_job, record_action

REASON_MAX = 300
# The columns a hold or release writes (with ``updated_at``; a release also ``released_at``).
WRITTEN_FIELDS = ("held_by", "held_at", "hold_reason", "hold_kind")
ADMIN_HOLD = "an admin hold: only a cluster admin may release it"


def clean_hold_reason(reason: Any, *, required: bool) -> str:
    """The stripped reason, or a ``ValidationError`` on ``reason``: one line of at most
    ``REASON_MAX`` characters, no control characters, no invisible formatting characters
    (bidi overrides: ``core.security``); required for an admin's hold of another's job."""
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        raise ValidationError({"reason": ["a text"]})
    reason = reason.strip()
    error = None
    if required and not reason:
        error = "say why: an admin's hold of someone else's job is shown to its owner"
    elif len(reason) > REASON_MAX:
        error = f"at most {REASON_MAX} characters"
    elif has_control_characters(reason):
        error = "control characters are not allowed"
    else:
        error = invisible_character_error(reason, "a reason")
    if error:
        raise ValidationError({"reason": [error]})
    return reason


def hold_state(job: Job) -> dict[str, Any]:
    """A job's hold as an audit record keeps it."""
    return {
        "held_by": job.held_by.username if job.held_by else None,
        "held_at": job.held_at.isoformat() if job.held_at else None,
        "hold_reason": job.hold_reason,
        "hold_kind": job.hold_kind,
    }


def hold_job(user: Any, job_id: int, reason: Any = "", *, source_ip: str | None = None) -> Job:
    """Put an active job on hold; a running one is suspended by the next cycle.

    Compare-and-set on the locked row: a job that ended is refused ("job is already
    succeeded"), one already held too (naming who holds it), but for an admin's hold of
    someone else's job held by a user hold: that becomes an admin hold (Slurm's: an
    admin's ``scontrol hold`` over a user's), held since the first hold.
    """
    with transaction.atomic():
        job = lock_active_job(user, job_id, "hold")
        kind = ADMIN if holds_as_admin(user, job) else USER
        reason = clean_hold_reason(reason, required=kind == ADMIN)
        upgrade = job.held_at is not None and kind == ADMIN and job.hold_kind == USER
        if job.held_at is not None and not upgrade:
            by = job.held_by.username if job.held_by else "a former user"
            raise ValidationError({"state": [f"job is already held by {by}"]})
        before = hold_state(job)
        # an admin's hold over a user hold becomes an admin hold (Slurm's), held since then
        at = job.held_at if upgrade else clock.now()
        job.held_by, job.held_at, job.hold_reason, job.hold_kind = user, at, reason, kind
        job.save(update_fields=[*WRITTEN_FIELDS, "updated_at"])
        why = f": {reason}" if reason else ""
        if upgrade:
            message = (
                f"admin hold by {user.username}{why}, over the hold it had; only an admin may "
                "release it"
            )
        elif job.state == Job.State.PENDING:
            message = f"held by {user.username}{why}; it waits until released"
        elif job.state == Job.State.PREEMPTING:
            message = (
                f"held by {user.username}{why}; it is already checkpointing to stop, and then "
                "waits, held, until released"
            )
        else:
            message = (
                f"suspended by {user.username}{why}; the next cycle checkpoints and stops it, "
                "and it waits, held, until released"
            )
        record_action(user, job, "hold", ("held", message), (before, hold_state(job)),
                      reason=reason, source_ip=source_ip)  # fmt: skip
    return job


def release_job(user: Any, job_id: int, *, source_ip: str | None = None) -> Job:
    """Release a held job: a pending one queues again from now (``released_at``: its place
    and its wait restart then); a running one not suspended yet keeps running.

    Compare-and-set: a job that ended or is not held is refused; an admin hold is released
    by an admin only.
    """
    with transaction.atomic():
        job = lock_active_job(user, job_id, "release")
        if job.held_at is None:
            raise ValidationError({"state": ["job is not held"]})
        if not may_release(user, job):
            raise PermissionDenied(ADMIN_HOLD)
        before = hold_state(job)
        job.held_by, job.held_at, job.hold_reason, job.hold_kind = None, None, "", ""
        fields = [*WRITTEN_FIELDS, "updated_at"]
        if job.state == Job.State.RUNNING:
            message = f"released by {user.username} before it was suspended: it keeps running"
        else:
            job.released_at = clock.now()
            fields.append("released_at")
            message = f"released by {user.username}: it queues again from now"
        job.save(update_fields=fields)
        record_action(user, job, "release", ("released", message), (before, hold_state(job)),
                      source_ip=source_ip)  # fmt: skip
    return job
