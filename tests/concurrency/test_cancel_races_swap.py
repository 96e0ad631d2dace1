"""Cancels that race a quota swap (#19) wait for the cycle, never fail, never leave a
cancelled job marked as displaced, and the flags the cycles write back (within quota again
as the line empties) agree with the timelines.

Real PostgreSQL, real threads, the demo's simulated cluster (4 x 8 GPUs): line ``llm`` is
cut to 16 GPUs and filled with its own 1-GPU experiments; 1-GPU fine-tuning jobs that may
not be preempted wait for its quota. One thread runs cycles back to back, whose plans start
the fine-tuning jobs by swapping quota with the running experiments (marking them borrowed),
while the experiments' owner cancels them one after another.
"""

from __future__ import annotations

import threading
import time

import pytest

from quotas.models import BusinessLine, Queue
from scheduling.consistency import find_inconsistencies
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest, cancel_job, submit_job
from scheduling.sim_services import run_cycle_now
from tests.concurrency.threads import in_thread

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 3
JOBS = 16  # the line's quota, in 1-GPU jobs


def _submit(owner, queue: str, n: int, *, preemptible: bool, round_: int) -> list[int]:
    return [
        submit_job(owner, JobRequest(name=f"r{round_}-{queue}-{i}", queue=queue, gpus=1,
                                     preemptible=preemptible, estimated_runtime_minutes=600)).pk
        for i in range(n)
    ]  # fmt: skip


def _race(errors: list, cycles: list, cycle, cycle_after: float, cancels, cancel_after: float):
    """Cycles back to back (each appended to ``cycles``) while ``cancels`` runs; each starts
    after its delay."""
    done = threading.Event()

    def cycle_loop() -> None:
        time.sleep(cycle_after)
        while not done.is_set():
            cycles.append(cycle())

    def cancel_all() -> None:
        time.sleep(cancel_after)
        cancels()

    looper = in_thread(errors, cycle_loop)
    canceller = in_thread(errors, cancel_all)
    canceller.join(120)
    done.set()
    looper.join(120)


def _cancel_each(owner, ids: list[int]) -> None:
    for pk in ids:
        cancel_job(owner, pk)
        time.sleep(0.003)


def _kinds_in_order(job_id: int) -> list[str]:
    return list(
        JobEvent.objects.filter(job_id=job_id).order_by("id").values_list("kind", flat=True)
    )


def _cut_line() -> None:
    """Line ``llm`` at ``JOBS`` GPUs, its queues bounded only by it, nothing guaranteed."""
    BusinessLine.objects.filter(name="llm").update(quota_gpus=JOBS, guarantee_gpus=0)
    Queue.objects.filter(business_line__name="llm").update(quota_gpus=None, guarantee_gpus=0)


# Who goes first changes each round: the cancels, both at once, the cycle.
ORDERS = [(0.03, 0.0), (0.0, 0.0), (0.0, 0.03)]


def _flag_changes(pk: int) -> list[str]:
    """The job's flag changes, displaced (``borrowed``) and back within quota
    (``within_quota``), each while it ran, never after its cancel; its flag is the last."""
    kinds = _kinds_in_order(pk)
    assert kinds.count("cancelled") == 1, (pk, kinds)
    changes = [(i, k) for i, k in enumerate(kinds) if k in ("borrowed", "within_quota")]
    assert all(i < kinds.index("cancelled") for i, _ in changes), (pk, kinds)
    last = changes[-1][1] if changes else ""
    assert Job.objects.get(pk=pk).borrowed == (last == "borrowed"), (pk, kinds)
    return [k for _, k in changes]


def test_cancels_racing_quota_swaps_wait_and_leave_the_timelines_true(demo):
    owner, admin = demo["researcher"], demo["admin"]
    _cut_line()
    experiments_all: list[int] = []
    errors: list[str] = []
    cycles: list[int] = []
    for round_ in range(ROUNDS):
        experiments = _submit(owner, "llm-experiment", JOBS, preemptible=True, round_=round_)
        experiments_all += experiments
        run_cycle_now(admin)
        assert Job.objects.filter(pk__in=experiments, state="running").count() == JOBS
        finetunes = _submit(owner, "llm-finetune", JOBS, preemptible=False, round_=round_)
        cycle_after, cancel_after = ORDERS[round_ % 3]
        _race(errors, cycles, lambda: run_cycle_now(admin).pk, cycle_after,
              lambda ids=experiments[::-1]: _cancel_each(owner, ids), cancel_after)  # fmt: skip
        assert errors == []
        for pk in finetunes:  # the next round starts from an empty line
            if Job.objects.get(pk=pk).is_active:
                cancel_job(owner, pk)
        run_cycle_now(admin)
        run_cycle_now(admin)

    assert len(cycles) >= ROUNDS, "cycles really ran while the cancels did"
    assert set(Job.objects.filter(pk__in=experiments_all).values_list("state", flat=True)) == {
        "cancelled"
    }
    displaced = sum("borrowed" in _flag_changes(pk) for pk in experiments_all)
    assert displaced > 0, "some swaps happened while the cancels ran"
    assert find_inconsistencies() == []


def test_cancels_racing_flags_coming_back_within_quota(demo):
    """The line full of fine-tuning jobs that swapped in, its experiments borrowed: the
    owner cancels fine-tuning jobs and experiments in turn while cycles run, so the cycles
    clear experiments' flags (within quota again) as the owner cancels them."""
    owner, admin = demo["researcher"], demo["admin"]
    _cut_line()
    errors: list[str] = []
    cycles: list[int] = []
    experiments_all: list[int] = []
    for round_ in range(ROUNDS):
        experiments = _submit(owner, "llm-experiment", JOBS, preemptible=True, round_=round_)
        run_cycle_now(admin)
        finetunes = _submit(owner, "llm-finetune", JOBS, preemptible=False, round_=round_)
        run_cycle_now(admin)
        assert (
            Job.objects.filter(pk__in=experiments, state="running", borrowed=True).count() == JOBS
        )
        experiments_all += experiments
        turns = [pk for pair in zip(finetunes, experiments, strict=True) for pk in pair]
        cycle_after, cancel_after = ORDERS[round_ % 3]
        _race(errors, cycles, lambda: run_cycle_now(admin).pk, cycle_after,
              lambda ids=turns: _cancel_each(owner, ids), cancel_after)  # fmt: skip
        assert errors == []
        run_cycle_now(admin)

    assert len(cycles) >= ROUNDS
    cleared = sum("within_quota" in _flag_changes(pk) for pk in experiments_all)
    assert cleared > 0, "cycles cleared flags while the cancels ran"
    assert find_inconsistencies() == []
