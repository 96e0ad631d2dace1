"""Ended runs: what a finished, failed, vanished or stopped run means for its job.

A run that succeeded finishes its job; one stopped on request after a checkpoint puts
its job back in the queue with its progress (an ``Eviction`` row when it made room for
other work: R4's ratio; a suspended job comes back held, with no eviction: not a
preemption, ``scheduling.holds``); a run stopped at its time limit, or that the backend
ended once it had lasted it, fails its job with no retry (``scheduling.time_limits``); any
other end is retried while retries are left, else the job fails. The jobs are decided in
memory and written in a few statements: GPUs freed, jobs updated, evictions inserted; the
model that just ran is remembered for its nodes (for node-group affinity): on the cycle,
which plans with it and writes it last.
"""

from __future__ import annotations

from datetime import datetime

from scheduling.backends.base import STOPPED, SUCCEEDED
from scheduling.clock import to_datetime, to_epoch
from scheduling.cycle.context import Cycle
from scheduling.cycle.stops import moved_for, moved_to
from scheduling.cycle.telemetry import record_evictions, record_timeouts
from scheduling.engine.explain import count
from scheduling.holds import SUSPEND
from scheduling.models import CONSOLIDATION, Allocation, Eviction, Job, JobRun, Node
from scheduling.sql import bulk_set
from scheduling.time_limits import TIME_LIMIT, TIMEOUT, failure_reason, lasted_limit, limit_s
from scheduling.transitions import set_state

RECENT_MODELS_KEPT = 3

ENDED_FIELDS = (
    "state", "progress_seconds", "finished_at", "failure_reason", "retry_count", "borrowed",
    "preemption_count", "preempt_deadline", "preempted_for_id", "stop_reason", "updated_at",
    "last_checkpoint_at",
)  # fmt: skip


def finish_runs(cycle: Cycle, ended: list[tuple[Job, str, float, str, float | None]]) -> None:
    """Record ended runs ``(job, backend state, progress, reason, when it ended if the
    backend says)`` in a few statements."""
    ids = [job.pk for job, *_ in ended]
    nodes_of: dict[int, set[str]] = {}
    model_of: dict[int, str] = {}  # its run's GPU model (on mixed nodes: the least by name)
    for job_id, node, model in Allocation.objects.filter(job_id__in=ids).values_list(
        "job_id", "node__name", "node__gpu_model"
    ):
        nodes_of.setdefault(job_id, set()).add(node)
        model_of[job_id] = min(model_of.get(job_id, model), model)
    Allocation.objects.filter(job_id__in=ids).delete()
    evictions: list[Eviction] = []
    runs: list[JobRun] = []
    recent: dict[str, list[str]] = {}
    for job, state, progress, reason, ended_at in ended:
        was, at = job.state, cycle.ended(job, ended_at)
        run_ended(cycle, job, state, progress, reason, evictions, ended_at)
        if job.started_at is not None:
            runs.append(run_row(job, model_of.get(job.pk, ""), at, run_outcome(job, was, state)))
        if job.state == Job.State.SUCCEEDED and job.model_name:
            for node in nodes_of.get(job.pk, ()):
                recent.setdefault(node, []).append(job.model_name)
        job.updated_at = to_datetime(cycle.now)
    bulk_set(Job, ENDED_FIELDS,
             [(j.pk, *(getattr(j, f) for f in ENDED_FIELDS)) for j, *_ in ended])  # fmt: skip
    Eviction.objects.bulk_create(evictions)
    JobRun.objects.bulk_create(runs)
    record_evictions(evictions)
    record_timeouts([job.queue_id for job, *_ in ended if timed_out_now(job)])
    if recent:
        note_models(cycle, recent)


def run_row(job: Job, gpu_model: str, ended_at: datetime, outcome: str) -> JobRun:
    """The accounting row of ``job``'s run that has just ended (``JobRun``)."""
    return JobRun(
        job_id=job.pk, owner_id=job.owner_id, queue_id=job.queue_id, gpus=job.gpus,
        gpu_model=gpu_model, started_at=job.started_at, ended_at=max(ended_at, job.started_at),
        outcome=outcome,
    )  # fmt: skip


