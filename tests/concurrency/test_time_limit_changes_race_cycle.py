"""Time limits changed while back-to-back scheduling cycles stop runs at them, on
PostgreSQL: the owner lowers limits and an admin raises them, at random, as the loop works.
No change fails other than by the refusals the rules call for (no 500, no deadlock), and
no run is stopped before the limit its job ends with: a raise that commits after the loop
read the old limit is seen under the job's lock (``cycle.stops.request_stops``), and once a
run is being stopped at its limit, a change is refused, so the last limit is the one it
was stopped on.
"""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from scheduling.consistency import find_inconsistencies
from scheduling.models import Job, JobRun
from scheduling.services import JobRequest, submit_job
from scheduling.time_limit_services import change_time_limit
from scheduling.time_limits import SLACK_S
from tests.concurrency.threads import cycling, drain, in_thread, refused_as_expected
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

REFUSALS = ("only a cluster admin", "is already", "already being stopped")


def test_limits_changed_while_cycles_stop_runs_at_them(demo):
    me, admin = demo["researcher"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    refused: list[str] = []
    changed = {"lowered": 0, "raised": 0}
    done = threading.Event()
    cycles: list[int] = []
    jobs = [
        submit_job(me, JobRequest(name=f"t{i}", queue="llm-experiment", gpus=4,
                                  sim_duration_minutes=25, time_limit_minutes=5 + i % 5)).pk
        for i in range(12)
    ]  # fmt: skip

    def changing(who, seed: int, kind: str) -> None:
        pick = random.Random(seed)
        while not done.wait(0.03):
            job_id = pick.choice(jobs)
            minutes = pick.randint(2, 6) if kind == "lowered" else pick.randint(8, 14)
            try:
                change_time_limit(who, job_id, minutes)
                changed[kind] += 1
            except (ValidationError, PermissionDenied) as exc:
                refused_as_expected(exc, REFUSALS, refused)

    threads = [
        in_thread(errors, cycling(admin, 40, 60.0, cycles, done)),
        in_thread(errors, lambda: changing(me, 1, "lowered")),
        in_thread(errors, lambda: changing(admin, 2, "raised")),
    ]
    for thread in threads:
        thread.join(300)
    assert errors == [], errors[:5]
    assert len(cycles) == 40
    assert changed["lowered"] >= 5 and changed["raised"] >= 5, changed
    assert drain(admin, 60, 60.0) == []

    timed_out = Job.objects.filter(failure_reason__startswith="time limit reached")
    assert timed_out.count() >= 3, "the drill saw limits reached"
    for job in timed_out:
        last = JobRun.objects.filter(job=job).latest("ended_at")
        lasted = last.ended_at - last.started_at
        assert lasted >= timedelta(minutes=job.time_limit_minutes, seconds=-SLACK_S), (
            job.pk, lasted, job.time_limit_minutes,
        )  # fmt: skip
    assert find_inconsistencies() == []
