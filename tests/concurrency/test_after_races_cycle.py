"""Submissions with ``after`` racing the cycles in which the jobs they wait for end: no
dependent waits forever, none starts before its dependencies succeeded, no submission fails.

Real PostgreSQL, real threads. The race that matters: a submission reads job 12 still
running (its check passes) while a cycle ends 12 and cancels 12's dependents, which does
not see the new job (not committed yet); it commits after. Only a cycle that sweeps every
pending job's dependencies (``scheduling.cycle.dependencies``), not one that reacts to the
jobs it just ended, cancels it.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from scheduling.consistency import find_inconsistencies
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest, cancel_job, submit_job
from scheduling.sim_services import run_cycle_now
from tests.concurrency.threads import cancelling, cycling, drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


def request(name: str, after=(), minutes: int = 3) -> JobRequest:
    return JobRequest(name=name, queue="llm-experiment", gpus=4, sim_duration_minutes=minutes,
                      after=tuple(after))  # fmt: skip


def test_a_dependent_committed_after_the_cycle_that_ended_its_dependency_is_cancelled_next(demo):
    me, admin = demo["researcher"], demo["admin"]
    make_quotas_roomy()
    upstream = submit_job(me, request("pretrain", minutes=600)).pk
    run_cycle_now(admin)
    checked, release = threading.Event(), threading.Event()
    errors: list[str] = []
    made: list[int] = []

    def slow_submission() -> None:  # its check reads ``upstream`` running; it commits late
        with transaction.atomic():
            made.append(submit_job(me, request("eval", after=[upstream])).pk)
            checked.set()
            release.wait(20)

    submitter = in_thread(errors, slow_submission)
    assert checked.wait(10)
    cancel_job(me, upstream)
    run_cycle_now(admin)  # ends ``upstream``; the new job is not committed: not seen
    release.set()
    submitter.join(20)
    assert errors == []
    then = Job.objects.get(pk=made[0])
    assert then.state == "pending", "committed after that cycle, with a cancelled dependency"
    run_cycle_now(admin)
    then.refresh_from_db()
    assert then.state == "cancelled", "the next cycle's sweep found it"
    assert then.events.last().message == f"cancelled: job {upstream} it waited for was cancelled"


def test_dependents_submitted_while_cycles_end_their_dependencies_start_or_are_cancelled(demo):
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
        for _ in range(30):
            if done.wait(0.1):
                return
            upstreams.append(submit_job(me, request("up", minutes=pick.randint(1, 4))).pk)
            active = list(Job.objects.filter(pk__in=upstreams[-6:] + dependents[-6:])
                          .exclude(state__in=["failed", "cancelled"]).values_list("pk", flat=True))  # fmt: skip
            after = pick.sample(active, min(len(active), pick.randint(1, 3)))
            try:
                dependents.append(submit_job(me, request("down", after=after)).pk)
            except ValidationError as exc:  # a dependency ended since it was read: said so
                refused.extend(exc.message_dict["after"])

    threads = [in_thread(errors, cycling(admin, 30, 60, cycles, done)),
               in_thread(errors, lambda: submit_loop(1)), in_thread(errors, lambda: submit_loop(2)),
               in_thread(errors, cancelling(lead, upstreams, done, 7))]  # fmt: skip
    for thread in threads:
        thread.join(240)
    assert errors == []
    assert all("a job after it could never start" in why for why in refused), refused
    assert len(cycles) == 30 and len(dependents) >= 20, (len(cycles), len(dependents))

    assert drain(admin, 40, 300) == [], "none waits forever"

    def blamed(message: str) -> Job:  # "cancelled: job 12 it waited for failed"
        return Job.objects.get(pk=int(message.split()[2]))

    started, cancelled_for_dependency = check_dependents(
        dependents, lambda job: list(job.after.all()), blamed
    )
    assert started and cancelled_for_dependency, (started, cancelled_for_dependency)
    assert find_inconsistencies() == []


def check_dependents(
    dependents: list[int], waited_for: Callable[[Job], list[Job]], blamed: Callable[[str], Job]
) -> tuple[int, int]:
    """Every one of ``dependents`` either started once every job it waited for
    (``waited_for``) had succeeded, or was cancelled: by a person, or for a job it waited
    for that ended failed or cancelled (``blamed`` reads which from its timeline line).
    Returns how many started and how many were cancelled for a dependency."""
    started = cancelled_for_dependency = 0
    for job in Job.objects.filter(pk__in=dependents).prefetch_related("after", "after_arrays"):
        deps = waited_for(job)
        if job.started_at is not None:
            started += 1
            assert all(d.state == "succeeded" and d.finished_at <= job.started_at for d in deps)
            continue
        assert job.state == "cancelled", (job.pk, job.state)
        why = JobEvent.objects.filter(job=job, kind="cancelled").values_list("message", flat=True)
        (message,) = why
        if message.startswith("cancelled by "):
            continue
        cancelled_for_dependency += 1
        dep = blamed(message)
        assert dep.pk in {d.pk for d in deps}
        assert dep.state in ("failed", "cancelled")
    return started, cancelled_for_dependency
