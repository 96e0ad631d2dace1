"""Consolidation in the loop (#19): the plan's migrations applied through the services.

A moved job is asked to checkpoint and stop like a graceful preemption, but its timeline
says it moves to make room (not that it was preempted); once stopped it is back in the
queue with its progress and its ``preemption_count`` unchanged; its ``Eviction`` row is a
migration, counted on ``/metrics`` (``gpuportal_migrations_total``) and beside the
eviction ratio, never in it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core import telemetry
from scheduling.backends.base import STOPPED, TransientBackendError
from scheduling.cycle import finished, run, stops
from scheduling.cycle.phases import PhaseTimer
from scheduling.engine.types import Migration
from scheduling.models import CONSOLIDATION, Eviction, Job, JobEvent, Node
from scheduling.prediction import RuntimePredictor
from scheduling.snapshot import build_snapshot
from tests.scheduling.cycle.conftest import T0, counter, make_cycle, observed_node

pytestmark = pytest.mark.django_db

CKPT = "s3://ckpt/run/"


def when(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, tz=UTC)


@pytest.fixture(autouse=True)
def fresh_counters():
    telemetry.reset()
    yield
    telemetry.reset()


def test_a_migration_asks_the_job_to_checkpoint_and_says_it_moves(backend, running_job, make_job):
    gang = make_job(gpus=16)
    job = running_job("n0", (0, 1), checkpoint_path=CKPT)
    cycle = make_cycle(backend)
    stops.migrate(cycle, (Migration(job.pk, gang.pk, T0 + 300, "n1"),))
    cycle.flush_events()
    assert backend.called("checkpoint_and_stop") == [(job.backend_ref, 300.0)]
    job.refresh_from_db()
    assert (job.state, job.stop_reason, job.preempted_for_id) == (
        "preempting",
        CONSOLIDATION,
        gang.pk,
    )
    assert job.preempt_deadline == when(300)
    event = JobEvent.objects.get(job=job)
    assert event.kind == "moving"
    assert f"to make room for job #{gang.pk} (consolidation)" in event.message
    assert "restarts from its checkpoint on another node (n1, where room is kept for it)" in (
        event.message
    )
    assert "not a preemption" in event.message
    assert job.move_to_node == "n1"
    assert cycle.report.counts["migrations"] == 1
    assert cycle.report.counts["preemptions"] == 0


def test_a_move_the_backend_refused_leaves_the_job_running(backend, running_job, make_job):
    gang = make_job(gpus=16)
    job = running_job("n0", (0, 1), checkpoint_path=CKPT)
    backend.fail_next("checkpoint_and_stop", TransientBackendError("API timeout"))
    cycle = make_cycle(backend)
    stops.migrate(cycle, (Migration(job.pk, gang.pk, T0 + 300, "n1"),))
    job.refresh_from_db()
    assert (job.state, job.stop_reason) == ("running", "")
    assert cycle.report.counts["migrations"] == 0


def test_a_moved_job_is_requeued_with_its_progress_and_not_counted_as_preempted(
    backend, running_job, make_job, django_capture_on_commit_callbacks
):
    gang = make_job(gpus=16)
    job = running_job(
        "n0", (0, 1), state="preempting", stop_reason=CONSOLIDATION, preempted_for=gang,
        preempt_deadline=when(60), progress_seconds=1500, started_at=when(-1000),
        checkpoint_path=CKPT,
    )  # fmt: skip
    cycle = make_cycle(backend)
    with django_capture_on_commit_callbacks(execute=True):
        finished.finish_runs(
            cycle, [(Job.objects.get(pk=job.pk), STOPPED, 1500.0, "checkpoint", None)]
        )
        cycle.flush_events()
    job.refresh_from_db()
    assert (job.state, job.progress_seconds, job.preemption_count) == ("pending", 1500, 0)
    assert (job.stop_reason, job.preempted_for) == ("", None)
    assert job.last_checkpoint_at == when(0)  # the checkpoint it restarts from
    event = JobEvent.objects.filter(job=job).latest("id")
    assert event.kind == "moved"
    assert event.message.startswith(f"moved to make room for job #{gang.pk} (consolidation)")
    assert "25 min of progress kept" in event.message
    assert "preempted" not in event.message.replace("not a preemption", "")
    row = Eviction.objects.get(job=job)
    assert (row.reason, row.gpus) == (CONSOLIDATION, 2)
    queue = job.queue.name
    assert counter(telemetry.MIGRATIONS, queue) == 1
    assert counter(telemetry.PREEMPTIONS, queue, "preemption") == 0
    assert counter(telemetry.EVICTED_GPU_SECONDS, queue) == 0


def test_the_snapshot_says_which_running_jobs_may_move_and_which_are_moving(
    backend, running_job, make_job
):
    gang = make_job(gpus=16)
    movable = running_job("n0", (0, 1), checkpoint_path=CKPT)
    without = running_job("n0", (2, 3))
    moving = running_job(
        "n1", (0, 1), state="preempting", stop_reason=CONSOLIDATION, preempted_for=gang,
        preempt_deadline=when(60), checkpoint_path=CKPT,
    )  # fmt: skip
    preempted = running_job(
        "n1", (2, 3), state="preempting", stop_reason="preemption", preempted_for=gang,
        preempt_deadline=when(60), checkpoint_path=CKPT,
    )  # fmt: skip
    ctx = build_snapshot(
        backend.observe(), run.production_policy(), RuntimePredictor.from_history()
    )
    seen = {r.id: (r.checkpointable, r.migrating) for r in ctx.snapshot.running}
    assert seen == {
        movable.pk: (True, False),
        without.pk: (False, False),
        moving.pk: (True, True),
        preempted.pk: (True, False),
    }


def after_the_moves(backend, moved: list[Job]):
    """The moved runs checkpoint and stop; the next cycle (a minute later) settles them
    and plans. Returns that cycle."""
    for job in moved:
        backend.end(job.backend_ref, STOPPED, 7200.0, "checkpoint")
    backend.now = T0 + 60
    cycle = make_cycle(backend)
    run.reconcile(cycle)
    run.plan_and_apply(cycle, PhaseTimer())
    cycle.flush_events()
    return cycle


@pytest.fixture
def four_nodes(cluster, backend):
    """n0..n3 in one rack (n2, n3 added to the two-node cluster)."""
    for name in ("n2", "n3"):
        Node.objects.create(name=name, rack="r0", block="b0", gpu_model="H100",
                            gpu_memory_gb=80, gpus_total=8)  # fmt: skip
        backend.nodes[name] = observed_node(name)
    return backend


def test_a_cycle_moves_small_jobs_so_a_gang_starts_then_restarts_them_elsewhere(
    four_nodes, running_job, make_job
):
    """n0 and n1 each hold a 2-GPU checkpointable job, n2 and n3 a 6-GPU job that may not
    move; a 16-GPU gang needs two whole nodes. The first cycle moves the two small jobs
    (to n2 and n3); once they have stopped, the next cycle starts the gang on n0 and n1 and
    the moved jobs on n2 and n3, from their checkpoints."""
    backend = four_nodes
    old = dict(started_at=when(-7200), checkpoint_path=CKPT)
    small = [running_job(n, (0, 1), **old) for n in ("n0", "n1")]
    for n in ("n2", "n3"):
        running_job(n, tuple(range(6)), preemptible=False, started_at=when(-7200))
    gang = make_job(gpus=16, gpus_per_node=8)
    cycle = make_cycle(backend)
    run.plan_and_apply(cycle, PhaseTimer())
    cycle.flush_events()
    assert cycle.report.counts["migrations"] == 2
    assert cycle.report.counts["preemptions"] == 0
    g = Job.objects.get(pk=gang.pk)
    assert g.state == "pending" and g.pending_code == "PREEMPTING"
    assert g.pending_message.startswith("Starts after 2 jobs move off rack r0")
    assert g.pending_details["consolidation"] == 1
    for job in small:
        job.refresh_from_db()
        assert (job.state, job.stop_reason) == ("preempting", CONSOLIDATION)
    after_the_moves(backend, small)
    g.refresh_from_db()
    assert g.state == "running"
    assert set(g.allocations.values_list("node__name", flat=True)) == {"n0", "n1"}
    for job in small:
        job.refresh_from_db()
        assert job.state == "running" and job.preemption_count == 0
        assert set(job.allocations.values_list("node__name", flat=True)) <= {"n2", "n3"}
        kinds = list(JobEvent.objects.filter(job=job).values_list("kind", flat=True))
        assert "moving" in kinds and "moved" in kinds and "preempted" not in kinds
    assert Eviction.objects.filter(reason=CONSOLIDATION).count() == 2
    assert not Eviction.objects.exclude(reason=CONSOLIDATION).exists()


@pytest.fixture
def defragmented(four_nodes, running_job) -> Job:
    """Defragmentation on; n0 holds one 1-GPU checkpointable job (returned), n1 a 7-GPU
    job that may not move, n2 and n3 are free."""
    from quotas.models import QuotaPolicy

    QuotaPolicy.objects.create(defragment_nodes=1)
    small = running_job("n0", (0,), started_at=when(-7200), checkpoint_path=CKPT,
                        estimated_runtime_minutes=24 * 60)  # fmt: skip
    running_job("n1", tuple(range(7)), preemptible=False, started_at=when(-7200))
    return small


def test_with_defragmentation_on_a_cycle_empties_a_node_before_a_gang_asks(
    four_nodes, defragmented
):
    """Defragmentation (``QuotaPolicy.defragment_nodes``): n0 holds one 1-GPU
    checkpointable job, n1 a 7-GPU job that may not move, n2 and n3 are free; nothing
    waits. The cycle moves the small job into n1's hole, says why on its timeline, and
    once it has stopped the next cycle restarts it there: n0 is whole again."""
    backend, small = four_nodes, defragmented
    cycle = make_cycle(backend)
    run.plan_and_apply(cycle, PhaseTimer())
    cycle.flush_events()
    assert cycle.report.counts["migrations"] == 1
    small.refresh_from_db()
    assert (small.state, small.stop_reason, small.preempted_for_id) == (
        "preempting", CONSOLIDATION, None)  # fmt: skip
    event = JobEvent.objects.filter(job=small, kind="moving").get()
    assert "so its node comes free whole for multi-GPU jobs (defragmentation)" in event.message
    second = after_the_moves(backend, [small])
    small.refresh_from_db()
    assert small.state == "running" and small.preemption_count == 0
    assert list(small.allocations.values_list("node__name", flat=True)) == ["n1"]
    moved = JobEvent.objects.filter(job=small, kind="moved").get()
    assert moved.message.startswith("moved so its node comes free whole")
    assert second.report.counts["migrations"] == 0  # nothing left to gather


def test_the_room_kept_for_a_moved_job_is_not_taken_and_it_restarts_there(
    four_nodes, defragmented, make_job
):
    """Defragmentation moves n0's 1-GPU job into n1's last GPU. While it checkpoints a
    1-GPU job arrives, for which n1's hole is the tightest fit: it goes elsewhere. Once
    stopped, the moved job restarts in its room, and no room is kept for it any more."""
    backend, small = four_nodes, defragmented
    cycle = make_cycle(backend)
    run.plan_and_apply(cycle, PhaseTimer())
    small.refresh_from_db()
    assert (small.state, small.move_to_node) == ("preempting", "n1")
    newcomer = make_job(gpus=1)
    backend.now = T0 + 30
    second = make_cycle(backend)
    run.reconcile(second)
    run.plan_and_apply(second, PhaseTimer())
    newcomer.refresh_from_db()
    assert newcomer.state == "running"
    assert list(newcomer.allocations.values_list("node__name", flat=True)) != ["n1"]
    after_the_moves(backend, [small])
    small.refresh_from_db()
    assert small.state == "running" and small.move_to_node == ""
    assert list(small.allocations.values_list("node__name", flat=True)) == ["n1"]
    moved = JobEvent.objects.filter(job=small, kind="moved").get()
    assert "(n1, where room is kept for it)" in moved.message
