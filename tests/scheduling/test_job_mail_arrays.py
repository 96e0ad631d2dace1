"""Mail about an array's tasks (scheduling.job_mail): a line per array and kind of event,
its tasks' indices written as a spec, and once its last task ended what all its tasks came
to, as Slurm mails an array as a whole; never a line per task."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import clock
from scheduling.array_services import submit_array
from scheduling.job_mail import MAX_LISTED, send_job_digests, set_job_mail_preference
from scheduling.models import Job, JobArray, JobEvent
from scheduling.services import JobRequest, submit_job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("celery_eager")]


@pytest.fixture(autouse=True)
def portal_url(monkeypatch):
    monkeypatch.setenv("PORTAL_URL", "https://gpu.example.org/")


def sweep(user, spec: str, name: str = "sweep") -> JobArray:
    return submit_array(user, JobRequest(name=name, queue="llm-experiment", gpus=1), spec)


def happen(array: JobArray, indices, kind: str, state: str | None = None, at=None) -> None:
    """Events of ``kind`` for the tasks ``indices`` (the state they come to, as the cycle
    writes it)."""
    tasks = list(array.tasks.filter(array_index__in=list(indices)))
    at = at or clock.now()
    JobEvent.objects.bulk_create(
        JobEvent(job=t, kind=kind, message=f"it {kind}", at=at) for t in tasks
    )
    if state:
        Job.objects.filter(pk__in=[t.pk for t in tasks]).update(state=state)


def run(capture) -> list:
    before = len(mail.outbox)
    with capture(execute=True):
        send_job_digests()
    return mail.outbox[before:]


def lines_of(message) -> list[str]:
    return [line for line in message.body.splitlines() if "https://gpu.example.org/" in line
            and "/account/" not in line]  # fmt: skip


def test_an_arrays_tasks_are_one_line_per_kind_with_their_indices(
    demo, django_capture_on_commit_callbacks
):
    me = demo["researcher"]
    set_job_mail_preference(me, ["started", "succeeded", "failed"])
    array = sweep(me, "0-15")
    happen(array, range(16), "started", "running")
    (sent,) = run(django_capture_on_commit_callbacks)
    assert sent.subject == f"Your array {array.pk} (sweep) changed"
    (line,) = lines_of(sent)
    assert line.endswith(
        f"  array {array.pk} (sweep): 16 tasks started (0-15)  "
        f"https://gpu.example.org/arrays/{array.pk}/"
    )

    happen(array, [*range(0, 7), *range(8, 15)], "succeeded", "succeeded")
    happen(array, [7], "failed", "failed")
    (sent,) = run(django_capture_on_commit_callbacks)
    said = [line.split("  ", 1)[1] for line in lines_of(sent)]
    assert said == [
        f"array {array.pk} (sweep): 14 tasks succeeded (0-6,8-14)  "
        f"https://gpu.example.org/arrays/{array.pk}/",
        f"array {array.pk} (sweep): task failed (7)  https://gpu.example.org/arrays/{array.pk}/",
    ], "in time order; task 15 still runs: the array has not ended"

    happen(array, [15], "failed", "failed")
    (sent,) = run(django_capture_on_commit_callbacks)
    said = [line.split("  ", 1)[1].split("  https")[0] for line in lines_of(sent)]
    assert said == [
        f"array {array.pk} (sweep): task failed (15)",
        f"array {array.pk} (sweep) has ended: 14 of its 16 tasks succeeded, 2 failed",
    ]


def test_jobs_and_arrays_in_one_mail_in_time_order_and_counted_in_the_subject(
    demo, django_capture_on_commit_callbacks
):
    me = demo["researcher"]
    set_job_mail_preference(me, ["succeeded", "cancelled"])
    array = sweep(me, "0-2")
    single = submit_job(me, JobRequest(name="single", queue="llm-experiment", gpus=1))
    now = clock.now()
    JobEvent.objects.create(job=single, kind="succeeded", message="done", at=now)
    happen(array, range(3), "succeeded", "succeeded", at=now - timedelta(minutes=1))
    (sent,) = run(django_capture_on_commit_callbacks)
    assert sent.subject == "1 of your jobs and 1 of your arrays changed"
    said = [line.split("  ", 1)[1].split("  https")[0] for line in lines_of(sent)]
    assert said == [
        f"array {array.pk} (sweep): 3 tasks succeeded (0-2)",
        f"array {array.pk} (sweep) has ended: all 3 tasks succeeded",
        f"job {single.pk} (single) succeeded: done",
    ]


def test_a_thousand_tasks_are_two_lines_in_a_few_queries(demo, django_capture_on_commit_callbacks):
    me = demo["researcher"]
    set_job_mail_preference(me, ["succeeded", "cancelled"])
    array = sweep(me, "0-999")
    happen(array, range(999), "succeeded", "succeeded")
    happen(array, [999], "cancelled", "cancelled")
    JobEvent.objects.filter(job__array=array, kind="cancelled").update(message="cancelled by lead")
    with CaptureQueriesContext(connection) as queries:
        (sent,) = run(django_capture_on_commit_callbacks)
    said = [line.split("  ", 1)[1].split("  https")[0] for line in lines_of(sent)]
    assert said == [
        f"array {array.pk} (sweep): 999 tasks succeeded (0-998)",
        f"array {array.pk} (sweep): task was cancelled (999)",
        f"array {array.pk} (sweep) has ended: 999 of its 1,000 tasks succeeded, 1 cancelled",
    ]
    assert "more:" not in sent.body, f"not {MAX_LISTED} task lines and a count"
    assert len(queries) < 25, [q["sql"][:80] for q in queries]


def test_many_tasks_were_what_one_task_was(demo, django_capture_on_commit_callbacks):
    me = demo["researcher"]
    set_job_mail_preference(me, ["preempted"])
    array = sweep(me, "0-3")
    happen(array, [0, 1, 3], "preempted")
    happen(array, [2], "retried")
    (sent,) = run(django_capture_on_commit_callbacks)
    said = [line.split("  ", 1)[1].split("  https")[0] for line in lines_of(sent)]
    assert said == [
        f"array {array.pk} (sweep): 3 tasks were preempted (0-1,3)",
        f"array {array.pk} (sweep): task failed a run and was requeued for a retry (2)",
    ]
