"""The plan's starts (``scheduling.cycle.launch``): launches, refusals, transient errors, backoff."""

from __future__ import annotations

import pytest

from scheduling.backends.base import PermanentBackendError, TransientBackendError
from scheduling.cycle import launch
from scheduling.cycle.backoff import LAUNCH_RETRY, LAUNCH_RETRY_CODE
from scheduling.engine.types import Slot, Start, Swap
from scheduling.models import Allocation, Job, JobEvent
from tests.scheduling.cycle.conftest import T0, counter, make_cycle

pytestmark = pytest.mark.django_db

ALL = tuple(range(8))


def start(job: Job, node: str = "n0", gpus: tuple[int, ...] = ALL, borrowed: bool = False):
    return Start(job_id=job.pk, placement=(Slot(node, gpus),), borrowed=borrowed)


def run_starts(backend, *starts: Start, now: float | None = None, swaps: tuple[Swap, ...] = ()):
    if now is not None:
        backend.now = now
    cycle = make_cycle(backend)
    launch.start_all(cycle, starts, swaps)
    cycle.flush_events()
    return cycle


def kinds(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).order_by("id").values_list("kind", flat=True))


def test_a_start_launches_the_next_run_records_its_gpus_and_the_job_runs(backend, make_job):
    job = make_job(pending_code="PRIORITY", queue_position=3)
    cycle = run_starts(backend, start(job, "n1", borrowed=True))
    assert backend.called("launch") == [(f"portal-{job.pk}-1",)]
    job.refresh_from_db()
    assert (job.state, job.attempt, job.backend_ref) == ("running", 1, f"portal-{job.pk}-1")
    assert job.started_at.timestamp() == T0 and job.borrowed
    assert (job.pending_code, job.queue_position, job.estimated_start) == ("", None, None)
    assert sorted(Allocation.objects.filter(job=job).values_list("node__name", "gpu_index")) == [
        ("n1", g) for g in ALL
    ]
    assert kinds(job) == ["started"]
    assert "n1 (whole node, 8 GPUs) on borrowed idle capacity" in job.events.get().message
    assert cycle.report.counts["starts"] == 1


def test_a_run_restarted_from_a_checkpoint_remembers_the_progress_it_started_from(
    backend, make_job
):
    """What the snapshot predicts the run's end from (``run_start_progress_seconds``), while
    ``progress_seconds`` moves on as it runs."""
    job = make_job(progress_seconds=5400.0, run_start_progress_seconds=1200.0,
                   preemption_count=1)  # fmt: skip
    run_starts(backend, start(job, "n1"))
    job.refresh_from_db()
    assert (job.state, job.run_start_progress_seconds) == ("running", 5400.0)


def test_only_jobs_still_pending_are_started(backend, make_job):
    cancelled = make_job(state="cancelled")
    run_starts(backend, start(cancelled))
    assert backend.called("launch") == []
    assert Job.objects.get(pk=cancelled.pk).state == "cancelled"


def test_the_next_run_of_a_requeued_job_has_the_next_number(backend, make_job):
    job = make_job(attempt=2, progress_seconds=1800)
    run_starts(backend, start(job))
    assert backend.called("launch") == [(f"portal-{job.pk}-3",)]
    assert backend.runs[f"portal-{job.pk}-3"].progress_s == 1800, "it resumes from its progress"


def test_a_permanent_refusal_fails_the_job_with_the_backends_words(backend, make_job):
    job = make_job()
    backend.fail_next("launch", PermanentBackendError("no such partition"))
    cycle = run_starts(backend, start(job))
    job.refresh_from_db()
    assert job.state == "failed"
    assert job.failure_reason == "the cluster refused to start it: no such partition"
    assert job.finished_at.timestamp() == T0
    assert kinds(job) == ["failed"]
    assert not Allocation.objects.filter(job=job).exists()
    assert cycle.report.counts["failed"] == 1
    assert cycle.report.errors == [f"launch portal-{job.pk}-1: no such partition"]


def test_a_transient_error_keeps_the_job_waiting_with_its_streak_stored(backend, make_job):
    job = make_job()
    backend.fail_next("launch", TransientBackendError("API timeout"))
    cycle = run_starts(backend, start(job))
    job.refresh_from_db()
    assert job.state == "pending" and job.attempt == 0
    assert job.launch_attempts == 1 and job.launch_error == "API timeout"
    assert job.launch_first_failed_at.timestamp() == job.launch_last_failed_at.timestamp() == T0
    assert kinds(job) == [LAUNCH_RETRY]
    assert "could not start it right now (API timeout); still waiting" in job.events.get().message
    verdict = cycle.launch_verdicts[job.pk]
    assert verdict.code == LAUNCH_RETRY_CODE and verdict.details["attempts"] == 1
    assert cycle.report.counts["launch_retries"] == 1
    assert not Allocation.objects.filter(job=job).exists()


def test_a_job_backing_off_is_not_launched_and_keeps_its_reason(backend, make_job):
    job = make_job()
    backend.fail_next("launch", TransientBackendError("API timeout"))
    first = run_starts(backend, start(job))
    for now in (T0 + 1, T0 + 9.9):
        cycle = run_starts(backend, start(job), now=now)
        assert cycle.launch_verdicts[job.pk] == first.launch_verdicts[job.pk], "same reason"
        assert cycle.report.counts["launch_backoff"] == 1
    assert len(backend.called("launch")) == 1, "the backend is not asked while backing off"
    assert kinds(job) == [LAUNCH_RETRY]


