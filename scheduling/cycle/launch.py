"""Launching the plan's starts, with backoff after transient launch errors.

Compare-and-set: only jobs still pending are started. Each launch is told to the
backend first, under the run's deterministic name (``run_ref``), so a launch whose
commit is lost is adopted by the next cycle, never made twice; a launch is never
retried within the cycle. The GPU allocations of all successful launches are written in
one statement (the unique (node, GPU) constraint guards it), falling back to one job at
a time if it is refused, so one bad row cannot block the others. A permanent launch
error fails the job with the backend's words; a transient one leaves it pending,
backing off (``backoff``), with a ``LAUNCH_RETRY`` pending reason.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from scheduling.backends.base import BackendError, LaunchRequest, run_ref
from scheduling.clock import to_datetime, to_epoch
from scheduling.cycle.backoff import (
    LAUNCH_RETRY,
    LAUNCH_RETRY_CODE,
    last_retry_error,
    launch_backoff_s,
    launch_due,
    launch_retry_verdict,
    launch_streaks,
)
from scheduling.cycle.context import Cycle, fmt_placement
from scheduling.cycle.reconcile import allocate
from scheduling.engine import types as et
from scheduling.models import Allocation, Job, Node
from scheduling.sql import bulk_set

Streak = tuple[int, float, float]

STARTED_FIELDS = ["state", "attempt", "backend_ref", "started_at", "borrowed", "pending_code",
                  "queue_position", "estimated_start"]  # fmt: skip


def start_all(cycle: Cycle, starts: tuple[et.Start, ...]) -> None:
    """Launch the plan's starts, then record them in a few statements."""
    if not starts:
        return
    jobs = {
        j.pk: j
        for j in Job.objects.select_for_update().filter(
            pk__in=[s.job_id for s in starts], state=Job.State.PENDING
        )
    }
    launched: list[tuple[Job, et.Start]] = []
    streaks = launch_streaks(list(jobs))
    for start in starts:
        job = jobs.get(start.job_id)
        if job is None:
            continue  # cancelled (or adopted) since the snapshot
        streak = streaks.get(job.pk)
        if streak and not launch_due(streak, cycle.now):
            cycle.report.counts["launch_backoff"] += 1
            backing_off(cycle, job, streak)
            continue  # backing off after a transient launch failure
        if launch(cycle, job, start, streak):
            launched.append((job, start))
    placed = allocate_many(cycle, launched)
    now_dt = to_datetime(cycle.now)
    for job, start in placed:
        job.state = Job.State.RUNNING
        job.attempt += 1
        job.started_at = now_dt
        job.borrowed = start.borrowed
        job.pending_code = ""
        job.queue_position = None
        job.estimated_start = None
        borrowed = " on borrowed idle capacity (reclaimable)" if start.borrowed else ""
        cycle.event(job, "started", f"started on {fmt_placement(start.placement)}{borrowed}")
    bulk_set(Job, STARTED_FIELDS,
             [(j.pk, *(getattr(j, f) for f in STARTED_FIELDS)) for j, _ in placed])  # fmt: skip
    cycle.report.counts["starts"] += len(placed)


def launch(cycle: Cycle, job: Job, start: et.Start, streak: Streak | None) -> bool:
    """Ask the backend to launch the job's next run; True when it accepted."""
    ref = run_ref(job.pk, job.attempt + 1)
    request = LaunchRequest(
        ref=ref, job_id=job.pk, name=job.name, placement=start.placement,
        progress_s=job.progress_seconds,
        checkpoint_interval_s=job.checkpoint_interval_minutes * 60.0,
        checkpoint_path=job.checkpoint_path, exclusive_node=job.exclusive_node,
        sim_duration_s=(job.sim_duration_minutes or 0) * 60.0 or None,
    )  # fmt: skip
    cycle.report.touched_backend = True
    try:
        cycle.backend.launch(request)
    except BackendError as err:
        cycle.report.errors.append(f"launch {ref}: {err}")
        if err.permanent:
            job.state = Job.State.FAILED
            job.failure_reason = f"the cluster refused to start it: {err}"
            job.finished_at = to_datetime(cycle.now)
            job.save(update_fields=["state", "failure_reason", "finished_at", "updated_at"])
            cycle.event(job, "failed", job.failure_reason)
            cycle.report.counts["failed"] += 1
        else:
            launch_retry(cycle, job, err, streak)
        return False
    job.backend_ref = ref
    return True


def launch_retry(cycle: Cycle, job: Job, err: BackendError, streak: Streak | None) -> None:
    """A transient launch failure: the job stays pending and backs off (``launch_backoff_s``)."""
    attempts = (streak[0] if streak else 0) + 1
    # The event's time as the next cycles read it back (``launch_streaks``): the reason
    # written now is the one they compute, so while unchanged it is not written again.
    last = to_epoch(to_datetime(cycle.now))
    first = streak[1] if streak else last
    wait = launch_backoff_s(last - first)
    cycle.event(
        job, LAUNCH_RETRY,
        f"the cluster could not start it right now ({err}); still waiting, next attempt "
        f"in {wait:.0f} s or later (transient failure {attempts})",
    )  # fmt: skip
    cycle.launch_verdicts[job.pk] = launch_retry_verdict(attempts, first, last, str(err))
    cycle.report.counts["launch_retries"] += 1


def backing_off(cycle: Cycle, job: Job, streak: Streak) -> None:
    """A job backing off between launch attempts keeps saying why it waits."""
    attempts, first, last = streak
    details = job.pending_details if isinstance(job.pending_details, dict) else {}
    if job.pending_code == LAUNCH_RETRY_CODE and "error" in details:
        error = str(details["error"])
    else:  # another reason came in between: the error is in the streak's latest event
        error = last_retry_error(job.pk)
    cycle.launch_verdicts[job.pk] = launch_retry_verdict(attempts, first, last, error)


def allocate_many(cycle: Cycle, launched: list[tuple[Job, et.Start]]) -> list[tuple[Job, et.Start]]:
    """Write the allocations of launched runs; a run whose GPUs are refused is killed."""
    node_ids = dict(Node.objects.values_list("name", "id"))
    rows = [
        Allocation(job_id=job.pk, node_id=node_ids[s.node], gpu_index=g)
        for job, start in launched for s in start.placement for g in s.gpus
    ]  # fmt: skip
    try:
        with transaction.atomic():
            Allocation.objects.bulk_create(rows, batch_size=2000)
        return launched
    except IntegrityError:
        pass
    placed = []
    for job, start in launched:
        if allocate(cycle, job, start.placement):
            placed.append((job, start))
        else:
            cycle.call(f"kill {job.backend_ref}", cycle.backend.kill, job.backend_ref)
    return placed