def run_outcome(job: Job, was: str, backend_state: str) -> str:
    """How the run ended, from the job's state before (``was``) and after ``run_ended``."""
    if job.state == Job.State.SUCCEEDED:
        return JobRun.Outcome.SUCCEEDED
    if job.state == Job.State.FAILED:
        return JobRun.Outcome.FAILED
    if backend_state == STOPPED and was == Job.State.PREEMPTING:
        return JobRun.Outcome.STOPPED
    return JobRun.Outcome.RETRIED


def note_models(cycle: Cycle, recent: dict[str, list[str]]) -> None:
    """Put the models that just finished first in their nodes' recent models, on the cycle
    (``Cycle.recent_models``: the snapshot plans with them); ``remember_models`` writes
    them when the cycle ends."""
    stored = dict(Node.objects.filter(name__in=recent).values_list("name", "recent_models"))
    for name, models in recent.items():
        if name not in stored:
            continue
        newest = list(dict.fromkeys(reversed(models)))
        kept = [m for m in cycle.recent_models.get(name, stored[name]) if m not in newest]
        cycle.recent_models[name] = (newest + kept)[:RECENT_MODELS_KEPT]


def remember_models(cycle: Cycle) -> None:
    """Write the nodes' recent models the cycle changed (``note_models``), in one statement.

    Called as late as the cycle can (``run_cycle``, just before its summary row): the
    update locks those node rows until the commit, and an on-call cordon of one of them (a
    node a job has just left) waits for them. Written while the runs were settled, before
    the plan, they held the rows for the whole cycle (docs/benchmarks.md, "Session 40").
    Only the cycle writes ``recent_models`` (under the cluster lock), so nothing written
    meanwhile is lost; a cordon's own columns are left alone.
    """
    if not cycle.recent_models:
        return
    ids = dict(Node.objects.filter(name__in=cycle.recent_models).values_list("name", "id"))
    bulk_set(Node, ("recent_models",),
             [(ids[n], models) for n, models in cycle.recent_models.items() if n in ids])  # fmt: skip


def run_ended(
    cycle: Cycle, job: Job, state: str, progress: float, reason: str, evictions: list[Eviction],
    ended_at: float | None = None,
) -> None:  # fmt: skip
    """Decide what an ended run means for its job (in memory; ``finish_runs`` writes). A
    job that ends, and its timeline line, are stamped when the run ended (``ended_at``, if
    the backend says: ``Cycle.ended``), not when this cycle saw it (page walk: "Started
    00:43, Finished 01:25, Progress kept 40 min" for a 40-minute run)."""
    lost_s = max(0.0, job.progress_seconds - progress)
    job.progress_seconds = max(0.0, progress)
    at = cycle.ended(job, ended_at)
    if state == SUCCEEDED:
        set_state(job, Job.State.SUCCEEDED)
        job.finished_at = at
        cycle.event(job, "succeeded", "finished successfully", at=at)
        cycle.report.counts["finished"] += 1
    elif job.stop_reason == TIME_LIMIT or ended_by_backend_at_limit(job, ended_at, at):
        timed_out(cycle, job, state, reason, at)
    elif state == STOPPED and job.state == Job.State.PREEMPTING:
        requeue_after_stop(cycle, job, progress, reason, lost_s, evictions, at)
    else:  # failed, vanished, or stopped by someone else
        why = reason or "the run stopped"
        job.borrowed = False
        if job.retry_count < job.max_retries:
            set_state(job, Job.State.PENDING)
            job.retry_count += 1
            resumes = (
                f"resumes from the last checkpoint at {int(progress // 60)} min of progress"
                if progress > 0
                else "starts again from the beginning (no progress was kept)"
            )
            cycle.event(
                job, "retried",
                f"run failed ({why}); automatic retry {job.retry_count} of {job.max_retries} "
                f"{resumes}", at=at,
            )  # fmt: skip
            cycle.report.counts["retried"] += 1
        else:
            set_state(job, Job.State.FAILED)
            job.finished_at = at
            job.failure_reason = f"{why}; no retries left ({job.max_retries} used)"
            cycle.event(job, "failed", job.failure_reason, at=at)
            cycle.report.counts["failed"] += 1


def ended_by_backend_at_limit(job: Job, ended_at: float | None, at: datetime) -> bool:
    """Did the backend end a run the loop had not asked to stop once it had lasted its time
    limit (Slurm's ``--time``, Kubernetes' deadline: a backstop)? Only when the backend says
    when the run ended: a cycle that merely saw it ended later cannot tell."""
    return (
        job.state == Job.State.RUNNING
        and ended_at is not None
        and lasted_limit(job.started_at, job.time_limit_minutes, at)
    )


