"""Waiting jobs' earliest starts put off and cleared (``begin_time_services``, Slurm's
``scontrol update StartTime=``) while cycles plan and start them and a lead cancels some:
no change fails but by the rules (a job that started or ended meanwhile), none deadlocks,
no job starts before the earliest start it was last given (on the cluster clock), and
every job not cancelled starts.

Real PostgreSQL, real threads, as ``test_begin_time_races_cycle``.
"""

from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta

import pytest

from core import clock
from scheduling.begin_time_services import change_begin_time
from scheduling.consistency import find_inconsistencies
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.concurrency.threads import acting_on_waiting, cancelling, cycling, drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

# the rules' refusals of a change that raced the loop or the lead (nothing else may fail)
EXPECTED = ("it has started", "job is already", "it already queues", "is already")


def test_earliest_starts_changed_while_cycles_run_are_kept_to(demo):
    me, lead, admin = demo["researcher"], demo["lead"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    refused: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    submitted: list[int] = []
    # each job's last change that was applied: its begin time, None when it was cleared
    last: dict[int, datetime | None] = {}

    def submit_loop() -> None:
        pick = random.Random(3)
        for _ in range(40):
            if done.wait(0.08):
                return
            submitted.append(submit_job(me, JobRequest(
                name="eval", queue="llm-experiment", gpus=4,
                sim_duration_minutes=pick.randint(1, 3),
            )).pk)  # fmt: skip

    def change(job_id: int, owner_id: int, rng) -> None:
        begin = None
        if last.get(job_id) is None or rng.random() < 0.6:
            begin = clock.now() + timedelta(seconds=rng.randint(60, 240))
        last[job_id] = change_begin_time(me, job_id, begin).begin_at

    threads = [in_thread(errors, cycling(admin, 30, 60, cycles, done)),
               in_thread(errors, submit_loop), in_thread(errors, acting_on_waiting(submitted, change, EXPECTED, refused, done, 5)),
               in_thread(errors, cancelling(lead, submitted, done, 11))]  # fmt: skip
    for thread in threads:
        thread.join(240)
    assert errors == []
    assert len(cycles) == 30 and len(submitted) >= 20, (len(cycles), len(submitted))
    assert drain(admin, 40, 300) == [], "none waits forever"
    put_off = cleared = 0
    for job in Job.objects.filter(pk__in=submitted):
        if job.started_at is None:
            assert job.state == "cancelled", (job.pk, job.state)
            continue
        if job.pk not in last:
            continue
        begin = last[job.pk]
        assert job.begin_at == begin, "the last change applied is the one kept"
        if begin is None:
            cleared += 1
        else:
            put_off += 1
            assert job.started_at >= begin, (job.pk, begin, job.started_at)
    assert put_off and cleared, (put_off, cleared, len(refused))
    assert find_inconsistencies() == []
