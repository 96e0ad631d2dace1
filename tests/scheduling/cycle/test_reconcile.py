"""Observe and reconcile (``scheduling.cycle.reconcile``): the backend's truth wins."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from core.models import AuditRecord
from monitoring.models import Alert
from scheduling.backends.base import RUNNING, STOPPING, ObservedJob, TransientBackendError
from scheduling.cycle import reconcile
from scheduling.engine.types import Slot
from scheduling.models import Allocation, Job, JobEvent, Node
from tests.scheduling.cycle.conftest import T0, make_cycle, observed_node

pytestmark = pytest.mark.django_db


def sync_nodes(backend):
    cycle = make_cycle(backend)
    reconcile.sync_nodes(cycle)
    return cycle


def sync_jobs(backend):
    cycle = make_cycle(backend)
    reconcile.sync_jobs(cycle)
    cycle.flush_events()
    return cycle


def node(name: str = "n0") -> Node:
    return Node.objects.get(name=name)


def when(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, tz=UTC)


# -- nodes -------------------------------------------------------------------------------------


def test_a_node_the_backend_reports_first_is_created_and_reported_as_drift(backend, sent):
    backend.nodes["n9"] = observed_node("n9", gpus=4, rack="r9", inference=True)
    cycle = sync_nodes(backend)
    created = node("n9")
    assert (created.rack, created.gpus_total, created.inference, created.state) == (
        "r9", 4, True, "ready"
    )  # fmt: skip
    assert cycle.report.drift == ["node n9 discovered on the backend"]
    assert sent == [], "nothing changed on a known node"
    # the cluster grew then (the usage report counts its GPUs from then); the nodes the
    # portal was set up with have no such time
    assert created.joined_at == cycle.stamp() and node().joined_at is None


def test_a_healthy_node_nothing_changed_on_is_not_written(backend, sent):
    before = node().updated_at
    cycle = sync_nodes(backend)
    assert node().updated_at == before
    assert (cycle.report.drift, cycle.report.errors, backend.calls, sent) == ([], [], [], [])


def test_a_sick_ready_node_is_isolated_cordoned_audited_and_alerted(backend, sent):
    backend.set_node("n0", health="gpu_failure", health_detail="GPU 3 fell off the bus")
    cycle = sync_nodes(backend)
    isolated = node()
    assert isolated.state == "unhealthy" and isolated.health == "gpu_failure"
    assert isolated.state_reason == "isolated automatically: GPU 3 fell off the bus"
    assert backend.called("cordon") == [("n0", isolated.state_reason)]
    audit = AuditRecord.objects.get(action="node.isolate")
    assert (audit.before, audit.after, audit.actor_name) == (
        {"state": "ready"}, {"state": "unhealthy"}, "system"
    )  # fmt: skip
    alert = Alert.objects.get(kind="node_unhealthy", subject="n0")
    assert alert.severity == "critical" and "isolated" in alert.message
    assert cycle.report.counts["isolated"] == 1
    assert sent == [("nodes", "node.updated", {
        "name": "n0", "state": "unhealthy", "state_reason": isolated.state_reason,
        "health": "gpu_failure", "residual_gpus": 0,
    })]  # fmt: skip


def test_a_node_the_cycle_changes_says_it_changed_then(backend):
    """Page walk: a node the cycle isolated read "Last change: 19:57:53" (when it was seeded)
    above an audit record of its isolation at 00:16: the cycle's bulk write left
    ``updated_at`` alone. It is now the cycle's cluster time."""
    Node.objects.filter(name="n0").update(updated_at=when(-86400))
    backend.set_node("n0", health="gpu_failure", health_detail="GPU 3 fell off the bus")
    cycle = sync_nodes(backend)
    assert node().state == "unhealthy"
    assert node().updated_at == cycle.stamp() == when(0)


def test_a_node_isolated_already_is_not_isolated_again(backend):
    Node.objects.filter(name="n0").update(state="unhealthy", health="gpu_failure")
    backend.set_node("n0", health="gpu_failure", cordoned=True)
    cycle = sync_nodes(backend)
    assert cycle.report.counts["isolated"] == 0 and backend.calls == []
    assert not AuditRecord.objects.exists()


