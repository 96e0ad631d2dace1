"""Submissions after others' failure (``after_condition: "failed"``, Slurm's ``afternotok``)
racing the cycles in which the jobs they wait for succeed, or a lead cancels them: no
submission fails but by the rule (one naming a job that already succeeded is refused, "a
job after its failure could never start"), none starts unless every job it waits for ended
without succeeding, and then only after they ended; every other one is cancelled by the
loop naming a job that succeeded; none waits forever.

Real PostgreSQL, real threads, as ``test_after_ended_races_cycle``.
"""

from __future__ import annotations

import random
import threading
from functools import partial

import pytest
from django.core.exceptions import ValidationError

from scheduling.consistency import find_inconsistencies
from scheduling.models import Job, JobEvent
from scheduling.services import submit_job
from tests.concurrency.test_after_ended_races_cycle import request as ended_request
from tests.concurrency.threads import cancelling, cycling, drain, in_thread, refused_as_expected
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

NEVER = ("a job after its failure could never start",)


request = partial(ended_request, condition="failed")


def test_jobs_after_failures_submitted_while_cycles_end_their_dependencies(demo):
    me, lead, admin = demo["researcher"], demo["lead"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    refused: list[str] = []
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
            recent = upstreams[-6:]
            after = pick.sample(recent, min(len(recent), pick.randint(1, 2)))
            try:
                dependents.append(submit_job(me, request("fallback", after=after)).pk)
            except ValidationError as exc:  # one of them succeeded meanwhile: the rule
                refused_as_expected(exc, NEVER, refused)

    threads = [in_thread(errors, cycling(admin, 30, 60, cycles, done)),
               in_thread(errors, lambda: submit_loop(5)), in_thread(errors, lambda: submit_loop(6)),
               in_thread(errors, cancelling(lead, upstreams, done, 13))]  # fmt: skip
    for thread in threads:
        thread.join(240)
    assert errors == []
    assert len(cycles) == 30 and len(dependents) >= 20, (len(cycles), len(dependents))
    assert drain(admin, 40, 300) == [], "none waits forever"

    started = cancelled_for_a_success = 0
    for job in Job.objects.filter(pk__in=dependents).prefetch_related("after"):
        assert job.after_condition == "failed"
        deps = list(job.after.all())
        assert all(d.state in Job.TERMINAL_STATES for d in deps)
        if job.started_at is not None:
            started += 1
            assert all(d.state in ("failed", "cancelled") for d in deps), (job.pk, deps)
            assert all(d.finished_at <= job.started_at for d in deps), "started after they ended"
            continue
        assert job.state == "cancelled", (job.pk, job.state)
        why = JobEvent.objects.filter(job=job, kind="cancelled").values_list("message", flat=True)
        (message,) = why
        succeeded = [d.pk for d in deps if d.state == "succeeded"]
        assert succeeded and message in {
            f"cancelled: job {pk} it waited for succeeded" for pk in succeeded
        }, (job.pk, message, succeeded)
        cancelled_for_a_success += 1
    assert started and cancelled_for_a_success, (started, cancelled_for_a_success, len(refused))
    assert find_inconsistencies() == []
