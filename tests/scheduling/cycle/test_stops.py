"""Stops (``scheduling.cycle.stops``): moves off leaving nodes, inference yields, preemptions."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from scheduling.backends.base import TransientBackendError
from scheduling.cycle import stops
from scheduling.cycle.context import production_policy
from scheduling.engine.types import GRACEFUL, Preemption
from scheduling.models import Job, JobEvent, Node
from tests.scheduling.cycle.conftest import T0, make_cycle

pytestmark = pytest.mark.django_db


def when(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, tz=UTC)


def request_stops(backend):
    cycle = make_cycle(backend)
    stops.request_stops(cycle)
    cycle.flush_events()
    return cycle


def preempt(backend, *preemptions: Preemption):
    cycle = make_cycle(backend)
    stops.preempt(cycle, preemptions)
    cycle.flush_events()
    return cycle


@pytest.mark.parametrize(("node_state", "cause"), [("draining", "drain"), ("unhealthy", "health")])
def test_jobs_on_a_leaving_node_are_asked_to_checkpoint_and_move(
    backend, running_job, node_state, cause
):
    leaving = running_job("n0")
    staying = running_job("n1")
    Node.objects.filter(name="n0").update(state=node_state)
    cycle = request_stops(backend)
    grace = production_policy().grace_seconds
    assert backend.called("checkpoint_and_stop") == [(leaving.backend_ref, grace)]
    leaving.refresh_from_db()
    assert (leaving.state, leaving.stop_reason) == ("preempting", cause)
    assert leaving.preempt_deadline == when(grace)
    assert JobEvent.objects.get(job=leaving).message == (
        f"asked to checkpoint and move: {stops.MOVE_WORDS[cause]}"
    )
    assert Job.objects.get(pk=staying.pk).state == "running"
    assert cycle.report.counts["moved"] == 1


def test_preemptible_jobs_yield_to_online_inference(backend, running_job):
    yields = running_job("n0", (0, 1, 2, 3))
    protected = running_job("n0", (4, 5, 6, 7), preemptible=False)
    backend.pressure = {"n0": (yields.backend_ref, protected.backend_ref)}
    assert stops.jobs_to_move(make_cycle(backend)) == {yields.pk: "inference"}
    request_stops(backend)
    assert Job.objects.get(pk=yields.pk).stop_reason == "inference"
    assert Job.objects.get(pk=protected.pk).state == "running"


def test_only_as_many_jobs_yield_as_inference_lacks_gpus(backend, running_job):
    """#19: inference short of 2 GPUs stops the one job that loses least, not all three."""
    began = when(-3600)  # all three started an hour ago, and checkpointed since
    old = running_job("n0", (0, 1), started_at=began, last_checkpoint_at=when(-3000))
    fresh = running_job("n0", (2, 3), started_at=began, last_checkpoint_at=when(-60))
    other = running_job("n0", (4, 5), started_at=began, last_checkpoint_at=when(-1800))
    backend.set_node("n0", inference=True, inference_shortfall=2)
    backend.pressure = {"n0": (old.backend_ref, fresh.backend_ref, other.backend_ref)}
    assert stops.jobs_to_move(make_cycle(backend)) == {fresh.pk: "inference"}
    backend.set_node("n0", inference_shortfall=3)
    assert set(stops.jobs_to_move(make_cycle(backend))) == {fresh.pk, other.pk}


def test_of_two_runs_that_lose_as_little_the_younger_yields_to_inference(
    backend, running_job, monkeypatch
):
    """A yield is an eviction in R4, which counts the run's whole GPU time: of two jobs that
    checkpointed a minute or two ago, the one that has run 20 h yields only if the policy
    weighs lost work alone (``victim_given_weight`` 0)."""
    old = running_job("n0", (0, 1), started_at=when(-20 * 3600), last_checkpoint_at=when(-60))
    young = running_job("n0", (2, 3), started_at=when(-3600), last_checkpoint_at=when(-120))
    backend.set_node("n0", inference=True, inference_shortfall=2)
    backend.pressure = {"n0": (old.backend_ref, young.backend_ref)}
    assert stops.jobs_to_move(make_cycle(backend)) == {young.pk: "inference"}
    by_loss = dataclasses.replace(production_policy(), victim_given_weight=0.0)
    monkeypatch.setattr(stops, "production_policy", lambda: by_loss)
    assert stops.jobs_to_move(make_cycle(backend)) == {old.pk: "inference"}


