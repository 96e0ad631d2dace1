"""Every run is recorded exactly once (``JobRun``, the usage report's accounting) while
owners cancel running jobs and the clock moves under back-to-back cycles.

Real PostgreSQL, real threads: one thread runs cycles and advances the simulated clock
(so runs end, fail and are retried), another cancels running and pending jobs one after
another. At the end, once the loop has freed every GPU, each job has as many recorded
runs as it was launched (``Job.attempt``), a cancelled running job's last run says
``cancelled``, and no recorded run overlaps another of the same job.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from django.core.exceptions import ValidationError

from scheduling.models import Allocation, Job, JobRun
from scheduling.services import JobRequest, cancel_job, submit_job
from scheduling.sim_services import advance_clock, run_cycle_now
from tests.concurrency.threads import in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


def test_runs_are_recorded_once_each_while_cancels_race_the_cycles(demo):
    make_quotas_roomy()
    owner, admin = demo["researcher"], demo["admin"]
    jobs = [
        submit_job(owner, JobRequest(name=f"run-{i}", queue="llm-experiment", gpus=2,
                                     sim_duration_minutes=random.Random(i).randint(3, 40)))
        for i in range(40)
    ]  # fmt: skip
    run_cycle_now(admin)
    errors: list[str] = []
    cycles: list[int] = []
    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            cycles.append(run_cycle_now(admin).pk)
            advance_clock(admin, 240)

    refused: list[str] = []

    def cancel_some() -> None:
        for job in jobs[::3]:
            time.sleep(0.05)
            try:
                cancel_job(owner, job.pk)
            except ValidationError as exc:  # it ended first: refused, saying so
                refused.append(str(exc))

    looper = in_thread(errors, loop)
    canceller = in_thread(errors, cancel_some)
    canceller.join(120)
    time.sleep(1)
    done.set()
    looper.join(120)
    assert errors == []
    ended = ("job is already succeeded", "job is already failed")
    assert all(any(e in why for e in ended) for why in refused), refused
    assert len(cycles) >= 3
    for _ in range(40):  # until every run has ended and its GPUs are freed
        if (
            not Job.objects.filter(state__in=Job.ACTIVE_STATES).exists()
            and not Allocation.objects.exists()
        ):
            break
        run_cycle_now(admin)
        advance_clock(admin, 600)
    assert not Allocation.objects.exists()

    cancelled_running = 0
    for job in Job.objects.filter(pk__in=[j.pk for j in jobs]):
        runs = list(JobRun.objects.filter(job=job).order_by("started_at"))
        assert len(runs) == job.attempt, (job.pk, job.state, job.attempt, runs)
        for before, after in zip(runs, runs[1:], strict=False):
            assert before.ended_at <= after.started_at, (job.pk, before, after)
        if job.state == "cancelled" and runs:
            assert runs[-1].outcome == "cancelled", (job.pk, [r.outcome for r in runs])
            cancelled_running += 1
        if job.state == "succeeded":
            assert runs[-1].outcome == "succeeded"
    assert cancelled_running > 0, "some cancels met running jobs"
    assert JobRun.objects.filter(outcome="succeeded").exists()
