"""The writer of a waiting job's queue after submission (Slurm's ``scontrol update
Partition=``): move it to another queue, as if it had been submitted there.

Who: whoever may cancel the job (its owner, their team lead, an admin), to a queue its
**owner** may submit to (a lead cannot move a person's job where that person may not
submit). Only a waiting job, not a task of an array (its tasks share the array's queue:
move none of them apart). The job keeps its tier, time limit and everything else it
asked, and must meet the new queue's rules as a submission would: its tier at most the
queue's (``queue X allows tiers up to ...``), its time limit within the queue's max. It
keeps its place in time (its submission, so its wait), and waits there from the next
cycle with that queue's quota, line and fair share.

It takes the cluster lock first (up to ``LOCK_WAIT_S``, else ``ClusterBusy``), as
cancelling an array does: a cycle plans a job with its queue's quota and launches it after,
so a move between the two would start it in a queue that had no room planned for it;
under the lock no cycle runs. Shares cancel's plumbing (``services.lock_active_job``,
``services.record_action``).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from core import events
from core.realtime import publish_on_commit
from quotas.models import Queue, Tier
from scheduling.cluster_lock import wait_cluster_lock
from scheduling.hold_services import clean_hold_reason
from scheduling.models import Job
from scheduling.services import NOT_YOURS, lock_active_job, record_action, resolve_queue
from scheduling.time_limits import limit_words

# How long a move waits for the loop to let go of the cluster (else ``ClusterBusy``).
LOCK_WAIT_S = 20.0
STARTED = "it has started: only a waiting job can move to another queue"


def move_job(
    user: Any, job_id: int, queue_ref: Any, reason: Any = "", *, source_ip: str | None = None
) -> Job:
    """Move a waiting job to the queue named or numbered ``queue_ref`` (by the module's
    rules).

    Refused, nothing written: a job that started or ended (``ValidationError`` on
    ``state``), an array's task (on ``queue``), a queue its owner may not submit to, the
    queue it is in, one whose tier or time limit rules it breaks (on ``queue``); a reason
    that is not one clean line; anyone who may not cancel the job (``PermissionDenied``).
    """
    if isinstance(queue_ref, bool) or not isinstance(queue_ref, str | int):
        raise ValidationError({"queue": ["a queue's name or id"]})
    reason = clean_hold_reason(reason, required=False)
    with transaction.atomic():
        wait_cluster_lock(LOCK_WAIT_S)
        job = lock_active_job(user, job_id, "move it to another queue")
        if job.state != Job.State.PENDING:
            raise ValidationError({"state": [STARTED]})
        if job.array_id is not None:
            raise ValidationError(
                {"queue": [f"a task of array {job.array_id} stays in its array's queue"]}
            )
        try:
            target = resolve_queue(job.owner, queue_ref)
        except ValidationError as exc:
            barred = exc.message_dict.get("queue") == [NOT_YOURS]
            if barred and user.pk != job.owner_id:  # a lead's or an admin's: whose rule it is
                raise ValidationError({"queue": [f"{job.owner.username} may not submit to "
                                                 f"queue {str(queue_ref)[:80]!r}"]}) from exc  # fmt: skip
            raise
        _check_fits(job, target)
        before = job.queue
        job.queue = target
        job.save(update_fields=["queue", "updated_at"])
        why = f": {reason}" if reason else ""
        message = (
            f"moved by {user.username} from queue {before.name} to {target.name} (Slurm's "
            f"scontrol update Partition=){why}; it waits there from the next cycle, its "
            "wait counted from its submission"
        )
        record_action(user, job, "move", ("moved", message),
                      ({"queue": before.name}, {"queue": target.name}),
                      reason=reason, source_ip=source_ip)  # fmt: skip
        publish_on_commit(*events.queues_updated(queue=before.name))
    return job


def _check_fits(job: Job, target: Queue) -> None:
    """The new queue's rules a submission there meets: not the queue it is in, its tier
    at most the queue's, its time limit within the queue's max; else a ValidationError on
    ``queue`` saying which."""
    if target.pk == job.queue_id:
        raise ValidationError({"queue": [f"it is already in queue {target.name}"]})
    if Tier.rank(job.tier) > Tier.rank(target.tier):
        raise ValidationError(
            {"queue": [f"queue {target.name} allows tiers up to {target.tier!r}, not "
                       f"{job.tier!r}"]}
        )  # fmt: skip
    most = target.max_time_limit_minutes
    if job.time_limit_minutes and most and job.time_limit_minutes > most:
        raise ValidationError(
            {"queue": [f"queue {target.name} lets a run last at most {limit_words(most)}; its "
                       f"time limit is {limit_words(job.time_limit_minutes)}: lower it first"]}
        )  # fmt: skip
