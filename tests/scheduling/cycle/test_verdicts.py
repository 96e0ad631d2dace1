"""Verdicts (``scheduling.cycle.verdicts``): written where they changed, heard when new."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduling.cycle import verdicts
from scheduling.cycle.backoff import Streak
from scheduling.engine import types as et
from scheduling.models import Job
from tests.scheduling.cycle.conftest import T0, make_cycle

pytestmark = pytest.mark.django_db


def verdict(code: str = "PRIORITY", position: int | None = 2, **changes) -> et.Verdict:
    values = {"code": code, "message": f"{code} in words", "details": {"ahead_jobs": 1},
              "remedy": "wait", "estimated_start": T0 + 600, "position": position}  # fmt: skip
    return et.Verdict(**{**values, **changes})


def plan(**verdicts_by_job: et.Verdict) -> et.Plan:
    return et.Plan(starts=(), preemptions=(), reservations=(),
                   verdicts={int(k[1:]): v for k, v in verdicts_by_job.items()})  # fmt: skip


def rows(*jobs: Job) -> dict[int, dict]:
    """The snapshot's rows of these jobs, as the cycle read them before planning."""
    fields = ["state", *verdicts.VERDICT_FIELDS]
    return {
        r["id"]: r for r in Job.objects.filter(pk__in=[j.pk for j in jobs]).values("id", *fields)
    }


def write(backend, the_plan: et.Plan, the_rows: dict[int, dict], launch: dict | None = None):
    cycle = make_cycle(backend)
    cycle.launch_verdicts.update(launch or {})
    verdicts.write_verdicts(cycle, the_plan, the_rows)
    return cycle


def test_a_new_verdict_is_stored_and_its_watchers_told(backend, make_job, sent):
    job = make_job()
    write(backend, plan(**{f"j{job.pk}": verdict()}), rows(job))
    job.refresh_from_db()
    assert (job.pending_code, job.pending_message, job.pending_details) == (
        "PRIORITY", "PRIORITY in words", {"ahead_jobs": 1}
    )  # fmt: skip
    assert (job.pending_remedy, job.queue_position) == ("wait", 2)
    assert job.estimated_start == datetime.fromtimestamp(T0 + 600, tz=UTC)
    assert sent[0] == (f"job.{job.pk}", "job.updated",
                       {"id": job.pk, "state": "pending", "pending_code": "PRIORITY"})  # fmt: skip


def test_an_unchanged_verdict_is_neither_written_nor_told(
    backend, make_job, sent, django_assert_num_queries
):
    job = make_job()
    write(backend, plan(**{f"j{job.pk}": verdict()}), rows(job))
    snapshot = rows(job)
    sent.clear()
    with django_assert_num_queries(0):
        write(backend, plan(**{f"j{job.pk}": verdict()}), snapshot)
    assert [kind for _, kind, _ in sent] == ["pending.updated"]


def test_a_new_position_is_written_but_the_same_reason_is_not_told_again(backend, make_job, sent):
    job = make_job()
    write(backend, plan(**{f"j{job.pk}": verdict(position=5)}), rows(job))
    sent.clear()
    write(backend, plan(**{f"j{job.pk}": verdict(position=4)}), rows(job))
    assert Job.objects.get(pk=job.pk).queue_position == 4
    assert [kind for _, kind, _ in sent] == ["pending.updated"]


def test_a_job_that_started_meanwhile_keeps_no_verdict(backend, make_job, sent):
    job = make_job()
    snapshot = rows(job)
    Job.objects.filter(pk=job.pk).update(state="running")  # started by another writer
    write(backend, plan(**{f"j{job.pk}": verdict()}), snapshot)
    assert Job.objects.get(pk=job.pk).pending_code == "", "the write is guarded by its state"


def test_verdicts_of_jobs_not_waiting_in_the_snapshot_are_skipped(backend, make_job, sent):
    running = make_job(state="running")
    write(backend, plan(**{f"j{running.pk}": verdict(), "j999999": verdict()}), rows(running))
    assert Job.objects.get(pk=running.pk).pending_code == ""
    assert [kind for _, kind, _ in sent] == ["pending.updated"]


def test_a_launch_retry_reason_is_written_with_the_engines(backend, make_job, sent):
    waiting, retrying = make_job(), make_job()
    streak = Streak(attempts=1, first=T0, last=T0, error="API timeout")
    cycle = write(backend, plan(**{f"j{waiting.pk}": verdict()}), rows(waiting, retrying),
                  launch={retrying.pk: streak.verdict()})  # fmt: skip
    assert Job.objects.get(pk=retrying.pk).pending_code == "LAUNCH_RETRY"
    assert Job.objects.get(pk=retrying.pk).pending_details["error"] == "API timeout"
    counts = verdicts.counts_by_code(cycle, plan(**{f"j{waiting.pk}": verdict()}))
    assert counts["PRIORITY"] == 1 and counts["LAUNCH_RETRY"] == 1
    assert sent[-1] == ("pending", "pending.updated", {"by_reason": counts})


def test_a_start_skipped_for_its_node_is_counted_under_its_own_code(backend, make_job, sent):
    """Not as a launch retry: the pending page counts it with the nodes out of service."""
    from scheduling.cycle.launch import out_of_service

    job = make_job()
    cycle = write(backend, plan(), rows(job), launch={job.pk: out_of_service({"n0": "cordoned"})})
    assert Job.objects.get(pk=job.pk).pending_code == "NODES_UNAVAILABLE"
    counts = verdicts.counts_by_code(cycle, plan())
    assert counts["NODES_UNAVAILABLE"] == 1 and counts["LAUNCH_RETRY"] == 0


def test_the_counts_list_every_reason_code_even_at_zero(backend):
    counts = verdicts.counts_by_code(make_cycle(backend), plan())
    assert set(et.VERDICT_CODES) | {"LAUNCH_RETRY", "DEPENDENCY", "HELD", "ARRAY_LIMIT"} == set(
        counts
    )
    assert set(verdicts.PENDING_CODES) == set(counts)
    assert set(counts.values()) == {0}
