"""Job arrays racing back-to-back scheduling cycles on PostgreSQL: submissions, bound
changes, single-task cancels and whole-array cancels never fail other than by the rules'
refusals (no deadlock, no 500), and no array ever holds more GPUs than its highest bound
allowed (a lowered bound stops no running task, as in Slurm; it only starts fewer).

Real PostgreSQL, real threads. The race that matters: cancelling an array locks many task
rows while the cycle locks the rows of the jobs it reconciles and launches, in its own
order; the cancel takes the cluster lock first (``array_services.cancel_array``), so it
waits for the cycle instead of deadlocking with it.
"""

from __future__ import annotations

import math
import random
import threading

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Q

from scheduling.array_services import cancel_array, set_max_running, submit_array
from scheduling.consistency import find_inconsistencies
from scheduling.models import Job, JobArray
from scheduling.services import JobRequest, cancel_job
from scheduling.sim_services import advance_clock, run_cycle_now
from tests.concurrency.threads import drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

REFUSALS = ("job is already",)
HOLDING = Q(tasks__state__in=[Job.State.RUNNING, Job.State.PREEMPTING])


def request(minutes: int) -> JobRequest:
    return JobRequest(name="sweep", queue="llm-experiment", gpus=2, sim_duration_minutes=minutes)


def test_arrays_racing_cycles_never_deadlock_nor_pass_their_bound(demo):
    me, lead, admin = demo["researcher"], demo["lead"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    over: list[str] = []
    done = threading.Event()
    lock = threading.Lock()
    cycles: list[int] = []
    highest: dict[int, float] = {}  # array -> the highest bound it ever had (inf: none)
    counts = {"arrays": 0, "bounds": 0, "array_cancels": 0, "task_cancels": 0}

    def new_array(pick: random.Random) -> None:
        bound = pick.choice([1, 2, 3, None])
        spec = f"0-{pick.randint(2, 9)}" + (f"%{bound}" if bound else "")
        array = submit_array(me, request(pick.randint(2, 8)), spec)
        with lock:
            highest[array.pk] = bound or math.inf
            counts["arrays"] += 1

    def check_bounds() -> None:
        for array_id, holding in (
            JobArray.objects.annotate(holding=Count("tasks", filter=HOLDING))
            .filter(holding__gt=0)
            .values_list("pk", "holding")
        ):
            with lock:
                if holding > highest[array_id]:
                    over.append(f"array {array_id}: {holding} > {highest[array_id]}")

    def enough() -> bool:
        return (
            len(cycles) >= 30 and counts["arrays"] >= 10 and counts["bounds"] >= 50
            and counts["array_cancels"] >= 3 and counts["task_cancels"] >= 10
        )  # fmt: skip

    def cycle_loop() -> None:  # at least 30 cycles, and until every action ran a few times
        while not enough() and len(cycles) < 300:
            cycles.append(run_cycle_now(admin).pk)
            check_bounds()
            advance_clock(admin, 60)
        done.set()

    def submit_loop() -> None:
        pick = random.Random(1)
        while not done.wait(0.3):
            new_array(pick)

    def bound_loop() -> None:
        pick = random.Random(2)
        while not done.wait(0.05):
            with lock:
                array_id = pick.choice(list(highest))
            value = pick.choice([1, 2, 4, None])
            with lock:  # noted before the change commits: the check never sees it first
                highest[array_id] = max(highest[array_id], value or math.inf)
            try:
                set_max_running(pick.choice([me, lead]), array_id, value)
            except ValidationError as exc:  # above the array's size
                assert "the array has" in "; ".join(exc.messages), exc
            counts["bounds"] += 1

    def cancel_loop() -> None:
        pick = random.Random(3)
        while not done.wait(0.1):
            if pick.random() < 0.15:
                with lock:
                    array_id = pick.choice(list(highest))
                cancel_array(pick.choice([me, lead, admin]), array_id)
                counts["array_cancels"] += 1
                continue
            task = (
                Job.objects.filter(array__isnull=False, state__in=Job.ACTIVE_STATES)
                .order_by("?")
                .values_list("pk", flat=True)
                .first()
            )
            if task is None:
                continue
            try:
                cancel_job(me, task)
                counts["task_cancels"] += 1
            except (ValidationError, PermissionDenied) as exc:
                if not any(word in "; ".join(exc.messages) for word in REFUSALS):
                    raise

    seed = random.Random(0)
    for _ in range(3):
        new_array(seed)
    threads = [in_thread(errors, fn) for fn in (cycle_loop, submit_loop, bound_loop, cancel_loop)]
    for thread in threads:
        thread.join(300)
    assert errors == [], errors[:5]
    assert over == []
    assert enough(), (len(cycles), counts)

    # Settle: every task ends, none stuck behind a bound, the books agree.
    assert drain(admin, 80, 120) == []
    assert find_inconsistencies() == []


def test_cancelling_an_array_waits_for_the_cycle_that_launches_its_task(demo, monkeypatch):
    """Step by step, the deadlock the cluster lock prevents: task 1 runs (the cycle locks
    its row to reconcile it), task 0 is released and planned to start (the launch locks
    its row). A cancel of the array begun between the two, taking the tasks' rows in id
    order, would hold task 0 and wait for task 1 while the cycle held task 1 and waited
    for task 0. It waits for the cycle instead, then cancels both."""
    from scheduling.cycle import run as cycle_run
    from scheduling.hold_services import hold_job, release_job

    me, admin = demo["researcher"], demo["admin"]
    make_quotas_roomy()
    array = submit_array(me, request(30), "0-1")
    first, second = array.task_ids
    hold_job(me, first, "")
    run_cycle_now(admin)
    assert Job.objects.get(pk=second).state == "running"
    release_job(me, first)
    errors: list[str] = []
    cancelled: list[list[int]] = []
    real = cycle_run.build_snapshot
    started: list[threading.Thread] = []

    def snapshot_then_cancel(*args, **kwargs):
        ctx = real(*args, **kwargs)  # after reconcile: task 1's row is locked by this cycle
        assert first in {p.id for p in ctx.snapshot.pending}, "planned by this cycle"
        started.append(in_thread(errors, lambda: cancelled.append(cancel_array(me, array.pk))))
        started[0].join(1.5)  # the cancel now waits (on the cluster lock)
        assert started[0].is_alive(), "the cancel went ahead of the cycle"
        return ctx

    monkeypatch.setattr(cycle_run, "build_snapshot", snapshot_then_cancel)
    summary = run_cycle_now(admin)
    monkeypatch.setattr(cycle_run, "build_snapshot", real)
    started[0].join(30)
    assert errors == [], errors
    assert summary.starts == 1, "the cycle launched task 0, undisturbed"
    assert cancelled == [[first, second]]
    assert set(Job.objects.filter(array=array).values_list("state", flat=True)) == {"cancelled"}
