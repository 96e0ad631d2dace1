"""Submissions asked to begin a few minutes later (``begin_at``, Slurm's ``--begin``) racing
the cycles that move the cluster clock past those times, while a lead cancels some: no
submission fails, none starts before its begin time (on the cluster clock), every one not
cancelled starts, none waits forever.

Real PostgreSQL, real threads, as ``test_after_ended_races_cycle``.
"""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest

from core import clock
from scheduling.consistency import find_inconsistencies
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.concurrency.threads import cancelling, cycling, drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


def test_jobs_asked_to_begin_later_submitted_while_cycles_run_never_start_early(demo):
    me, lead, admin = demo["researcher"], demo["lead"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    submitted: list[int] = []

    def submit_loop(seed: int) -> None:
        pick = random.Random(seed)
        for _ in range(25):
            if done.wait(0.1):
                return
            begin = clock.now() + timedelta(seconds=pick.randint(-60, 300))
            submitted.append(submit_job(me, JobRequest(
                name="later", queue="llm-experiment", gpus=4, begin_at=begin,
                sim_duration_minutes=pick.randint(1, 3),
            )).pk)  # fmt: skip

    threads = [in_thread(errors, cycling(admin, 30, 60, cycles, done)),
               in_thread(errors, lambda: submit_loop(7)), in_thread(errors, lambda: submit_loop(8)),
               in_thread(errors, cancelling(lead, submitted, done, 17))]  # fmt: skip
    for thread in threads:
        thread.join(240)
    assert errors == []
    assert len(cycles) == 30 and len(submitted) >= 20, (len(cycles), len(submitted))
    assert drain(admin, 40, 300) == [], "none waits forever"
    started = waited = 0
    for job in Job.objects.filter(pk__in=submitted):
        if job.started_at is None:
            assert job.state == "cancelled", (job.pk, job.state)
            continue
        started += 1
        if job.begin_at is not None:
            waited += 1
            assert job.started_at >= job.begin_at, (job.pk, job.begin_at, job.started_at)
    assert started and waited, (started, waited)
    assert find_inconsistencies() == []
