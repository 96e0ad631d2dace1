"""Waiting jobs moved between two queues of a line (``move_services``, Slurm's ``scontrol
update Partition=``) while cycles plan and start them and a lead cancels some: no move
fails but by the rules (a job that started or ended meanwhile) or by the loop holding the
cluster past the wait, no cancel racing a move fails (it found no job once: its locking
read joined the job's old queue), none deadlocks, and every job not cancelled starts.

Real PostgreSQL, real threads, as ``test_top_races_cycle``.
"""

from __future__ import annotations

import random
import threading

import pytest

from scheduling.consistency import find_inconsistencies
from scheduling.models import Job
from scheduling.move_services import move_job
from scheduling.services import JobRequest, submit_job
from tests.concurrency.threads import acting_on_waiting, cancelling, cycling, drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED = ("it has started", "job is already", "the scheduling loop is busy")


def test_jobs_moved_while_cycles_run_never_fail(demo):
    me, lead, admin = demo["researcher"], demo["lead"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    refused: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    submitted: list[int] = []
    moved: list[int] = []

    def submit_loop() -> None:
        pick = random.Random(4)
        for _ in range(40):
            if done.wait(0.08):
                return
            submitted.append(submit_job(me, JobRequest(
                name="eval", queue="llm-experiment", gpus=pick.choice([4, 8, 16]),
                sim_duration_minutes=pick.randint(1, 4),
            )).pk)  # fmt: skip

    def move(job_id: int, owner_id: int, rng) -> None:
        queue = Job.objects.get(pk=job_id).queue.name
        to = "llm-finetune" if queue == "llm-experiment" else "llm-experiment"
        move_job(rng.choice([me, lead]), job_id, to)
        moved.append(job_id)

    threads = [in_thread(errors, cycling(admin, 30, 60, cycles, done)),
               in_thread(errors, submit_loop), in_thread(errors, acting_on_waiting(submitted, move, EXPECTED, refused, done, 6)),
               in_thread(errors, cancelling(lead, submitted, done, 21))]  # fmt: skip
    for thread in threads:
        thread.join(240)
    assert errors == []
    assert len(cycles) == 30 and len(submitted) >= 20 and moved, (len(submitted), len(moved))
    assert drain(admin, 40, 300) == [], "none waits forever"
    assert (
        not Job.objects.filter(pk__in=submitted, started_at__isnull=True)
        .exclude(state="cancelled")
        .exists()
    )
    assert find_inconsistencies() == []
