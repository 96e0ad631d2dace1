"""Time limits racing back-to-back scheduling cycles on PostgreSQL, with the owner
cancelling, holding and releasing the same jobs and submitting more: no action fails
other than by the refusals the rules call for (no 500, no deadlock), every run stops
within its limit, its grace and two loop periods, and a job that ended on its limit ended
``failed`` with no retry, never ``cancelled`` half-way or requeued.

Real PostgreSQL, real threads. The races that matter: a cancel committed after the stop
phase read the job (the stop re-reads it under its lock: ``state = running``), and a
suspension (hold) of a run at its limit (both stops are asked in one pass; the time limit
wins, so the job fails rather than waiting held).
"""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from scheduling.consistency import find_inconsistencies
from scheduling.cycle.context import production_policy
from scheduling.hold_services import hold_job, release_job
from scheduling.models import Job, JobRun
from scheduling.services import JobRequest, submit_job
from tests.concurrency.threads import cancelling, cycling, drain, in_thread, refused_as_expected
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

STEP_S = 60.0
REFUSALS = ("job is already", "job is not held", "an admin hold")


def limited(i: int) -> JobRequest:
    """A job whose true runtime (10-19 min) is past its limit (3-6 min): every run of it
    that is not cancelled or suspended first ends on its limit."""
    return JobRequest(name=f"bounded-{i}", queue="llm-experiment", gpus=4,
                      sim_duration_minutes=10 + i % 10, time_limit_minutes=3 + i % 4,
                      checkpoint_path="nfs://ckpt/bounded", checkpoint_interval_minutes=2)  # fmt: skip


def test_time_limits_racing_cycles_cancels_and_holds_end_every_run_on_time(demo):
    me, admin = demo["researcher"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    refused: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    jobs = [submit_job(me, limited(i)).pk for i in range(10)]
    # the canceller's pool: the even jobs only, so the odd ones (5 at least) run to their
    # limits, the ones held meanwhile once released (with every job in its pool it
    # cancelled so many that 1 drill in 4 saw fewer than 5 limits reached, before this
    # session's changes as after)
    cancellable = jobs[::2]
    lock = threading.Lock()

    def submit_loop() -> None:
        i = 10
        while not done.wait(0.2):
            made = submit_job(me, limited(i)).pk
            with lock:
                jobs.append(made)
                if i % 2 == 0:
                    cancellable.append(made)
            i += 1

    def hold_loop(seed: int) -> None:
        pick = random.Random(seed)
        while not done.wait(0.05):
            with lock:
                job_id = pick.choice(jobs[-10:])
            try:
                if pick.random() < 0.6:
                    hold_job(me, job_id, "")
                else:
                    release_job(me, job_id)
            except (ValidationError, PermissionDenied) as exc:
                refused_as_expected(exc, REFUSALS, refused)

    threads = [
        in_thread(errors, cycling(admin, 30, STEP_S, cycles, done)),
        in_thread(errors, submit_loop),
        in_thread(errors, cancelling(me, cancellable, done, seed=7)),
        in_thread(errors, lambda: hold_loop(11)),
    ]
    for thread in threads:
        thread.join(300)
    assert errors == [], errors[:5]
    assert len(cycles) == 30

    for job in Job.objects.filter(held_at__isnull=False, state__in=Job.ACTIVE_STATES):
        release_job(admin, job.pk)
    assert drain(admin, 60, STEP_S) == []

    grace = production_policy().grace_seconds
    timed_out = Job.objects.filter(failure_reason__startswith="time limit reached")
    assert timed_out.count() >= 5, "the drill saw limits reached"
    assert not Job.objects.filter(state="failed").exclude(pk__in=timed_out).exists(), (
        "no other failure: each run is past its limit, none fails otherwise"
    )
    assert set(timed_out.values_list("retry_count", flat=True)) == {0}, "never retried"
    for job in timed_out:
        last = JobRun.objects.filter(job=job).latest("ended_at")
        assert last.outcome == JobRun.Outcome.FAILED
        assert last.ended_at - last.started_at >= timedelta(minutes=job.time_limit_minutes)
    for run in JobRun.objects.select_related("job"):
        limit = timedelta(minutes=run.job.time_limit_minutes, seconds=grace + 2 * STEP_S)
        assert run.ended_at - run.started_at <= limit, (run.job_id, run.ended_at - run.started_at)
    assert find_inconsistencies() == []