def test_a_node_cordoned_outside_the_portal_is_shown_cordoned(backend):
    backend.set_node("n1", cordoned=True)
    cycle = sync_nodes(backend)
    assert node("n1").state == "cordoned"
    assert "outside the portal" in node("n1").state_reason
    assert cycle.report.drift == ["node n1 cordoned outside the portal"]
    assert backend.calls == [], "the portal does not undo it"


def test_a_cordon_the_backend_lost_is_asked_again(backend):
    Node.objects.filter(name="n0").update(state="draining", state_reason="maintenance")
    sync_nodes(backend)
    assert backend.called("cordon") == [("n0", "maintenance")]
    assert node().state == "draining"


def test_an_uncordon_the_portal_asked_for_is_told_to_the_backend(backend):
    Node.objects.filter(name="n0").update(uncordon_requested=True)
    backend.set_node("n0", cordoned=True)
    sync_nodes(backend)
    assert backend.called("uncordon") == [("n0",)]
    assert node().uncordon_requested is False


def test_an_uncordon_the_backend_refused_is_asked_again_next_cycle(backend):
    Node.objects.filter(name="n0").update(uncordon_requested=True)
    backend.fail_next("uncordon", TransientBackendError("API timeout"))
    cycle = sync_nodes(backend)
    assert node().uncordon_requested is True
    assert cycle.report.errors == ["uncordon n0: transient: API timeout"]


def test_residual_processes_are_killed_alerted_and_their_gpus_returned(backend, sent):
    backend.set_node("n1", residual_gpus=(2, 5))
    cycle = sync_nodes(backend)
    assert backend.called("clean_residual") == [("n1",)]
    assert node("n1").residual_gpus == 0
    alert = Alert.objects.get(kind="residual_process", subject="n1")
    assert alert.severity == "warning" and "2 GPUs on n1 were held" in alert.message
    assert cycle.report.counts["residual_cleaned"] == 2
    assert [e[2]["residual_gpus"] for e in sent] == [0], "the node page hears it is clean"


def test_residual_gpus_a_failed_clean_up_left_stay_counted(backend, sent):
    backend.set_node("n1", residual_gpus=(2, 5))
    backend.fail_next("clean_residual", TransientBackendError("ssh timeout"))
    cycle = sync_nodes(backend)
    assert node("n1").residual_gpus == 2
    assert not Alert.objects.filter(kind="residual_process").exists()
    assert cycle.report.errors == ["clean n1: transient: ssh timeout"]
    assert [e[2]["residual_gpus"] for e in sent] == [2]


# -- runs ----------------------------------------------------------------------------------------


def test_a_checkpoint_is_recorded_with_the_progress(backend, running_job):
    job = running_job()
    run = backend.runs[job.backend_ref]
    backend.runs[job.backend_ref] = replace(run, progress_s=1200, last_checkpoint_at=T0 - 30)
    sync_jobs(backend)
    job.refresh_from_db()
    assert (job.progress_seconds, job.last_checkpoint_at) == (1200, when(-30))


def test_a_little_progress_without_a_checkpoint_is_not_written(backend, running_job):
    job = running_job()
    backend.end(job.backend_ref, RUNNING, progress_s=299)
    sync_jobs(backend)
    assert Job.objects.get(pk=job.pk).progress_seconds == 0


def test_a_run_past_its_preemption_deadline_is_killed(backend, running_job):
    job = running_job(state="preempting", preempt_deadline=when(-1), stop_reason="preemption")
    sync_jobs(backend)
    assert backend.called("kill") == [(job.backend_ref,)]
    assert JobEvent.objects.get(job=job).kind == "killed"


def test_a_run_still_checkpointing_at_its_deadline_is_left_to_finish(backend, running_job):
    job = running_job(state="preempting", preempt_deadline=when(-1))
    backend.end(job.backend_ref, STOPPING, progress_s=0)
    sync_jobs(backend)
    assert backend.called("kill") == []


def test_a_run_that_vanished_is_retried_from_its_checkpoint(backend, running_job, sent):
    job = running_job(progress_seconds=600)
    del backend.runs[job.backend_ref]
    sync_jobs(backend)
    job.refresh_from_db()
    assert (job.state, job.retry_count) == ("pending", 1)
    event = JobEvent.objects.get(job=job)
    assert event.kind == "retried" and "vanished from the backend" in event.message
    assert not Allocation.objects.filter(job=job).exists()
    assert sent == [(f"job.{job.pk}", "job.updated",
                     {"id": job.pk, "state": "pending",
                      "event": {"kind": "retried", "message": event.message}})]  # fmt: skip


