"""Arrays after arrays task by task (``after_corresponding``, Slurm's ``aftercorr``) submitted
while cycles run, start and end their counterparts, and a lead cancels some: no submission
fails, no task starts before its own counterpart succeeded, a task whose counterpart failed
or was cancelled is cancelled, none waits forever.

Real PostgreSQL, real threads, as ``test_array_after_races_cycle``.
"""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ValidationError

from scheduling.array_services import submit_array
from scheduling.consistency import find_inconsistencies
from scheduling.models import Job
from scheduling.services import JobRequest
from tests.concurrency.threads import cancelling, cycling, drain, in_thread
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


def request(name: str, **more) -> JobRequest:
    return JobRequest(name=name, queue="llm-experiment", gpus=2, sim_duration_minutes=2, **more)


def test_tasks_after_their_counterparts_submitted_while_cycles_run(demo):
    me, lead, admin = demo["researcher"], demo["lead"], demo["admin"]
    make_quotas_roomy()
    errors: list[str] = []
    done = threading.Event()
    cycles: list[int] = []
    uppers: list[int] = []  # the upstream arrays' task ids (for the cancelling thread)
    pairs: list[tuple[int, int]] = []  # (upstream array, downstream array)

    def submit_loop() -> None:
        for _ in range(8):
            if done.wait(0.2):
                return
            up = submit_array(me, request("up"), "0-2")
            uppers.extend(up.task_ids)
            try:
                down = submit_array(me, request("down", after_corresponding=(up.pk,)), "0-3")
            except ValidationError as exc:  # a counterpart already failed: refused, not lost
                assert "could never start" in " ".join(exc.messages), exc.messages
                continue
            pairs.append((up.pk, down.pk))

    threads = [in_thread(errors, cycling(admin, 20, 60, cycles, done)),
               in_thread(errors, submit_loop),
               in_thread(errors, cancelling(lead, uppers, done, 5))]  # fmt: skip
    for thread in threads:
        thread.join(240)
    assert errors == []
    assert len(cycles) == 20 and len(pairs) >= 5, (len(cycles), len(pairs))
    assert drain(admin, 40, 300) == [], "none waits forever"
    cancelled_for_it = 0
    for up, down in pairs:
        counterparts = {t.array_index: t for t in Job.objects.filter(array_id=up)}
        for task in Job.objects.filter(array_id=down):
            other = counterparts.get(task.array_index)
            if other is None:  # index 3: nothing to wait for
                assert task.started_at is not None
            elif other.state == "succeeded":
                assert task.started_at is not None and task.started_at >= other.finished_at
            else:
                assert task.state == "cancelled" and task.started_at is None, (task.pk, other.state)
                cancelled_for_it += 1
    assert cancelled_for_it, "some counterparts were cancelled, and only their tasks with them"
    assert find_inconsistencies() == []
