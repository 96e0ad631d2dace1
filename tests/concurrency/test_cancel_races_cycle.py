"""Cancels that race the scheduling cycle wait for it, never fail (#16 finding 1).

Real PostgreSQL, real threads: one thread runs full cycles back to back as the admin's
"run a cycle now" does; one or two others cancel pending jobs one after another as their
owner. Before the fix about a third of the cancels answered 500 (``DeadlockDetected``:
the cancel locked the job *and its queue* ``FOR UPDATE`` while the cycle held the job rows
of its verdict write and needed a key-share lock on the queue), and failed cycles rolled
back whole.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from scheduling.consistency import find_inconsistencies
from scheduling.models import Job
from scheduling.services import JobRequest, cancel_job, submit_job
from scheduling.sim_services import run_cycle_now
from tests.concurrency.threads import in_thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("cancellers", [1, 2])
def test_cancels_racing_back_to_back_cycles_all_succeed(demo, cancellers):
    owner, admin = demo["researcher"], demo["admin"]
    jobs = [
        submit_job(owner, JobRequest(name=f"race-{i}", queue="llm-experiment", gpus=2)).pk
        for i in range(60)
    ]
    run_cycle_now(admin)  # some start, the rest wait with verdicts
    errors: list[str] = []
    cycles: list[int] = []
    done = threading.Event()

    def cycle_loop() -> None:
        while not done.is_set():
            cycles.append(run_cycle_now(admin).pk)

    def cancel_all(share: list[int]) -> None:
        for pk in share:
            cancel_job(owner, pk)
            time.sleep(0.002)

    looper = in_thread(errors, cycle_loop)
    shares = [jobs[i::cancellers] for i in range(cancellers)]
    workers = [in_thread(errors, lambda s=s: cancel_all(s)) for s in shares]
    for worker in workers:
        worker.join(120)
    done.set()
    looper.join(120)

    assert errors == []
    assert len(cycles) >= 2, "the cycles really ran while the cancels did"
    assert set(Job.objects.filter(pk__in=jobs).values_list("state", flat=True)) == {"cancelled"}
    run_cycle_now(admin)  # releases what the last cancels left running
    assert find_inconsistencies() == []


def test_a_cancel_does_not_lock_the_queue_the_cycle_refers_to(demo):
    """The deadlock, step by step: the cycle holds a key-share lock on a queue (it inserts
    rows that refer to it) and then updates the job; the cancel must not need the queue."""
    from django.db import transaction

    owner = demo["researcher"]
    job = submit_job(owner, JobRequest(name="victim", queue="llm-experiment", gpus=2))
    errors: list[str] = []
    holding_queue = threading.Event()

    def cycle_like() -> None:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SELECT 1 FROM quotas_queue WHERE id = %s FOR KEY SHARE", [job.queue_id])
            holding_queue.set()
            time.sleep(0.5)  # the cancel runs meanwhile
            cur.execute("UPDATE scheduling_job SET updated_at = now() WHERE id = %s", [job.pk])

    cycle = in_thread(errors, cycle_like)
    holding_queue.wait(10)
    canceller = in_thread(errors, lambda: cancel_job(owner, job.pk))
    cycle.join(30)
    canceller.join(30)
    assert errors == []
    assert Job.objects.get(pk=job.pk).state == "cancelled"


def test_the_cycle_does_not_hold_the_queues_of_running_jobs(demo):
    """A submission inserts a job that refers to its queue (a key-share lock on it): while
    a cycle reconciles running jobs, that insert must not wait for the whole cycle."""
    from django.db import transaction

    from scheduling.cycle.reconcile import sync_jobs

    owner = demo["researcher"]
    submit_job(owner, JobRequest(name="runs", queue="llm-experiment", gpus=2))
    run_cycle_now(demo["admin"])
    assert Job.objects.filter(state="running").exists()
    errors: list[str] = []
    reconciled = threading.Event()

    def cycle_holding_its_locks() -> None:
        from scheduling.backend_factory import get_backend
        from scheduling.cycle.context import Cycle

        with transaction.atomic():
            backend = get_backend(advance=False)
            sync_jobs(Cycle(backend, backend.observe(), "sweep"))  # locks the running jobs
            reconciled.set()
            time.sleep(1.0)  # the rest of a long cycle

    holder = in_thread(errors, cycle_holding_its_locks)
    reconciled.wait(10)
    started = time.monotonic()
    with connection.cursor() as cur:
        cur.execute("SET lock_timeout = '500ms'")
        submit_job(owner, JobRequest(name="meanwhile", queue="llm-experiment", gpus=2))
        cur.execute("SET lock_timeout = 0")
    assert time.monotonic() - started < 0.5
    holder.join(30)
    assert errors == []
