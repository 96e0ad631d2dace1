"""The loop writes back the borrowed flags the plan's accounting settles (``Plan.marks``):
the job page and the API say "On borrowed capacity" exactly when the scheduler counts a
run beyond its quota."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduling.cycle import run, run_cycle
from scheduling.cycle.marks import write_marks
from scheduling.engine.types import Mark
from scheduling.models import Job
from tests.scheduling.cycle.conftest import T0, make_cycle


@pytest.fixture
def on_fake(monkeypatch, backend):
    monkeypatch.setattr(run, "get_backend", lambda wall_now=None: backend)
    return backend


def kinds(job: Job) -> list[str]:
    return list(job.events.order_by("pk").values_list("kind", flat=True))


def test_a_run_that_started_borrowed_is_within_quota_once_its_queue_is(
    on_fake, running_job, cluster
):
    """The queue's quota (16) covers its one 8-GPU run, which started borrowed when the
    queue was full: the cycle clears the flag and says so; the next cycle writes nothing."""
    cluster["queue"].quota_gpus = 16
    cluster["queue"].save()
    job = running_job("n0", borrowed=True)
    run_cycle()
    job.refresh_from_db()
    assert (job.borrowed, kinds(job)) == (False, ["within_quota"])
    assert "no longer on borrowed capacity" in job.events.get().message
    run_cycle()
    assert kinds(job) == ["within_quota"]


def test_a_quota_cut_below_the_use_flags_the_newest_run(on_fake, running_job, cluster):
    older = running_job("n0", started_at=datetime.fromtimestamp(T0 - 7200, tz=UTC))
    newer = running_job("n1")
    cluster["queue"].quota_gpus = 8
    cluster["queue"].save()
    run_cycle()
    older.refresh_from_db()
    newer.refresh_from_db()
    assert (older.borrowed, kinds(older)) == (False, [])
    assert (newer.borrowed, kinds(newer)) == (True, ["borrowed"])
    assert "among the first reclaimed" in newer.events.get().message


def test_a_job_no_longer_running_is_left_alone(backend, running_job):
    """Compare-and-set on the running state (the cycle holds the running jobs' rows, so
    this should not happen): a job that stopped is neither flagged nor told."""
    gone, stays = running_job("n0", borrowed=True), running_job("n1", borrowed=True)
    Job.objects.filter(pk=gone.pk).update(state="cancelled")
    cycle = make_cycle(backend)
    write_marks(cycle, (Mark(gone.pk, False), Mark(stays.pk, False)))
    cycle.flush_events()
    gone.refresh_from_db()
    stays.refresh_from_db()
    assert (gone.borrowed, kinds(gone)) == (True, [])
    assert (stays.borrowed, kinds(stays)) == (False, ["within_quota"])
