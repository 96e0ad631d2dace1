"""Launch backoff as data on the job (``scheduling.cycle.backoff``) and the migration that put it there."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta

import pytest

from scheduling.cycle import backoff as b
from scheduling.models import Job, JobEvent
from tests.scheduling.cycle.conftest import T0


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, tz=UTC)


@pytest.mark.parametrize(
    ("age", "wait"),
    [(0, 10), (5, 10), (10, 10), (20, 20), (40, 40), (299, 299), (300, 300), (10_000, 300)],
)
def test_the_wait_is_the_streaks_age_within_ten_seconds_and_five_minutes(age, wait):
    assert b.launch_backoff_s(age) == wait


def test_a_job_without_failures_has_no_streak():
    assert b.Streak.of(Job()) is None


def test_failures_in_a_row_grow_the_streak_on_the_job():
    job = Job()
    first = b.record_failure(job, T0, "API timeout")
    assert (first.attempts, first.first, first.last, first.wait_s) == (1, T0, T0, 10)
    assert (job.launch_attempts, job.launch_first_failed_at, job.launch_last_failed_at) == (
        1, at(0), at(0)
    )  # fmt: skip
    assert job.launch_error == "API timeout"
    second = b.record_failure(job, T0 + 10, "API timeout again")
    third = b.record_failure(job, T0 + 20, "still down")
    assert (second.attempts, second.wait_s) == (2, 10)
    assert (third.attempts, third.first, third.last, third.wait_s) == (3, T0, T0 + 20, 20)
    assert job.launch_first_failed_at == at(0), "the streak's start stays"
    assert job.launch_error == "still down", "the latest error"
    assert b.Streak.of(job) == third, "what the job holds reads back as the same streak"


def test_a_streak_is_due_at_its_next_attempt_not_before():
    streak = b.Streak(attempts=3, first=T0, last=T0 + 20, error="x")
    assert streak.next_attempt == T0 + 40
    assert not streak.due(T0 + 20)
    assert not streak.due(T0 + 39.9)
    assert streak.due(T0 + 40)
    assert streak.due(T0 + 40 - 0.0005), "stored times are microseconds: a hair early is on time"


def test_failure_times_are_kept_to_the_microsecond_as_the_database_keeps_them():
    job = Job()
    streak = b.record_failure(job, T0 + 0.1234567, "x")
    assert streak.last == job.launch_last_failed_at.timestamp()
    assert streak.last == pytest.approx(T0 + 0.123457, abs=1e-7)


def test_clearing_ends_the_streak():
    job = Job()
    b.record_failure(job, T0, "x")
    b.clear(job)
    assert b.Streak.of(job) is None
    assert (job.launch_first_failed_at, job.launch_last_failed_at, job.launch_error) == (
        None, None, ""
    )  # fmt: skip


def test_the_verdict_says_when_and_why():
    verdict = b.Streak(attempts=2, first=T0, last=T0 + 10, error="simulated outage").verdict()
    assert verdict.code == b.LAUNCH_RETRY_CODE == "LAUNCH_RETRY"
    assert verdict.details == {
        "attempts": 2, "failing_for_seconds": 10, "backoff_seconds": 10,
        "next_attempt_at": at(20).isoformat(), "error": "simulated outage",
    }  # fmt: skip
    assert verdict.estimated_start == T0 + 20
    assert "could not start it: simulated outage" in verdict.message
    assert "2025-03-01 12:00:20 UTC, 10 s after the last attempt" in verdict.message
    assert "(2 failed attempt(s) in a row)" in verdict.message
    assert verdict.remedy == b.LAUNCH_RETRY_REMEDY


# -- the migration that moved the streak from the timeline onto the job -----------------------


@pytest.fixture
def from_timelines():
    module = importlib.import_module("scheduling.migrations.0003_job_launch_backoff")
    from django.apps import apps

    return lambda: module.streaks_from_timelines(apps, None)


def timeline(job: Job, *lines: tuple[str, str], start: float = T0) -> None:
    for i, (kind, message) in enumerate(lines):
        JobEvent.objects.create(job=job, kind=kind, message=message, at=at(start - T0 + 10 * i))


def retry_line(error: str, n: int) -> tuple[str, str]:
    return (b.LAUNCH_RETRY, f"the cluster could not start it right now ({error}); still "
            f"waiting, next attempt in 10 s or later (transient failure {n})")  # fmt: skip


def test_the_migration_carries_a_waiting_jobs_streak_over(make_job, from_timelines):
    waiting = make_job()
    timeline(waiting, ("submitted", "by x"), retry_line("outage (a)", 1), retry_line("b", 2),
             retry_line("outage; c", 3))  # fmt: skip
    from_timelines()
    waiting.refresh_from_db()
    assert waiting.launch_attempts == 3
    assert (waiting.launch_first_failed_at, waiting.launch_last_failed_at) == (at(10), at(30))
    assert waiting.launch_error == "outage; c", "the error, not the event's words"


def test_the_migration_leaves_ended_streaks_and_other_jobs_alone(make_job, from_timelines):
    started = make_job()
    timeline(started, retry_line("x", 1), ("started", "started on n0[0]"))
    requeued = make_job()
    timeline(requeued, retry_line("x", 1), ("started", "on n0"), ("requeued", "back"))
    running = make_job(state="running")
    timeline(running, retry_line("x", 1))
    quiet = make_job()
    timeline(quiet, ("submitted", "by x"))
    from_timelines()
    assert set(Job.objects.values_list("launch_attempts", flat=True)) == {0}


def test_the_migration_counts_only_the_latest_run_of_failures(make_job, from_timelines):
    job = make_job()
    timeline(job, retry_line("old", 1), ("started", "on n0"), ("retried", "run failed"),
             retry_line("new", 1), retry_line("newer", 2))  # fmt: skip
    from_timelines()
    job.refresh_from_db()
    assert job.launch_attempts == 2 and job.launch_error == "newer"
    assert job.launch_last_failed_at - job.launch_first_failed_at == timedelta(seconds=10)
