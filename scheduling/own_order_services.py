"""The writer of a person's own order (Slurm's ``scontrol top``): put a waiting job first
among its owner's waiting jobs (``Job.first_among_own_at``; the engine's
``own_order.py``).

The job then takes the first of the places its owner's waiting jobs of its line and tier
hold in the queue, the latest put first going first; nobody else's job changes place, so
anyone who may act on the job may do it: its owner, their team lead, an admin
(``may_cancel``). Only a waiting job, and not one already put first last. Shares cancel's
plumbing (``services.lock_active_job``: the job row alone locked, compare-and-set on its
state; ``services.record_action``: timeline, audit of someone else's job, live event).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from core import clock
from scheduling.models import Job
from scheduling.services import lock_active_job, record_action

STARTED = "it has started: only a waiting job can be put first"


def put_first(user: Any, job_id: int, *, source_ip: str | None = None) -> Job:
    """Put a waiting job first among its owner's waiting jobs of its line and tier.

    Refused, nothing written: a job that ended or started (``ValidationError`` on
    ``state``), one already put first the latest of them (on ``first_among_own_at``);
    anyone who may not cancel the job (``PermissionDenied``).
    """
    with transaction.atomic():
        job = lock_active_job(user, job_id, "put it first among the owner's jobs")
        if job.state != Job.State.PENDING:
            raise ValidationError({"state": [STARTED]})
        latest = (
            Job.objects.filter(owner_id=job.owner_id, state=Job.State.PENDING,
                               queue__business_line_id=job.queue.business_line_id,
                               tier=job.tier)
            .aggregate(latest=Max("first_among_own_at"))["latest"]
        )  # fmt: skip
        if job.first_among_own_at is not None and job.first_among_own_at == latest:
            raise ValidationError(
                {"first_among_own_at": ["it is already the one put first of those jobs"]}
            )
        before = job.first_among_own_at
        job.first_among_own_at = clock.now()
        job.save(update_fields=["first_among_own_at", "updated_at"])
        owner = job.owner.username if job.owner_id else "its owner"
        message = (
            f"put first among {owner}'s waiting jobs of {job.queue.business_line.name}, tier "
            f"{job.tier}, by {user.username} (Slurm's scontrol top): it takes the first of "
            "their places in the queue; nobody else's job moves"
        )
        record_action(
            user, job, "top", ("top", message),
            ({"first_among_own_at": before.isoformat() if before else None},
             {"first_among_own_at": job.first_among_own_at.isoformat()}),
            source_ip=source_ip,
        )  # fmt: skip
    return job
