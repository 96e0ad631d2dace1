"""Jobs that can never start: a job they wait for (``Job.after``), or a task of an array they
wait for (``Job.after_arrays``), ended failed or cancelled.

Every iteration, after everything that may end a job (runs that ended, launches the
cluster refused for good), the loop cancels each pending job with such a dependency,
then the jobs waiting for those, and so on down a chain, in the same transaction: each
job's timeline says why ("cancelled: job 12 it waited for failed"). A run that failed with
a retry left, or was requeued, has not ended: its dependents keep waiting.

It is a sweep, not a reaction to this iteration's transitions: a job submitted with
``after=[12]`` while another iteration failed job 12 (its check read 12 still running) is
found by the next one, so no job waits forever for a job that can no longer succeed.
A job whose ``after_condition`` is ``ended`` (Slurm's ``afterany``) waits for them to end
whatever the outcome: it is never cancelled so.
"""

from __future__ import annotations

from scheduling.cycle.context import Cycle
from scheduling.models import Job
from scheduling.sql import bulk_set
from scheduling.transitions import set_state

_ENDED = {Job.State.FAILED: "failed", Job.State.CANCELLED: "was cancelled"}
_SUCCEEDED = Job.AfterCondition.SUCCEEDED  # a job after others' ends is never cancelled so
_READ = ("state", "submitted_at")  # what a cancel reads of a job (``Cycle.stamp``)
_WRITTEN = ("state", "finished_at", "updated_at")


def cancel_unreachable(cycle: Cycle) -> None:
    """Cancel the pending jobs waiting for a job that ended failed or cancelled, or for an
    array (``Job.after_arrays``) one task of which did, down their chains (a few statements
    a link of the longest chain, however many jobs it cancels; none when no job waits
    so)."""
    while True:
        blocked: dict[int, str] = {}  # the first such dependency says why
        for job_id, dep_id, state in (
            Job.after.through.objects.filter(
                from_job__state=Job.State.PENDING,
                from_job__after_condition=_SUCCEEDED,
                to_job__state__in=_ENDED,
            )
            .order_by("from_job_id", "to_job_id")
            .values_list("from_job_id", "to_job_id", "to_job__state")
        ):
            blocked.setdefault(job_id, f"job {dep_id} it waited for {_ENDED[state]}")
        for job_id, why in _blocked_by_arrays():
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


def _blocked_by_arrays() -> list[tuple[int, str]]:
    """``(pending job, why)`` for each pending job waiting for an array with a task that
    failed or was cancelled, by job and array (the why names the array's lowest such task).
    Two queries, each as long as the arrays' ended tasks or their links: never the product
    of both (a cancelled 1,000-task array with 1,000 jobs waiting for it is 2,000 rows)."""
    through = Job.after_arrays.through
    waiting = through.objects.filter(job__state=Job.State.PENDING, job__after_condition=_SUCCEEDED)
    linked = waiting.values("jobarray_id")
    ended: dict[int, str] = {}
    for array_id, index, state in (
        Job.objects.filter(array_id__in=linked, state__in=_ENDED)
        .order_by("array_id", "array_index")
        .values_list("array_id", "array_index", "state")
    ):
        ended.setdefault(
            array_id, f"task {index} of array {array_id} it waited for {_ENDED[state]}"
        )
    if not ended:
        return []
    rows = (
        waiting.filter(jobarray_id__in=ended)
        .order_by("job_id", "jobarray_id")
        .values_list("job_id", "jobarray_id")
    )
    return [(job_id, ended[array_id]) for job_id, array_id in rows]