def test_gpus_already_leaving_count_before_a_new_job_yields(backend, running_job):
    leaving = running_job("n0", (0, 1), state="preempting", stop_reason="inference")
    staying = running_job("n0", (2, 3))
    backend.set_node("n0", inference=True, inference_shortfall=2)
    backend.pressure = {"n0": (leaving.backend_ref, staying.backend_ref)}
    assert stops.jobs_to_move(make_cycle(backend)) == {}
    backend.set_node("n0", inference_shortfall=3)
    assert stops.jobs_to_move(make_cycle(backend)) == {staying.pk: "inference"}


def test_a_leaving_node_outranks_inference_as_the_reason(backend, running_job):
    job = running_job("n0")
    Node.objects.filter(name="n0").update(state="draining")
    backend.pressure = {"n0": (job.backend_ref,)}
    assert stops.jobs_to_move(make_cycle(backend)) == {job.pk: "drain"}


def test_a_stop_the_backend_refused_leaves_the_job_running_for_next_cycle(backend, running_job):
    job = running_job("n0")
    Node.objects.filter(name="n0").update(state="draining")
    backend.fail_next("checkpoint_and_stop", TransientBackendError("API timeout"))
    cycle = request_stops(backend)
    job.refresh_from_db()
    assert (job.state, job.stop_reason, job.preempt_deadline) == ("running", "", None)
    assert cycle.report.errors == [f"stop {job.backend_ref}: transient: API timeout"]
    assert not JobEvent.objects.exists()


def test_a_job_already_moving_is_not_asked_again(backend, running_job):
    running_job("n0", state="preempting", stop_reason="drain")
    Node.objects.filter(name="n0").update(state="draining")
    request_stops(backend)
    assert backend.calls == []


def test_a_graceful_preemption_asks_for_a_checkpoint_with_the_grace_left(backend, running_job,
                                                                         make_job):  # fmt: skip
    victim = running_job("n0")
    urgent = make_job()
    cycle = preempt(backend, Preemption(victim.pk, urgent.pk, GRACEFUL, T0 + 120))
    assert backend.called("checkpoint_and_stop") == [(victim.backend_ref, 120)]
    victim.refresh_from_db()
    assert (victim.state, victim.stop_reason, victim.preempted_for_id) == (
        "preempting", "preemption", urgent.pk
    )  # fmt: skip
    assert victim.preempt_deadline == when(120)
    assert JobEvent.objects.get(job=victim).message == (
        f"preempted gracefully: checkpoint, then stop to make room for job #{urgent.pk}"
    )
    assert cycle.report.counts["preemptions"] == 1


def test_a_cold_preemption_kills_the_run(backend, running_job, make_job):
    victim = running_job("n0")
    urgent = make_job()
    preempt(backend, Preemption(victim.pk, urgent.pk, "cold", T0))
    assert backend.called("kill") == [(victim.backend_ref,)]
    assert backend.called("checkpoint_and_stop") == []
    assert Job.objects.get(pk=victim.pk).state == "preempting"
    assert "preempted cold (killed)" in JobEvent.objects.get(job=victim).message


def test_a_victim_that_moved_on_since_the_plan_is_left_alone(backend, running_job, make_job):
    victim = running_job("n0", state="preempting")
    gone = make_job(state="succeeded")
    urgent = make_job()
    cycle = preempt(backend, Preemption(victim.pk, urgent.pk, GRACEFUL, T0 + 60),
                    Preemption(gone.pk, urgent.pk, GRACEFUL, T0 + 60),
                    Preemption(999_999, urgent.pk, GRACEFUL, T0 + 60))  # fmt: skip
    assert backend.calls == [] and cycle.report.counts["preemptions"] == 0


def test_a_preemption_the_backend_refused_changes_nothing(backend, running_job, make_job):
    victim = running_job("n0")
    backend.fail_next("checkpoint_and_stop", TransientBackendError("busy"))
    cycle = preempt(backend, Preemption(victim.pk, make_job().pk, GRACEFUL, T0 + 60))
    assert Job.objects.get(pk=victim.pk).state == "running"
    assert cycle.report.counts["preemptions"] == 0 and len(cycle.report.errors) == 1
