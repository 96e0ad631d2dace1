"""One person's submissions at the same instant (``scheduling.submission_lock``): what each
checks against the person's other jobs still holds when its rows commit. The bound on
active jobs is never passed, however many submit at once; two singletons of one name never
both start as the only one; and singletons submitted while cycles run never run two at a
time. Nobody else's submissions wait for the lock.

Real PostgreSQL, real threads. Each check's count is slowed down after it reads (a
``sleep`` wrapped around it), so that without the lock every submission would count
before any wrote: the races are forced, not hoped for.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.core.exceptions import ValidationError

from scheduling import services
from scheduling.consistency import find_inconsistencies
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.concurrency.threads import cycling, drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_S = 0.3


def slowed(monkeypatch, name: str) -> None:
    """``services.<name>`` sleeps ``SLOW_S`` after it has read (and before the caller writes)."""
    checked = getattr(services, name)

    def slow(*args, **kwargs):
        result = checked(*args, **kwargs)
        time.sleep(SLOW_S)
        return result

    monkeypatch.setattr(services, name, slow)


def at_once(count: int, submit) -> tuple[list[int], list[str], list[str]]:
    """``submit(i)`` in ``count`` threads released together: the job ids made, the refusals'
    messages, and any other error."""
    made, refused, errors = [], [], []
    gate = threading.Barrier(count)

    def one(i: int) -> None:
        gate.wait(10)
        try:
            made.append(submit(i).pk)
        except ValidationError as exc:
            refused.append(" ".join(exc.messages))

    threads = [in_thread(errors, lambda i=i: one(i)) for i in range(count)]
    for thread in threads:
        thread.join(60)
    return made, refused, errors


def test_the_active_jobs_bound_holds_when_a_person_submits_many_at_once(demo, settings,
                                                                         monkeypatch):  # fmt: skip
    settings.ACTIVE_JOBS_PER_PERSON = 5
    slowed(monkeypatch, "check_active_jobs")
    me = demo["researcher"]
    request = JobRequest(name="burst", queue="llm-experiment", gpus=1)
    made, refused, errors = at_once(8, lambda i: submit_job(me, request))
    assert errors == []
    assert len(made) == 5 and len(refused) == 3, (made, refused)
    assert all("may have at most 5 at once" in message for message in refused)
    assert Job.objects.filter(owner=me, state__in=Job.ACTIVE_STATES).count() == 5


def test_other_people_do_not_wait_for_a_persons_lock(demo, monkeypatch):
    """Two people's submissions, each slowed: together they take about one slow check, not
    two (each waits only for their own)."""
    slowed(monkeypatch, "check_active_jobs")
    people = [demo["researcher"], demo["lead"]]
    request = JobRequest(name="apart", queue="llm-experiment", gpus=1)
    started = time.monotonic()
    made, refused, errors = at_once(2, lambda i: submit_job(people[i], request))
    took = time.monotonic() - started
    assert (len(made), refused, errors) == (2, [], [])
    assert took < 2 * SLOW_S, f"{took:.2f} s: one waited for the other's lock"


def test_singletons_of_one_name_submitted_at_once_each_wait_for_all_before(demo, monkeypatch):
    slowed(monkeypatch, "same_name_jobs")
    me = demo["researcher"]
    request = JobRequest(name="chain", queue="llm-experiment", gpus=1, singleton=True)
    made, refused, errors = at_once(4, lambda i: submit_job(me, request))
    assert (refused, errors) == ([], [])
    jobs = Job.objects.filter(pk__in=made).order_by("pk").prefetch_related("after")
    links = [sorted(j.pk for j in job.after.all()) for job in jobs]
    ids = [job.pk for job in jobs]
    assert links == [ids[:k] for k in range(4)], "each waits for every one before it"


def test_singletons_submitted_while_cycles_run_never_run_two_at_a_time(demo):
    me, admin = demo["researcher"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    made: list[int] = []

    def submit_loop(minutes: int) -> None:
        for _ in range(8):
            if done.wait(0.15):
                return
            request = JobRequest(name="chain", queue="llm-experiment", gpus=4, singleton=True,
                                 sim_duration_minutes=minutes)  # fmt: skip
            made.append(submit_job(me, request).pk)

    threads = [in_thread(errors, cycling(admin, 25, 60, cycles, done)),
               in_thread(errors, lambda: submit_loop(1)), in_thread(errors, lambda: submit_loop(2))]  # fmt: skip
    for thread in threads:
        thread.join(240)
    assert errors == []
    assert len(cycles) == 25 and len(made) >= 12, (len(cycles), len(made))
    assert drain(admin, 60, 180) == [], "none waits forever"
    runs = sorted(Job.objects.filter(pk__in=made).values_list("started_at", "finished_at", "pk"))
    assert all(start is not None for start, _, _ in runs)
    for (_, ended, before), (start, _, after) in zip(runs, runs[1:], strict=False):
        assert ended <= start, f"job {after} started while job {before} of its name ran"
    assert find_inconsistencies() == []
