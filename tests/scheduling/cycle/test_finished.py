"""Ended runs (``scheduling.cycle.finished``): what each end means for its job."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduling.backends.base import FAILED, STOPPED, SUCCEEDED
from scheduling.cycle import finished
from scheduling.models import Allocation, Eviction, Job, JobEvent, Node
from tests.scheduling.cycle.conftest import T0, make_cycle

pytestmark = pytest.mark.django_db


def when(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, tz=UTC)


def end(backend, *runs: tuple):
    """Settle the given ended runs ``(job, state, progress, reason[, ended_at])`` as a cycle
    at T0 does; the jobs as they are written."""
    cycle = make_cycle(backend)
    ended = [(Job.objects.get(pk=j.pk), *rest, *[None] * (4 - len(rest))) for j, *rest in runs]
    finished.finish_runs(cycle, ended)
    cycle.flush_events()
    finished.remember_models(cycle)  # as the cycle does last
    return cycle, [Job.objects.get(pk=j.pk) for j, *_ in runs]


def last_event(job: Job) -> JobEvent:
    return JobEvent.objects.filter(job=job).latest("id")


def test_a_run_that_succeeded_finishes_its_job_and_frees_its_gpus(backend, running_job):
    job = running_job(borrowed=True)
    cycle, [done] = end(backend, (job, SUCCEEDED, 3600.0, "exit 0"))
    assert (done.state, done.finished_at, done.progress_seconds) == ("succeeded", when(0), 3600)
    assert done.updated_at == when(0)
    assert not Allocation.objects.filter(job=job).exists()
    assert last_event(job).kind == "succeeded"
    assert cycle.report.counts["finished"] == 1


def test_the_model_that_finished_leads_its_nodes_recent_models(backend, running_job):
    Node.objects.filter(name="n0").update(recent_models=["bert", "llama", "gpt"])
    first = running_job("n0", (0, 1, 2, 3), model_name="llama")
    second = running_job("n0", (4, 5, 6, 7), model_name="t5")
    end(backend, (first, SUCCEEDED, 60.0, ""), (second, SUCCEEDED, 60.0, ""))
    assert Node.objects.get(name="n0").recent_models == ["t5", "llama", "bert"]
    assert Node.objects.get(name="n1").recent_models == []


def test_the_models_are_kept_on_the_cycle_until_it_writes_them_last(backend, running_job):
    """The update locks the node rows until the commit (a cordon of them waits): the cycle
    plans with ``Cycle.recent_models`` and writes them at its end (``remember_models``)."""
    job = running_job("n0", (0, 1, 2, 3), model_name="llama")
    cycle = make_cycle(backend)
    finished.finish_runs(cycle, [(Job.objects.get(pk=job.pk), SUCCEEDED, 60.0, "", None)])
    assert cycle.recent_models == {"n0": ["llama"]}
    assert Node.objects.get(name="n0").recent_models == []
    finished.remember_models(cycle)
    assert Node.objects.get(name="n0").recent_models == ["llama"]


def test_a_failed_run_is_not_remembered_for_affinity(backend, running_job):
    job = running_job(model_name="llama")
    end(backend, (job, FAILED, 60.0, "OOM"))
    assert Node.objects.get(name="n0").recent_models == []


def test_a_failed_run_with_retries_left_goes_back_to_the_queue(backend, running_job):
    job = running_job(borrowed=True, retry_count=1, max_retries=3, progress_seconds=900)
    cycle, [retried] = end(backend, (job, FAILED, 600.0, "NCCL timeout"))
    assert (retried.state, retried.retry_count, retried.borrowed) == ("pending", 2, False)
    assert retried.progress_seconds == 600, "back to its last checkpoint"
    assert retried.finished_at is None
    assert last_event(job).message == (
        "run failed (NCCL timeout); automatic retry 2 of 3 resumes from the last checkpoint "
        "at 10 min of progress"
    )
    assert cycle.report.counts["retried"] == 1


def test_a_retry_with_no_progress_kept_does_not_claim_a_checkpoint(backend, running_job):
    """Page walk: a job that never checkpointed read "automatic retry 1 of 3 resumes from the
    last checkpoint at 0 min of progress" beside "Last checkpoint: —"."""
    job = running_job()
    end(backend, (job, FAILED, 0.0, "random"))
    assert last_event(job).message == (
        "run failed (random); automatic retry 1 of 3 starts again from the beginning "
        "(no progress was kept)"
    )


def test_a_failed_run_without_retries_left_fails_its_job(backend, running_job):
    job = running_job(retry_count=2, max_retries=2)
    cycle, [failed] = end(backend, (job, FAILED, 0.0, ""))
    assert (failed.state, failed.finished_at) == ("failed", when(0))
    assert failed.failure_reason == "the run stopped; no retries left (2 used)"
    assert last_event(job).kind == "failed"
    assert cycle.report.counts["failed"] == 1


def test_a_run_stopped_without_being_asked_counts_as_a_failure(backend, running_job):
    job = running_job()
    _, [retried] = end(backend, (job, STOPPED, 0.0, "killed by the OOM killer"))
    assert (retried.state, retried.retry_count, retried.preemption_count) == ("pending", 1, 0)


