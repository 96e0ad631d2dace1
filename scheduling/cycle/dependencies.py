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
"""

from __future__ import annotations

from scheduling.cycle.context import Cycle
from scheduling.models import Job
from scheduling.transitions import set_state

_ENDED = {Job.State.FAILED: "failed", Job.State.CANCELLED: "was cancelled"}


def cancel_unreachable(cycle: Cycle) -> None:
    """Cancel the pending jobs waiting for a job that ended failed or cancelled, or for an
    array (``Job.after_arrays``) one task of which did, down their chains (a few statements
    a link of the longest chain; none when no job waits so)."""
    while True:
        blocked: dict[int, str] = {}  # the first such dependency says why
        for job_id, dep_id, state in (
            Job.after.through.objects.filter(
                from_job__state=Job.State.PENDING, to_job__state__in=_ENDED
            )
            .order_by("from_job_id", "to_job_id")
            .values_list("from_job_id", "to_job_id", "to_job__state")
        ):
            blocked.setdefault(job_id, f"job {dep_id} it waited for {_ENDED[state]}")
        for job_id, array_id, index, state in (
            Job.after_arrays.through.objects.filter(
                job__state=Job.State.PENDING, jobarray__tasks__state__in=_ENDED
            )
            .order_by("job_id", "jobarray_id", "jobarray__tasks__array_index")
            .values_list(
                "job_id", "jobarray_id", "jobarray__tasks__array_index", "jobarray__tasks__state"
            )
        ):
            why = f"task {index} of array {array_id} it waited for {_ENDED[state]}"
            blocked.setdefault(job_id, why)
        # Only the job rows, FOR NO KEY UPDATE (as ``services.cancel_job``): one cancelled
        # meanwhile by a person is no longer pending and is left alone.
        jobs = list(
            Job.objects.select_for_update(of=("self",), no_key=True)
            .filter(pk__in=blocked, state=Job.State.PENDING)
            .order_by("pk")
        )
        if not jobs:
            return
        for job in jobs:
            set_state(job, Job.State.CANCELLED)
            job.finished_at = cycle.stamp(job)
            job.save(update_fields=["state", "finished_at", "updated_at"])
            cycle.event(job, "cancelled", f"cancelled: {blocked[job.pk]}")
