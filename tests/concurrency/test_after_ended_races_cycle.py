"""Submissions after others' ends (``after_condition: "ended"``, Slurm's ``afterany``) racing
the cycles in which the jobs they wait for end, succeeded or cancelled: no submission fails
or is refused (an ended dependency counts as done), none is cancelled for its dependencies'
outcome, none starts before every one of them ended, none waits forever.

Real PostgreSQL, real threads, as ``test_after_races_cycle`` (which races ``succeeded``).
"""

from __future__ import annotations

import random
import threading

import pytest

from scheduling.consistency import find_inconsistencies
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest, submit_job
from tests.concurrency.threads import cancelling, cycling, drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


def request(name: str, after=(), minutes: int = 3, condition: str = "ended") -> JobRequest:
    """A 4-GPU job of ``minutes``; with ``after``, waiting under ``condition``."""
    return JobRequest(name=name, queue="llm-experiment", gpus=4, sim_duration_minutes=minutes,
                      after=tuple(after),
                      after_condition=condition if after else "succeeded")  # fmt: skip


def test_jobs_after_ends_submitted_while_cycles_end_their_dependencies_all_start(demo):
    me, lead, admin = demo["researcher"], demo["lead"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    dependents: list[int] = []
    upstreams: list[int] = []

    def submit_loop(seed: int) -> None:
        pick = random.Random(seed)
        for _ in range(25):
            if done.wait(0.1):
                return
            upstreams.append(submit_job(me, request("up", minutes=pick.randint(1, 4))).pk)
            # any recent job, ended or not: an ended one counts as done, never refused
            recent = upstreams[-6:] + dependents[-6:]
            dependents.append(submit_job(me, request("down", after=pick.sample(
                recent, min(len(recent), pick.randint(1, 3))))).pk)  # fmt: skip

    threads = [in_thread(errors, cycling(admin, 30, 60, cycles, done)),
               in_thread(errors, lambda: submit_loop(3)), in_thread(errors, lambda: submit_loop(4)),
               in_thread(errors, cancelling(lead, upstreams, done, 11))]  # fmt: skip
    for thread in threads:
        thread.join(240)
    assert errors == []
    assert len(cycles) == 30 and len(dependents) >= 20, (len(cycles), len(dependents))
    assert drain(admin, 40, 300) == [], "none waits forever"

    jobs = Job.objects.filter(pk__in=dependents).prefetch_related("after")
    after_cancelled = 0
    for job in jobs:
        assert job.after_condition == "ended"
        assert job.started_at is not None, (job.pk, job.state)  # never cancelled for them
        deps = list(job.after.all())
        assert all(d.state in Job.TERMINAL_STATES for d in deps)
        assert all(d.finished_at <= job.started_at for d in deps), "started after they ended"
        after_cancelled += any(d.state == "cancelled" for d in deps)
    assert after_cancelled, "some waited for a job that was cancelled, and started anyway"
    assert not JobEvent.objects.filter(
        job_id__in=dependents, kind="cancelled", message__contains="it waited for"
    ).exists()
    assert find_inconsistencies() == []
