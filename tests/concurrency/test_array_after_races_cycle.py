"""Submissions with ``after_arrays`` racing the cycles in which the arrays' tasks end, and the
team lead cancelling tasks and whole arrays: no submission fails other than by the rule's
refusal, no dependent starts before every task of its arrays succeeded, none waits
forever, and every one cancelled names a task of its array that failed or was cancelled.

Real PostgreSQL, real threads (as ``test_after_races_cycle.py`` for ``after``): a
submission may read an array whole while a cycle cancels a task and sweeps the dependents,
which does not see the new job yet; the next cycle's sweep must find it.
"""

from __future__ import annotations

import contextlib
import random
import re
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from scheduling.array_services import cancel_array, submit_array
from scheduling.consistency import find_inconsistencies
from scheduling.models import Job
from scheduling.services import JobRequest, cancel_job, submit_job
from scheduling.sim_services import run_cycle_now
from tests.concurrency.test_after_races_cycle import check_dependents
from tests.concurrency.threads import cycling, drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


def request(name: str, minutes: int = 3, after_arrays=()) -> JobRequest:
    return JobRequest(name=name, queue="llm-experiment", gpus=2, sim_duration_minutes=minutes,
                      after_arrays=tuple(after_arrays))  # fmt: skip


def test_a_dependent_committed_after_the_cycle_that_cancelled_a_task_is_cancelled_next(demo):
    me, admin = demo["researcher"], demo["admin"]
    make_quotas_roomy()
    array = submit_array(me, request("sweep", minutes=600), "0-2")
    run_cycle_now(admin)
    checked, release = threading.Event(), threading.Event()
    errors: list[str] = []
    made: list[int] = []

    def slow_submission() -> None:  # its check reads every task running; it commits late
        with transaction.atomic():
            made.append(submit_job(me, request("aggregate", after_arrays=[array.pk])).pk)
            checked.set()
            release.wait(20)

    submitter = in_thread(errors, slow_submission)
    assert checked.wait(10)
    cancel_job(me, array.tasks.get(array_index=1).pk)
    run_cycle_now(admin)  # ends task 1; the new job is not committed: not seen
    release.set()
    submitter.join(20)
    assert errors == []
    then = Job.objects.get(pk=made[0])
    assert then.state == "pending", "committed after that cycle, with a cancelled task"
    run_cycle_now(admin)
    then.refresh_from_db()
    assert then.state == "cancelled", "the next cycle's sweep found it"
    assert then.events.last().message == (
        f"cancelled: task 1 of array {array.pk} it waited for was cancelled"
    )


def test_dependents_of_arrays_racing_cycles_and_cancels_start_or_are_cancelled(demo):
    me, lead, admin = demo["researcher"], demo["lead"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    refused: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    arrays: list[int] = []
    dependents: list[int] = []

    def submit_loop(seed: int) -> None:
        pick = random.Random(seed)
        for _ in range(20):
            if done.wait(0.1):
                return
            spec = f"0-{pick.randint(1, 4)}%2"
            arrays.append(submit_array(me, request("sweep", pick.randint(1, 4)), spec).pk)
            after = pick.sample(arrays[-4:], min(len(arrays[-4:]), pick.randint(1, 2)))
            try:
                dependents.append(submit_job(me, request("aggregate", 2, after)).pk)
            except ValidationError as exc:  # a task ended badly since it was read: said so
                refused.extend(exc.message_dict["after_arrays"])

    def cancel_loop() -> None:  # the team lead cancels some tasks and, rarely, an array
        pick = random.Random(3)
        while not done.is_set():
            task = (Job.objects.filter(array_id__in=arrays[-6:], state__in=["pending", "running"])
                    .order_by("?").first())  # fmt: skip
            if task is not None and pick.random() < 0.3:
                with contextlib.suppress(ValidationError):  # it ended meanwhile
                    cancel_job(lead, task.pk)
            elif task is not None and pick.random() < 0.05:
                cancel_array(lead, task.array_id)
            done.wait(0.05)

    threads = [in_thread(errors, cycling(admin, 30, 60, cycles, done)),
               in_thread(errors, lambda: submit_loop(1)), in_thread(errors, lambda: submit_loop(2)),
               in_thread(errors, cancel_loop)]  # fmt: skip
    for thread in threads:
        thread.join(240)
    assert errors == []
    assert all("a job after it could never start" in why for why in refused), refused
    assert len(cycles) == 30 and len(dependents) >= 10, (len(cycles), len(dependents))

    assert drain(admin, 40, 300) == [], "none waits forever"

    def blamed(message: str) -> Job:  # "cancelled: task 3 of array 42 it waited for failed"
        index, array_id = re.match(r"cancelled: task (\d+) of array (\d+) ", message).groups()
        return Job.objects.get(array_id=int(array_id), array_index=int(index))

    started, cancelled_for_dependency = check_dependents(
        dependents, lambda job: list(Job.objects.filter(array__in=job.after_arrays.all())), blamed
    )
    assert started and cancelled_for_dependency, (started, cancelled_for_dependency)
    assert find_inconsistencies() == []