def test_a_lost_launch_of_a_waiting_job_is_adopted(backend, make_job):
    # It ran before (preempted at 900 s of work): its last run's start is hours old.
    job = make_job(launch_attempts=1, launch_first_failed_at=when(-20),
                   launch_last_failed_at=when(-20), launch_error="timeout",
                   progress_seconds=900.0, attempt=1, started_at=when(-7200))  # fmt: skip
    ref = backend.start(job.pk, 2, (Slot("n1", (0, 1, 2, 3, 4, 5, 6, 7)),))
    cycle = sync_jobs(backend)
    job.refresh_from_db()
    assert (job.state, job.backend_ref, job.attempt) == ("running", ref, 2)
    assert job.run_start_progress_seconds == 900.0, "the lost launch started it from there"
    assert job.started_at == when(0), "the adopted run's start, not the earlier run's"
    assert job.launch_attempts == 0 and job.launch_error == "", "the backoff is over"
    assert Allocation.objects.filter(job=job, node__name="n1").count() == 8
    assert JobEvent.objects.get(job=job).kind == "adopted"
    assert cycle.report.drift == [f"run {ref} adopted for job {job.pk}"]
    assert backend.called("kill") == []


@pytest.mark.parametrize("state", ["cancelled", "succeeded", "failed"])
def test_a_run_whose_job_moved_on_is_killed(backend, make_job, state):
    job = make_job(state=state)
    ref = backend.start(job.pk, 1, (Slot("n0", (0,)),))
    cycle = sync_jobs(backend)
    assert backend.called("kill") == [(ref,)]
    assert cycle.report.drift == [f"run {ref} had no waiting job: killed"]
    assert Job.objects.get(pk=job.pk).state == state


def test_a_lost_launch_on_gpus_another_job_holds_is_killed_not_adopted(
    backend, make_job, running_job
):
    running_job("n0")
    job = make_job()
    ref = backend.start(job.pk, 1, (Slot("n0", (0, 1)),))
    cycle = sync_jobs(backend)
    assert Job.objects.get(pk=job.pk).state == "pending"
    assert backend.called("kill") == [(ref,)]
    assert f"job {job.pk}: GPUs already allocated; not placed" in cycle.report.errors


def test_foreign_work_is_reported_not_touched(backend):
    backend.runs["slurm-4242"] = ObservedJob(
        ref="slurm-4242", job_id=None, state=RUNNING, placement=(Slot("n1", (0,)),)
    )
    cycle = sync_jobs(backend)
    assert cycle.report.drift == ["run slurm-4242 was started outside the portal"]
    assert backend.calls == []


def test_a_cancelled_jobs_live_run_is_killed_then_its_gpus_freed(backend, running_job):
    job = running_job()
    Job.objects.filter(pk=job.pk).update(state="cancelled")
    sync_jobs(backend)
    # Killed as a cancelled job's run, and again as a run no waiting job claims (the
    # cycle's observation still shows it running): the same call, harmless twice.
    assert set(backend.called("kill")) == {(job.backend_ref,)}
    assert Allocation.objects.filter(job=job).count() == 8, "freed once the run has ended"
    cycle = make_cycle(backend)  # the next observation: the run is gone
    reconcile.release_cancelled(cycle)
    assert not Allocation.objects.filter(job=job).exists()
    assert Job.objects.get(pk=job.pk).finished_at == when(0)
    # its watchers hear of it (page walk: an open job page kept the GPUs and "Finished —")
    [line] = cycle.events
    assert (line.job_id, line.kind, line.message, line.at) == (
        job.pk,
        "stopped",
        "its run has ended; 8 GPUs freed",
        when(0),
    )


def test_reconcile_isolates_a_node_before_it_settles_the_runs(backend, running_job):
    job = running_job("n0")
    backend.set_node("n0", health="down", health_detail="node down")
    del backend.runs[job.backend_ref]
    cycle = make_cycle(backend)
    reconcile.reconcile(cycle)
    assert node().state == "unhealthy"
    assert Job.objects.get(pk=job.pk).state == "pending"
