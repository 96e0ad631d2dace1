"""The loop's bulk writes at scale (#16): ``sql.bulk_set`` both ways, verdicts of hundreds of
jobs, and the preemptions of one plan written together.

``bulk_set`` sends a few rows inline (``VALUES``) and many through ``COPY`` into a
temporary table; both must write exactly what Django would, to exactly the rows the
guard allows, and nothing may be lost on the way.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from core import clock
from scheduling import sql
from scheduling.backends.base import TransientBackendError
from scheduling.cycle import stops, verdicts
from scheduling.engine import types as et
from scheduling.models import Job, JobEvent
from tests.scheduling.cycle.conftest import T0, make_cycle

pytestmark = pytest.mark.django_db

FIELDS = ("state", "pending_details", "pending_message", "queue_position", "estimated_start",
          "progress_seconds", "borrowed", "preempted_for_id")  # fmt: skip


def values_of(job_id: int) -> tuple:
    return tuple(Job.objects.values_list(*FIELDS).get(pk=job_id))


def new_values(i: int, other: int) -> tuple:
    """Every kind of value the loop writes: enum text, JSON (nested, unicode, nulls), None,
    an aware datetime with microseconds, a float, a bool, a foreign key id."""
    return (
        Job.State.PREEMPTING if i % 2 else "pending",
        {"ahead": i, "where": "r037: 11, ré", "list": [1, 2.5, None], "n": None} if i % 3 else {},
        f"message {i} with 'quotes' and \\ backslash\nand a line" if i % 4 else "",
        i if i % 5 else None,
        datetime(2025, 3, 1, 12, 0, 0, 123457, tzinfo=UTC) + timedelta(seconds=i) if i % 6 else None,
        i / 7,
        bool(i % 2),
        other if i % 2 else None,
    )  # fmt: skip


@pytest.mark.parametrize("count", [3, sql.COPY_FROM_ROWS + 7])
def test_bulk_set_writes_what_django_would_both_ways(make_job, count):
    jobs = [make_job() for _ in range(count)]
    rows = [(j.pk, *new_values(i, jobs[0].pk)) for i, j in enumerate(jobs)]
    assert sql.bulk_set(Job, FIELDS, rows) == count
    got = {j.pk: values_of(j.pk) for j in jobs}
    # The same values saved one by one through the ORM read back identically.
    for i, job in enumerate(jobs):
        for field, value in zip(FIELDS, new_values(i, jobs[0].pk), strict=True):
            setattr(job, field, value)
        job.save(update_fields=[f.removesuffix("_id") for f in FIELDS])
        assert values_of(job.pk) == got[job.pk]


def test_bulk_set_of_many_rows_copies_them_and_of_few_inlines_them(make_job):
    jobs = [make_job() for _ in range(sql.COPY_FROM_ROWS)]
    with CaptureQueriesContext(connection) as many:
        sql.bulk_set(Job, ["progress_seconds"], [(j.pk, 1.0) for j in jobs])
    with CaptureQueriesContext(connection) as few:
        sql.bulk_set(Job, ["progress_seconds"], [(j.pk, 2.0) for j in jobs[:5]])
    assert any("CREATE TEMPORARY TABLE" in q["sql"] for q in many.captured_queries)
    assert [q["sql"].split()[0] for q in few.captured_queries] == ["UPDATE"]
    assert sorted(Job.objects.values_list("progress_seconds", flat=True)) == (
        [1.0] * (len(jobs) - 5) + [2.0] * 5
    )


def test_the_guard_holds_for_copied_rows_and_the_count_says_so(make_job):
    jobs = [make_job() for _ in range(sql.COPY_FROM_ROWS + 1)]
    moved = jobs[::10]
    Job.objects.filter(pk__in=[j.pk for j in moved]).update(state="running")
    rows = [(j.pk, "QUOTA_EXCEEDED") for j in jobs]
    updated = sql.bulk_set(Job, ["pending_code"], rows, where="t.state = 'pending'")
    assert updated == len(jobs) - len(moved)
    assert set(Job.objects.filter(state="running").values_list("pending_code", flat=True)) == {""}
    assert Job.objects.filter(state="pending", pending_code="QUOTA_EXCEEDED").count() == updated


def test_copies_can_follow_each_other_in_one_transaction_and_outside_one(make_job):
    jobs = [make_job() for _ in range(sql.COPY_FROM_ROWS)]
    with transaction.atomic():
        for value in (1.0, 2.0, 3.0):  # the temporary table of one call is gone before the next
            sql.bulk_set(Job, ["progress_seconds"], [(j.pk, value) for j in jobs])
    assert set(Job.objects.values_list("progress_seconds", flat=True)) == {3.0}


def test_a_row_of_the_wrong_width_is_refused_and_nothing_written(make_job):
    jobs = [make_job() for _ in range(sql.COPY_FROM_ROWS)]
    rows = [(j.pk, 5.0) for j in jobs[:-1]] + [(jobs[-1].pk, 5.0, "extra")]
    with pytest.raises(ValueError), transaction.atomic():
        sql.bulk_set(Job, ["progress_seconds"], rows)
    assert set(Job.objects.values_list("progress_seconds", flat=True)) == {0.0}


# -- verdicts ------------------------------------------------------------------------------------


def verdict_of(i: int) -> et.Verdict:
    return et.Verdict(
        code=("PRIORITY", "QUOTA_EXCEEDED", "TOPOLOGY")[i % 3], message=f"waits, {i} ahead",
        details={"ahead_jobs": i, "free": [i, i + 1]}, remedy="wait",
        estimated_start=T0 + 600 + i + 0.123456789 if i % 2 else None, position=i + 1,
    )  # fmt: skip


def snapshot_rows(jobs: list[Job]) -> dict[int, dict]:
    return {
        r["id"]: r
        for r in Job.objects.filter(pk__in=[j.pk for j in jobs]).values(
            "id", "state", *verdicts.VERDICT_FIELDS
        )
    }


def test_every_verdict_of_hundreds_of_jobs_is_written_none_lost(backend, make_job, sent):
    jobs = [make_job() for _ in range(sql.COPY_FROM_ROWS + 50)]
    started = jobs[7]
    rows = snapshot_rows(jobs)
    Job.objects.filter(pk=started.pk).update(state="running")  # started by another writer
    plan = et.Plan(starts=(), preemptions=(), reservations=(),
                   verdicts={j.pk: verdict_of(i) for i, j in enumerate(jobs)})  # fmt: skip
    verdicts.write_verdicts(make_cycle(backend), plan, rows)
    stored = {r["id"]: r for r in Job.objects.values("id", *verdicts.VERDICT_FIELDS)}
    for i, job in enumerate(jobs):
        v = verdict_of(i)
        if job is started:
            assert stored[job.pk]["pending_code"] == "", "the write is guarded by its state"
            continue
        est = None if v.estimated_start is None else datetime.fromtimestamp(v.estimated_start, UTC)
        assert tuple(stored[job.pk][f] for f in verdicts.VERDICT_FIELDS) == (
            v.code,
            v.message,
            v.details,
            v.remedy,
            v.position,
            est,
        ), f"job {i}"
    told = [p["id"] for _, kind, p in sent if kind == "job.updated"]
    assert len(told) == len(jobs), "every new reason is told (the guard is the database's)"
    # Read back as the next cycle's snapshot reads them: nothing is written again.
    with CaptureQueriesContext(connection) as again:
        verdicts.write_verdicts(make_cycle(backend), plan, snapshot_rows(jobs))
    assert not [q for q in again.captured_queries if "UPDATE" in q["sql"]]


def test_only_the_verdicts_that_changed_are_written_again(backend, make_job):
    jobs = [make_job() for _ in range(sql.COPY_FROM_ROWS + 10)]
    first = {j.pk: verdict_of(i) for i, j in enumerate(jobs)}
    verdicts.write_verdicts(make_cycle(backend), et.Plan((), (), (), first), snapshot_rows(jobs))
    changed = {jobs[3].pk, jobs[150].pk}
    second = {pk: replace(v, position=999) if pk in changed else v for pk, v in first.items()}
    Job.objects.update(pending_remedy="written by nobody")  # marks rows a write would reset
    rows = snapshot_rows(jobs)
    for pk in rows:
        rows[pk]["pending_remedy"] = "wait"  # as the snapshot saw them before that
    verdicts.write_verdicts(make_cycle(backend), et.Plan((), (), (), second), rows)
    rewritten = set(Job.objects.filter(pending_remedy="wait").values_list("id", flat=True))
    assert rewritten == changed
    assert set(Job.objects.filter(queue_position=999).values_list("id", flat=True)) == changed


# -- preemptions ---------------------------------------------------------------------------------


def test_the_victims_of_one_plan_are_stopped_in_order_and_written_together(
    backend, running_job, make_job
):
    first, cold = running_job("n0", gpus=(0, 1, 2, 3)), running_job("n0", gpus=(4, 5, 6, 7))
    refused = running_job("n1")
    moved_on = make_job(state="preempting", backend_ref="portal-0-1")
    urgent = make_job()
    backend.fail_next("checkpoint_and_stop", TransientBackendError("API timeout"))
    order = [
        et.Preemption(refused.pk, urgent.pk, et.GRACEFUL, T0 + 120),
        et.Preemption(first.pk, urgent.pk, et.GRACEFUL, T0 + 60),
        et.Preemption(moved_on.pk, urgent.pk, et.GRACEFUL, T0 + 60),
        et.Preemption(cold.pk, urgent.pk, "cold", T0),
        et.Preemption(first.pk, urgent.pk, et.GRACEFUL, T0 + 60),  # twice: stopped once
    ]
    cycle = make_cycle(backend)
    with CaptureQueriesContext(connection) as queries:
        stops.preempt(cycle, tuple(order))
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SELECT", "UPDATE"]
    cycle.flush_events()
    assert [c[:2] for c in backend.calls] == [
        ("checkpoint_and_stop", refused.backend_ref), ("checkpoint_and_stop", first.backend_ref),
        ("kill", cold.backend_ref),
    ]  # fmt: skip
    states = dict(Job.objects.values_list("id", "state"))
    assert (states[first.pk], states[cold.pk], states[refused.pk]) == (
        "preempting", "preempting", "running"
    )  # fmt: skip
    at = clock.now()  # what a save would stamp (the tests pin the portal's clock)
    for job, deadline in ((first, T0 + 60), (cold, T0)):
        job.refresh_from_db()
        assert (job.stop_reason, job.preempted_for_id) == ("preemption", urgent.pk)
        assert job.preempt_deadline == datetime.fromtimestamp(deadline, UTC)
        assert job.updated_at == at, "stamped at cluster time, as a save would"
    assert sorted(JobEvent.objects.values_list("job_id", flat=True)) == sorted([first.pk, cold.pk])
    assert cycle.report.counts["preemptions"] == 2
    assert cycle.report.errors == [f"preempt {refused.backend_ref}: transient: API timeout"]
