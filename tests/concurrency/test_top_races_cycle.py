"""Waiting jobs put first among their owner's (``own_order_services``, Slurm's ``scontrol
top``) while cycles plan, start and write the verdicts of those jobs and a lead cancels
some: no action fails but by the rules (a job that started or ended meanwhile, one already
put first), none deadlocks, and every job not cancelled starts.

Real PostgreSQL, real threads, as ``test_begin_time_changes_race_cycle``.
"""

from __future__ import annotations

import random
import threading

import pytest

from scheduling.consistency import find_inconsistencies
from scheduling.models import Job
from scheduling.own_order_services import put_first
from scheduling.services import JobRequest, submit_job
from tests.concurrency.threads import acting_on_waiting, cancelling, cycling, drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED = ("it has started", "job is already", "already the one put first")


def test_jobs_put_first_while_cycles_run_never_fail(demo):
    me, lead, admin = demo["researcher"], demo["lead"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    refused: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    submitted: list[int] = []
    put: list[int] = []

    def submit_loop(who, seed: int) -> None:
        pick = random.Random(seed)
        for _ in range(30):
            if done.wait(0.08):
                return
            submitted.append(submit_job(who, JobRequest(
                name="eval", queue="llm-experiment", gpus=pick.choice([4, 8, 16]),
                sim_duration_minutes=pick.randint(1, 4),
            )).pk)  # fmt: skip

    def top(job_id: int, owner_id: int, rng) -> None:
        who = me if owner_id == me.pk and rng.random() < 0.5 else lead  # the lead: any job
        put_first(who, job_id)
        put.append(job_id)

    threads = [in_thread(errors, cycling(admin, 30, 60, cycles, done)),
               in_thread(errors, lambda: submit_loop(me, 1)),
               in_thread(errors, lambda: submit_loop(lead, 2)), in_thread(errors, acting_on_waiting(submitted, top, EXPECTED, refused, done, 9)),
               in_thread(errors, cancelling(lead, submitted, done, 13))]  # fmt: skip
    for thread in threads:
        thread.join(240)
    assert errors == []
    assert len(cycles) == 30 and len(submitted) >= 20 and put, (len(submitted), len(put))
    assert drain(admin, 40, 300) == [], "none waits forever"
    assert (
        not Job.objects.filter(pk__in=submitted, started_at__isnull=True)
        .exclude(state="cancelled")
        .exists()
    )
    assert find_inconsistencies() == []
