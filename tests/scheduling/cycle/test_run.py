"""The orchestrator (``scheduling.cycle.run``): the steps in order, the summary, the events."""

from __future__ import annotations

import pytest

from monitoring.models import Alert
from scheduling.backends.base import TransientBackendError
from scheduling.cycle import cycle_payload, run, run_cycle
from scheduling.models import Job, SchedulingCycle

pytestmark = pytest.mark.django_db


@pytest.fixture
def on_fake(monkeypatch, backend):
    """``run_cycle`` opens the fake backend."""
    monkeypatch.setattr(run, "get_backend", lambda wall_now=None: backend)
    return backend


def test_a_cycle_starts_waiting_work_and_writes_its_summary(on_fake, make_job, sent):
    job = make_job(gpus=8)
    record = run_cycle()
    assert Job.objects.get(pk=job.pk).state == "running"
    assert on_fake.called("launch") == [(f"portal-{job.pk}-1",)]
    assert on_fake.calls[-1] == ("close",), "the backend is saved inside the transaction"
    assert record == SchedulingCycle.objects.get()
    assert (record.kind, record.starts, record.pending, record.errors) == ("cycle", 1, 0, [])
    assert record.cluster_time.timestamp() == on_fake.now
    assert sent[-2:] == [("cycles", "cycle.completed", cycle_payload(record)),
                         ("queues", "queues.updated", {"cycle": record.pk})]  # fmt: skip
    assert (f"job.{job.pk}", "job.updated") in {(t, k) for t, k, _ in sent}


def test_a_job_that_cannot_fit_waits_with_its_reason_counted(on_fake, make_job, sent):
    make_job(gpus=8)
    make_job(gpus=8)
    waiting = make_job(gpus=8)
    record = run_cycle()
    assert record.starts == 2
    assert Job.objects.get(pk=waiting.pk).pending_code != ""
    assert record.pending == 1 and sum(record.pending_by_reason.values()) == 1
    assert ("pending", "pending.updated") in {(t, k) for t, k, _ in sent}


def test_a_sweep_reconciles_but_plans_nothing(on_fake, make_job):
    job = make_job()
    on_fake.set_node("n0", residual_gpus=(1,))
    record = run_cycle(kind="sweep")
    assert record.kind == "sweep" and record.starts == 0
    assert on_fake.called("clean_residual") == [("n0",)]
    assert on_fake.called("launch") == []
    assert Job.objects.get(pk=job.pk).pending_code == "", "no verdict without a plan"


def test_failed_backend_calls_raise_one_backend_error_alert(on_fake, make_job):
    make_job()
    on_fake.fail_next("launch", TransientBackendError("API timeout"))
    record = run_cycle()
    assert record.errors == [f"launch portal-{Job.objects.get().pk}-1: API timeout"]
    alert = Alert.objects.get(kind="backend_error", subject="fake")
    assert "1 call(s) to the fake backend failed" in alert.message
    assert "API timeout" in alert.message


def test_an_iteration_is_skipped_when_another_holds_the_cluster(on_fake, monkeypatch, make_job):
    monkeypatch.setattr(run, "try_cluster_lock", lambda: False)
    make_job()
    assert run_cycle() is None
    assert on_fake.calls == [] and not SchedulingCycle.objects.exists()


def test_a_plan_that_breaks_an_invariant_is_not_applied(on_fake, monkeypatch, make_job, caplog):
    monkeypatch.setattr(run.engine, "check_plan", lambda snapshot, plan: ["GPU n0[0] twice"])
    job = make_job()
    record = run_cycle()
    assert on_fake.called("launch") == []
    assert Job.objects.get(pk=job.pk).state == "pending"
    assert record.violations == ["GPU n0[0] twice"] and record.starts == 0
    assert "plan violates invariants, not applied" in caplog.text


def test_a_cancelled_run_killed_this_cycle_frees_its_gpus_in_the_same_cycle(on_fake, running_job):
    job = running_job()
    Job.objects.filter(pk=job.pk).update(state="cancelled")
    run_cycle(kind="sweep")
    assert not job.allocations.exists(), "the second observation sees the run gone"


def test_a_job_that_may_not_borrow_swaps_quota_with_its_lines_preemptible_work(
    on_fake, make_job, cluster
):
    """Quota swap (#19) through the whole loop: line llm (quota 8) is full of its own
    experiment; its non-preemptible fine-tuning job starts on the idle node anyway, the
    experiment runs on as the borrowed part, nothing is preempted, and the next cycle
    leaves both alone."""
    from quotas.models import Queue, Tier
    from scheduling.models import JobEvent

    line = cluster["queue"].business_line
    line.quota_gpus = 8
    line.save(update_fields=["quota_gpus"])
    finetune = Queue.objects.create(name="llm-finetune", business_line=line,
                                    nature=Queue.Nature.FINE_TUNING, tier=Tier.FINETUNE)  # fmt: skip
    experiment = make_job(gpus=8)
    run_cycle()
    job = make_job(gpus=8, queue=finetune, tier=Tier.FINETUNE, preemptible=False)
    on_fake.now += 60
    record = run_cycle()
    job.refresh_from_db()
    experiment.refresh_from_db()
    assert (record.starts, record.preemptions, record.violations) == (1, 0, [])
    assert job.state == "running" and not job.borrowed
    assert experiment.state == "running" and experiment.borrowed
    assert JobEvent.objects.filter(job=experiment, kind="borrowed").count() == 1
    on_fake.now += 60
    again = run_cycle()
    assert (again.starts, again.preemptions, again.violations) == (0, 0, [])
    assert on_fake.called("checkpoint_and_stop") == [] and on_fake.called("kill") == []