@pytest.mark.parametrize(("cause", "evicted"), [("preemption", True), ("inference", True),
                                                 ("drain", False), ("health", False)])  # fmt: skip
def test_a_requested_stop_requeues_the_job_with_its_progress(backend, running_job, make_job,
                                                            cause, evicted):  # fmt: skip
    urgent = make_job()
    job = running_job(
        gpus=(0, 1, 2, 3), state="preempting", stop_reason=cause, preempted_for=urgent,
        preempt_deadline=when(60), borrowed=True, progress_seconds=1500,
        started_at=when(-1000),
    )  # fmt: skip
    cycle, [requeued] = end(backend, (job, STOPPED, 1200.0, "checkpoint"))
    assert requeued.state == "pending" and requeued.progress_seconds == 1200
    assert (requeued.stop_reason, requeued.preempt_deadline, requeued.preempted_for) == (
        "", None, None
    )  # fmt: skip
    assert requeued.borrowed is False and requeued.retry_count == 0
    assert requeued.preemption_count == (1 if evicted else 0)
    message = last_event(job).message
    assert message.startswith("stopped after its checkpoint and back in the queue with 20 min")
    assert ("; preempted 1 time" in message) == evicted and "(s)" not in message
    assert cycle.report.counts["requeued"] == 1
    if evicted:
        eviction = Eviction.objects.get(job=job)
        assert (eviction.reason, eviction.gpus, eviction.at) == (cause, 4, when(0))
        assert eviction.gpu_seconds == 4 * 1000, "GPU time the run had been given"
        assert eviction.lost_gpu_seconds == 4 * 300, "the part its checkpoint did not save"
    else:
        assert not Eviction.objects.exists()


def test_the_progress_a_message_keeps_reads_as_the_jobs_page_does(backend, running_job):
    """Page walk: a job requeued with 1,290 s of progress read "22 min of progress kept" on
    its timeline and "Progress kept: 21 min" above it (the page counts whole minutes)."""
    from scheduling.views import duration_text

    job = running_job(state="preempting", stop_reason="preemption")
    _, [requeued] = end(backend, (job, STOPPED, 1290.0, "checkpoint"))
    assert duration_text(requeued.progress_seconds) == "21 min"
    assert "back in the queue with 21 min of progress kept" in last_event(job).message
    retried = running_job("n1", progress_seconds=1790.0)
    end(backend, (retried, FAILED, 1790.0, "NCCL timeout"))
    assert last_event(retried).message.endswith("at 29 min of progress")


def test_a_stop_that_missed_its_checkpoint_says_why(backend, running_job):
    job = running_job(state="preempting", stop_reason="preemption")
    end(backend, (job, STOPPED, 0.0, "deadline"))
    assert "stopped (deadline) and back in the queue with 0 min" in last_event(job).message


def test_a_job_that_finished_while_checkpointing_succeeds(backend, running_job):
    job = running_job(state="preempting", stop_reason="preemption")
    _, [done] = end(backend, (job, SUCCEEDED, 60.0, ""))
    assert done.state == "succeeded" and not Eviction.objects.exists()


def test_many_ended_runs_are_settled_together(backend, running_job):
    a = running_job("n0", (0, 1))
    b = running_job("n0", (2, 3), retry_count=3, max_retries=3)
    c = running_job("n1", (0, 1, 2, 3), state="preempting", stop_reason="preemption")
    cycle, jobs = end(backend, (a, SUCCEEDED, 10.0, ""), (b, FAILED, 0.0, "x"),
                      (c, STOPPED, 0.0, "checkpoint"))  # fmt: skip
    assert [j.state for j in jobs] == ["succeeded", "failed", "pending"]
    assert not Allocation.objects.exists()
    assert dict(cycle.report.counts) == {"finished": 1, "failed": 1, "requeued": 1}


@pytest.mark.parametrize(
    ("state", "ended_at", "stamped", "kind"),
    [
        (SUCCEEDED, T0 - 170, when(-170), "succeeded"),  # seen a period after it ended
        (SUCCEEDED, T0 - 3600, when(-600), "succeeded"),  # never before the run started
        (SUCCEEDED, T0 + 30, when(0), "succeeded"),  # nor after the cycle that saw it
        (SUCCEEDED, None, when(0), "succeeded"),  # a backend that does not say: the cycle
        (FAILED, T0 - 170, when(-170), "retried"),
    ],
)  # fmt: skip
def test_a_job_ends_when_its_run_ended_not_when_a_cycle_saw_it(
    backend, running_job, state, ended_at, stamped, kind
):
    """Page walk: "Started 00:43, Finished 01:25, Progress kept 40 min" for a 40-minute
    run the demo's cycle saw ended 2 cluster minutes late."""
    job = running_job()  # started at T0 - 600
    _, [done] = end(backend, (job, state, 430.0, "", ended_at))
    line = last_event(job)
    assert (line.kind, line.at) == (kind, stamped)
    if state == SUCCEEDED:
        assert done.finished_at == stamped
