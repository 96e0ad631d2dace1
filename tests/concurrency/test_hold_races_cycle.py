"""Holds, suspensions and releases racing back-to-back scheduling cycles on PostgreSQL: no
action fails other than by the refusals the rules call for (no 500, no deadlock), and a job
held never starts (nor restarts) while its hold stands.

Real PostgreSQL, real threads. The races that matter: a hold committed after the cycle read
the cluster (its snapshot still plans the job) must not let the launch start it (the launch
re-reads the job under its lock: ``state = pending AND held_at IS NULL``); a hold of a job
the cycle is starting (both lock the job row) is either before the launch (not started) or
after it (a suspension); a release of a job being suspended leaves it running or queued.

The check is made under the job's row lock, which the launch takes too: ``attempt`` (runs
launched so far) read when the hold commits must be the same when its release commits, and
at the end for the jobs still held.
"""

from __future__ import annotations

import random
import threading

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from scheduling.consistency import find_inconsistencies
from scheduling.hold_services import hold_job, release_job
from scheduling.models import Eviction, Job
from scheduling.services import JobRequest, submit_job
from scheduling.sim_services import run_cycle_now
from tests.concurrency.threads import cycling, drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

# The refusals the rules call for, by their words.
REFUSALS = ("job is already", "job is not held", "an admin hold")


def test_holds_and_releases_racing_cycles_never_start_a_held_job(demo):
    me, lead, admin = demo["researcher"], demo["lead"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    refused: list[str] = []
    broken: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    jobs: list[int] = []
    held_attempt: dict[int, int] = {}  # job -> ``attempt`` when its current hold committed
    lock = threading.Lock()
    counts = {"held": 0, "released": 0, "suspended": 0}

    for i in range(8):
        jobs.append(submit_job(me, JobRequest(name=f"j{i}", queue="llm-experiment", gpus=4,
                                              sim_duration_minutes=3 + i % 4)).pk)  # fmt: skip

    def submit_loop() -> None:
        pick = random.Random(3)
        while not done.wait(0.15):
            request = JobRequest(name="late", queue="llm-experiment", gpus=4,
                                 sim_duration_minutes=pick.randint(2, 6))  # fmt: skip
            made = submit_job(me, request).pk
            with lock:
                jobs.append(made)

    def refusal(exc: Exception) -> None:
        words = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        if not any(word in words for word in REFUSALS):
            raise exc
        refused.append(words)

    def hold_loop(seed: int) -> None:
        pick = random.Random(seed)
        while not done.wait(0.02):
            with lock:
                job_id = pick.choice(jobs[-12:])
            who = pick.choice([me, lead, admin])
            try:  # noted before the commit: the job's row stays locked until then
                with transaction.atomic():
                    job = hold_job(who, job_id, "drill" if who is admin else "")
                    with lock:
                        held_attempt[job_id] = job.attempt
                        counts["held"] += 1
                        counts["suspended"] += job.state == "running"
            except (ValidationError, PermissionDenied) as exc:
                refusal(exc)

    def release_loop(seed: int) -> None:
        pick = random.Random(seed)
        while not done.wait(0.03):
            with lock:
                candidates = list(held_attempt)
            if not candidates:
                continue
            job_id = pick.choice(candidates)
            try:  # under the job's row lock, as the hold's note
                with transaction.atomic():
                    job = release_job(pick.choice([me, admin, admin]), job_id)
                    with lock:
                        before = held_attempt.pop(job_id)
                        counts["released"] += 1
            except (ValidationError, PermissionDenied) as exc:
                refusal(exc)
                continue
            if job.attempt != before:
                broken.append(f"job {job_id} launched while held ({before} -> {job.attempt})")

    threads = [
        in_thread(errors, cycling(admin, 40, 45, cycles, done)), in_thread(errors, submit_loop),
        in_thread(errors, lambda: hold_loop(1)), in_thread(errors, lambda: hold_loop(2)),
        in_thread(errors, lambda: release_loop(5)),
    ]  # fmt: skip
    for thread in threads:
        thread.join(300)
    assert errors == [], errors[:5]
    assert broken == []
    assert len(cycles) == 40
    assert counts["held"] >= 20 and counts["released"] >= 10, counts
    for job_id, attempt in held_attempt.items():  # still held: never launched since
        job = Job.objects.get(pk=job_id)
        assert job.attempt == attempt, (job_id, attempt, job.attempt)

    # Settle: release everything, let the backlog drain; nothing is stuck, nothing counted
    # a suspension as a preemption.
    still_held = set(Job.objects.filter(held_at__isnull=False).values_list("pk", flat=True))
    assert still_held == set(held_attempt), "every hold noted, every release too"
    for job_id in Job.objects.filter(pk__in=still_held, state__in=Job.ACTIVE_STATES):
        release_job(admin, job_id.pk)
    assert drain(admin, 60, 120) == []
    suspended = Job.objects.filter(events__kind="suspended").distinct()
    assert counts["suspended"] and suspended.exists(), counts
    for job in suspended:  # its preemptions are its evictions, none for a suspension
        evicted = Eviction.objects.filter(job=job, reason__in=["preemption", "inference"])
        assert job.preemption_count == evicted.count(), job.pk
    assert find_inconsistencies() == []


def test_a_hold_committed_after_the_snapshot_is_not_launched(demo, monkeypatch):
    """Step by step: the cycle reads the cluster and plans the job's start; the owner's
    hold commits (on its own connection) before the launch; the launch re-reads the job
    under its lock and leaves it, and the next cycle writes HELD."""
    from scheduling.cycle import run as cycle_run

    me, admin = demo["researcher"], demo["admin"]
    make_quotas_roomy()
    job_id = submit_job(me, JobRequest(name="planned", queue="llm-experiment", gpus=8)).pk
    errors: list[str] = []
    real = cycle_run.build_snapshot

    def snapshot_then_hold(*args, **kwargs):
        ctx = real(*args, **kwargs)
        assert job_id in {p.id for p in ctx.snapshot.pending}, "planned by this cycle"
        in_thread(errors, lambda: hold_job(me, job_id, "changed my mind")).join(20)
        return ctx

    monkeypatch.setattr(cycle_run, "build_snapshot", snapshot_then_hold)
    summary = run_cycle_now(admin)
    monkeypatch.setattr(cycle_run, "build_snapshot", real)
    assert errors == []
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.attempt, summary.starts) == ("pending", 0, 0)
    assert job.held_at is not None
    run_cycle_now(admin)
    job.refresh_from_db()
    assert (job.state, job.pending_code) == ("pending", "HELD")