def timed_out_now(job: Job) -> bool:
    """Did ``job``'s run just end it on its time limit (``timed_out``)?"""
    return job.state == Job.State.FAILED and job.failure_reason.startswith(TIMEOUT)


def timed_out(cycle: Cycle, job: Job, state: str, reason: str, at: datetime) -> None:
    """The run reached its time limit (stopped at the loop's request, or ended by the
    backend once it had lasted it): the job fails, with no retry (Slurm's ``TIMEOUT``)."""
    how = "after its checkpoint" if reason == "checkpoint" else f"({reason or state})"
    if reason == "checkpoint":
        job.last_checkpoint_at = at
    ran = (at - job.started_at).total_seconds() if job.started_at else 0.0
    if job.stop_reason == TIME_LIMIT:  # the loop saw it reach its limit before it asked; a
        # backend's end time read in whole seconds (Slurm's) may fall a second short of it
        ran = max(ran, limit_s(job.time_limit_minutes) or 0.0)
    set_state(job, Job.State.FAILED)
    job.finished_at = at
    job.failure_reason = failure_reason(job.time_limit_minutes or 0, ran, how)
    job.borrowed = False
    job.preempt_deadline = None
    job.preempted_for = None
    job.stop_reason = ""
    cycle.event(job, "failed", job.failure_reason, at=at)
    cycle.report.counts["failed"] += 1


def requeue_after_stop(
    cycle: Cycle, job: Job, progress: float, reason: str, lost_s: float,
    evictions: list[Eviction], at: datetime,
) -> None:  # fmt: skip
    """A requested stop happened (``at``: when the run ended, ``Cycle.ended``): back in the
    queue with its progress kept. The eviction row keeps the cycle's time (the ratio's
    windows count what the cycles recorded)."""
    cause = job.stop_reason or "preemption"
    counts_as_eviction = cause in ("preemption", "inference")
    for_job = job.preempted_for_id
    if counts_as_eviction:
        job.preemption_count += 1
    if counts_as_eviction or cause == CONSOLIDATION:
        # A migration's row is counted apart (``rollup``), never in the eviction ratio.
        started = to_epoch(job.started_at) or cycle.now
        evictions.append(
            Eviction(
                job=job, queue_id=job.queue_id, at=to_datetime(cycle.now), reason=cause,
                gpus=job.gpus, gpu_seconds=job.gpus * max(0.0, cycle.now - started),
                lost_gpu_seconds=job.gpus * lost_s,
            )
        )  # fmt: skip
    set_state(job, Job.State.PENDING)
    if reason == "checkpoint":  # the checkpoint it restarts from: the page's "Last checkpoint"
        job.last_checkpoint_at = at
    saved = "after its checkpoint" if reason == "checkpoint" else f"({reason})"
    if cause == SUSPEND:
        cycle.event(job, "suspended", _suspended_words(job, saved, progress), at=at)
    elif cause == CONSOLIDATION:
        cycle.event(
            job, "moved",
            f"moved {moved_for(for_job)}: stopped {saved} and "
            f"back in the queue with {int(progress // 60)} min of progress kept, to restart "
            f"from its checkpoint on {moved_to(job.move_to_node)}; this is not a preemption",
            at=at,
        )  # fmt: skip
    else:
        cycle.event(
            job, "requeued",
            f"stopped {saved} and back in the queue with {int(progress // 60)} min of progress "
            "kept" + (f"; preempted {count(job.preemption_count, 'time')}" if counts_as_eviction else ""),
            at=at,
        )  # fmt: skip
    job.preempt_deadline = None
    job.preempted_for = None
    job.stop_reason = ""
    job.borrowed = False
    cycle.report.counts["requeued"] += 1


def _suspended_words(job: Job, saved: str, progress: float) -> str:
    """The timeline's line of a suspended run that stopped (``saved``: how)."""
    kept = f"{int(progress // 60)} min of progress kept"
    if job.held_at is None:  # released while it checkpointed
        return f"suspended: stopped {saved}, released meanwhile: back in the queue with {kept}"
    by = job.held_by.username if job.held_by else "a former user"
    return f"suspended by {by}: stopped {saved} and held with {kept}; release it to queue it again"
