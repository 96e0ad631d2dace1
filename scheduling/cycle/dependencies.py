"""Jobs that can never start: a job they wait for (``Job.after``), or an array they wait
for (``Job.after_arrays``), ended so that it can no longer do what they wait for
(``Job.DEFEATS``).

Every iteration, after everything that may end a job (runs that ended, launches the
cluster refused for good), the loop cancels each pending job with such a dependency,
then the jobs waiting for those, and so on down a chain, in the same transaction: each
job's timeline says why ("cancelled: job 12 it waited for failed"). A run that failed with
a retry left, or was requeued, has not ended: its dependents keep waiting.

By ``after_condition``: a job after others' success (Slurm's ``afterok``) is cancelled when
one of them failed or was cancelled, or a task of an array it waits for did; a job after
their failure (``afternotok``) when one of them succeeded, or every task of an array it
waits for did; a job after their end whatever the outcome (``afterany``) never so.

It is a sweep, not a reaction to this iteration's transitions: a job submitted with
``after=[12]`` while another iteration failed job 12 (its check read 12 still running) is
found by the next one, so no job waits forever for a job that can no longer meet its
condition.
"""

from __future__ import annotations

from django.db.models import QuerySet

from scheduling.cycle.context import Cycle
from scheduling.dependencies import arrays_all_succeeded
from scheduling.models import Job
from scheduling.sql import bulk_set
from scheduling.transitions import set_state

_DID = {
    Job.State.FAILED: "failed", Job.State.CANCELLED: "was cancelled",
    Job.State.SUCCEEDED: "succeeded",
}  # fmt: skip
_SUCCEEDED, _FAILED = Job.AfterCondition.SUCCEEDED, Job.AfterCondition.FAILED
_READ = ("state", "submitted_at")  # what a cancel reads of a job (``Cycle.stamp``)
_WRITTEN = ("state", "finished_at", "updated_at")


def cancel_unreachable(cycle: Cycle) -> None:
    """Cancel the pending jobs waiting for a job, or an array, that can no longer meet their
    ``after_condition``, down their chains (a few statements a link of the longest chain,
    however many jobs it cancels; none when no job waits so)."""
    while True:
        blocked: dict[int, str] = {}  # the first such dependency says why
        # a part a condition, in one statement (UNION ALL): each part the planner serves
        # from its own side (an OR of the two read every link: 14 ms against 2 ms, 5,000
        # waiting jobs)
        first, second = (
            Job.after.through.objects.filter(
                from_job__state=Job.State.PENDING,
                from_job__after_condition=condition,
                to_job__state__in=Job.DEFEATS[condition],
            ).values_list("from_job_id", "to_job_id", "to_job__state")
            for condition in (_SUCCEEDED, _FAILED)
        )
        for job_id, dep_id, state in sorted(first.union(second, all=True)):
            blocked.setdefault(job_id, f"job {dep_id} it waited for {_DID[state]}")
        for job_id, why in [*_blocked_by_failed_tasks(), *_blocked_by_succeeded_arrays()]:
            blocked.setdefault(job_id, why)
        # Only the job rows, FOR NO KEY UPDATE (as ``services.cancel_job``): one cancelled
        # meanwhile by a person is no longer pending and is left alone.
        jobs = list(
            Job.objects.select_for_update(of=("self",), no_key=True)
            .filter(pk__in=blocked, state=Job.State.PENDING)
            .only(*_READ)
            .order_by("pk")
        )
        if not jobs:
            return
        for job in jobs:
            set_state(job, Job.State.CANCELLED)
            job.finished_at = job.updated_at = cycle.stamp(job)
            cycle.event(job, "cancelled", f"cancelled: {blocked[job.pk]}")
        # one statement for them all (a cancelled 1,000-task array: 1,000 jobs after it)
        bulk_set(Job, _WRITTEN, [(job.pk, *(getattr(job, f) for f in _WRITTEN)) for job in jobs])


def _waiting_on_arrays(condition: str) -> QuerySet:
    """The links of the pending jobs waiting, under ``condition``, for arrays."""
    return Job.after_arrays.through.objects.filter(
        job__state=Job.State.PENDING, job__after_condition=condition
    )


def _blocked_by_failed_tasks() -> list[tuple[int, str]]:
    """``(pending job, why)`` for each pending job waiting for an array's success with a
    task that failed or was cancelled, by job and array (the why names the array's lowest
    such task). Two queries, each as long as the arrays' ended tasks or their links: never
    the product of both (a cancelled 1,000-task array with 1,000 jobs waiting for it is
    2,000 rows)."""
    waiting = _waiting_on_arrays(_SUCCEEDED)
    ended: dict[int, str] = {}
    for array_id, index, state in (
        Job.objects.filter(
            array_id__in=waiting.values("jobarray_id"), state__in=Job.DEFEATS[_SUCCEEDED]
        )
        .order_by("array_id", "array_index")
        .values_list("array_id", "array_index", "state")
    ):
        ended.setdefault(array_id, f"task {index} of array {array_id} it waited for {_DID[state]}")
    return _of_arrays(waiting, ended)


def _blocked_by_succeeded_arrays() -> list[tuple[int, str]]:
    """``(pending job, why)`` for each pending job waiting for an array's failure (Slurm's
    ``afternotok`` on an array job) every task of which succeeded. Two queries, none of
    them per task."""
    waiting = _waiting_on_arrays(_FAILED)
    succeeded = arrays_all_succeeded(waiting.values("jobarray_id"))
    why = {a: f"every task of array {a} it waited for succeeded" for a in succeeded}
    return _of_arrays(waiting, why)


def _of_arrays(waiting: QuerySet, why: dict[int, str]) -> list[tuple[int, str]]:
    """``(job, why)`` for each of the ``waiting`` links to an array of ``why``."""
    if not why:
        return []
    rows = (
        waiting.filter(jobarray_id__in=why)
        .order_by("job_id", "jobarray_id")
        .values_list("job_id", "jobarray_id")
    )
    return [(job_id, why[array_id]) for job_id, array_id in rows]