def test_the_wait_grows_with_the_streak_and_a_start_ends_it(backend, make_job):
    job = make_job()
    for _ in range(3):
        backend.fail_next("launch", TransientBackendError("down"))
    run_starts(backend, start(job), now=T0)
    run_starts(backend, start(job), now=T0 + 10)
    cycle = run_starts(backend, start(job), now=T0 + 20)
    details = cycle.launch_verdicts[job.pk].details
    assert (details["attempts"], details["failing_for_seconds"], details["backoff_seconds"]) == (
        3, 20, 20
    )  # fmt: skip
    run_starts(backend, start(job), now=T0 + 39)
    assert len(backend.called("launch")) == 3
    cycle = run_starts(backend, start(job), now=T0 + 40)
    job.refresh_from_db()
    assert job.state == "running" and cycle.report.counts["starts"] == 1
    assert (job.launch_attempts, job.launch_first_failed_at, job.launch_error) == (0, None, "")
    assert kinds(job) == [LAUNCH_RETRY] * 3 + ["started"]


def test_gpus_the_database_already_gave_away_are_refused_and_the_run_killed(
    backend, make_job, running_job
):
    holder = running_job("n0", (0, 1, 2, 3))
    job = make_job(gpus=4)
    other = make_job(gpus=4)
    cycle = run_starts(backend, start(job, "n0", (2, 3, 4, 5)), start(other, "n1", (0, 1, 2, 3)))
    assert Job.objects.get(pk=job.pk).state == "pending", "not placed"
    assert Job.objects.get(pk=other.pk).state == "running", "one bad row blocks no other"
    assert backend.called("kill") == [(f"portal-{job.pk}-1",)]
    assert f"job {job.pk}: GPUs already allocated; not placed" in cycle.report.errors
    assert Allocation.objects.filter(job=holder).count() == 4
    assert cycle.report.counts["starts"] == 1


def test_a_quota_swap_marks_the_work_it_displaces_borrowed_and_says_why(
    backend, make_job, running_job
):
    displaced = running_job("n0")
    job = make_job(preemptible=False, tier="finetune")
    run_starts(backend, start(job, "n1"), swaps=(Swap(job.pk, (displaced.pk,)),))
    job.refresh_from_db()
    displaced.refresh_from_db()
    assert job.state == "running" and not job.borrowed
    assert "within its quota; 1 preemptible job of its queue or line now runs on" in (
        job.events.get().message
    )
    assert displaced.borrowed and displaced.state == "running"
    assert kinds(displaced) == ["borrowed"]
    assert f"job {job.pk}, which may not be preempted" in displaced.events.get().message


def test_a_swap_whose_start_did_not_launch_displaces_nothing(backend, make_job, running_job):
    displaced = running_job("n0")
    job = make_job(preemptible=False, tier="finetune")
    backend.fail_next("launch", PermanentBackendError("no such partition"))
    run_starts(backend, start(job, "n1"), swaps=(Swap(job.pk, (displaced.pk,)),))
    displaced.refresh_from_db()
    assert not displaced.borrowed and kinds(displaced) == []


def test_launched_swaps_are_counted_for_metrics_after_commit(
    backend, make_job, running_job, django_capture_on_commit_callbacks
):
    from core import telemetry

    telemetry.reset()
    first, second = running_job("n0", gpus=(0, 1, 2, 3)), running_job("n0", gpus=(4, 5, 6, 7))
    job = make_job(preemptible=False, tier="finetune")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run_starts(backend, start(job, "n1"), swaps=(Swap(job.pk, (first.pk, second.pk)),))
    assert counter(telemetry.QUOTA_SWAPS, "llm-experiment") == 0, "nothing before commit"
    for callback in callbacks:
        callback()
    assert counter(telemetry.QUOTA_SWAPS, "llm-experiment") == 1
    assert counter(telemetry.SWAP_DISPLACED, "llm-experiment") == 2


def test_a_displaced_job_no_longer_running_is_left_alone(backend, make_job, running_job):
    """Compare-and-set: the cycle holds the running jobs' rows, so this should not happen;
    if it does, the job that stopped running is neither marked nor told it was displaced."""
    gone, stays = running_job("n0", gpus=(0, 1, 2, 3)), running_job("n0", gpus=(4, 5, 6, 7))
    Job.objects.filter(pk=gone.pk).update(state="cancelled")
    job = make_job(preemptible=False, tier="finetune")
    run_starts(backend, start(job, "n1"), swaps=(Swap(job.pk, (gone.pk, stays.pk)),))
    gone.refresh_from_db()
    stays.refresh_from_db()
    assert (gone.borrowed, kinds(gone)) == (False, [])
    assert (stays.borrowed, kinds(stays)) == (True, ["borrowed"])


def test_a_job_displaced_again_while_still_flagged_gets_no_second_line(
    backend, make_job, running_job
):
    """Its scope had fallen within quota (so it was displaceable again) but the flag had not
    been cleared yet: its page does not change, so its timeline does not either; the swap
    still counts it."""
    again = running_job("n0", borrowed=True)
    job = make_job(preemptible=False, tier="finetune")
    run_starts(backend, start(job, "n1"), swaps=(Swap(job.pk, (again.pk,)),))
    again.refresh_from_db()
    assert (again.borrowed, kinds(again)) == (True, [])
    assert "within its quota; 1 preemptible job of its queue or line now runs on" in (
        job.events.get().message
    )
