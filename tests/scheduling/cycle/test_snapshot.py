"""build_snapshot: the engine's view of every active job and node, field by field.

Waiting and running jobs share their identity fields (queue, line, tier, size, owner…);
each kind adds its own. The predictor is a stub that answers per job and counts the calls.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from quotas.models import Tier
from scheduling.engine import types as et
from scheduling.engine.predict import HistoryPredictor
from scheduling.prediction import RuntimePredictor
from scheduling.snapshot import build_snapshot

from .conftest import T0

pytestmark = pytest.mark.django_db


UNKNOWN_S = 12 * 3600.0  # the history's default for a job without history


class StubPredictor(RuntimePredictor):
    """``predict_row`` answers ``runtimes[job name]`` (``UNKNOWN_S`` when absent), a number
    or a function of the time the job has already run, and logs each call (job name, queue,
    elapsed)."""

    def __init__(self, **runtimes: float | Callable[[float], float]) -> None:
        super().__init__(HistoryPredictor())
        self.runtimes = runtimes
        self.asked: list[tuple[str, str, float]] = []

    def predict_row(self, row: dict, queue_name: str, elapsed_s: float = 0.0) -> float:
        self.asked.append((row["name"], queue_name, elapsed_s))
        got = self.runtimes.get(row["name"], UNKNOWN_S)
        return got(elapsed_s) if callable(got) else got


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def snapshot_of(backend, predictor: StubPredictor) -> et.Snapshot:
    return build_snapshot(backend.observe(), et.PolicyConfig(), predictor).snapshot


def test_a_waiting_job_is_seen_with_every_field_of_its_row(make_job, backend, cluster):
    job = make_job(
        name="wait", gpus=4, gpus_per_node=2, gpu_memory_gb=40, rdma=True, exclusive_node=True,
        avoid_inference=True, preemptible=False, submitted_at=at(T0 - 60), preemption_count=2,
        model_name="llama-7b", estimated_runtime_minutes=30, tier=Tier.CORE,
    )  # fmt: skip
    predictor = StubPredictor(wait=900.0)
    (pending,) = snapshot_of(backend, predictor).pending
    assert pending == et.PendingJob(
        id=job.pk, queue="llm-experiment", line="llm", tier=et.Tier.CORE, gpus=4,
        gpus_per_node=2, gpu_memory_gb=40, rdma=True, exclusive_node=True, avoid_inference=True,
        preemptible=False, submitted_at=T0 - 60, preemption_count=2, model_name="llama-7b",
        predicted_runtime_s=900.0, owner="owner", estimated_runtime_s=1800,
    )  # fmt: skip
    assert predictor.asked == [("wait", "llm-experiment", 0.0)]


def test_a_waiting_job_without_model_or_estimate_says_none(make_job, backend):
    make_job(name="bare", model_name="", estimated_runtime_minutes=None)
    (pending,) = snapshot_of(backend, StubPredictor()).pending
    assert (pending.model_name, pending.estimated_runtime_s) == (None, None)
    assert pending.predicted_runtime_s == UNKNOWN_S


def test_a_running_job_is_seen_with_its_placement_and_predicted_end(running_job, backend):
    job = running_job(
        node="n1", gpus=(5, 2, 3), name="run", exclusive_node=True, preemptible=True,
        preemption_count=1, started_at=at(T0 - 600), last_checkpoint_at=at(T0 - 120),
        run_start_progress_seconds=500.0, progress_seconds=1050.0, model_name="llama-7b",
        borrowed=True, preempt_deadline=at(T0 + 300),
    )  # fmt: skip
    predictor = StubPredictor(run=2000.0)
    snap = snapshot_of(backend, predictor)
    (running,) = snap.running
    assert running == et.RunningJob(
        id=job.pk, queue="llm-experiment", line="llm", tier=et.Tier.EXPERIMENT, gpus=3,
        placement=(et.Slot("n1", (2, 3, 5)),), preemptible=True, preemption_count=1,
        started_at=T0 - 600, last_checkpoint_at=T0 - 120,
        predicted_end=T0 - 600 + (2000.0 - 500.0), state=et.RUNNING, exclusive_node=True,
        model_name="llama-7b", preempted_for=None, preempt_deadline=T0 + 300, borrowed=True,
        owner="owner",
    )  # fmt: skip
    # started from 500 s of progress, checkpointed 480 s into the run: the runs that got to 980
    assert predictor.asked == [("run", "llm-experiment", 980.0)], "from the runs that got as far"
    exclusive = {n.name: n.exclusive for n in snap.nodes}
    assert exclusive == {"n0": False, "n1": True}, "an exclusive job's node is marked"


def test_the_predicted_end_stays_put_while_the_run_makes_progress(running_job, backend):
    """The progress a run has made (written every 5 minutes of work) is not the progress it
    started from: the end is the start plus the rest of the whole runtime, whatever progress
    the row says it has made since. Before session 35 the snapshot subtracted the progress
    made so far from the run's start, so a job half-way through its prediction looked done."""
    job = running_job(name="run", started_at=at(T0 - 3600), run_start_progress_seconds=0.0,
                      progress_seconds=0.0)  # fmt: skip
    ends = []
    for progress in (0.0, 1800.0, 3600.0):
        job.progress_seconds = progress
        job.save(update_fields=["progress_seconds"])
        (running,) = snapshot_of(backend, StubPredictor(run=7200.0)).running
        ends.append(running.predicted_end)
    assert ends == [T0 - 3600 + 7200.0] * 3


def test_a_run_past_its_prediction_is_predicted_again_from_the_runs_as_long(running_job, backend):
    """Predicted 300 s, it has run 600: the runs that lasted 600 s or more say 1,800."""
    running_job(name="late", started_at=at(T0 - 600), run_start_progress_seconds=0.0)
    whole = {0.0: 300.0, 600.0: 1800.0}
    predictor = StubPredictor(late=lambda elapsed: whole[elapsed])
    (running,) = snapshot_of(backend, predictor).running
    assert running.predicted_end == T0 - 600 + 1800.0
    assert [e for _, _, e in predictor.asked] == [0.0, 600.0]


def test_a_run_past_even_that_is_left_to_the_engines_overrun_rule(running_job, backend):
    running_job(name="late", started_at=at(T0 - 600), run_start_progress_seconds=100.0)
    (running,) = snapshot_of(backend, StubPredictor(late=400.0)).running
    assert running.predicted_end == T0 - 600 + 300.0, "never before the run's own start"


def test_a_job_waiting_again_needs_the_rest_of_its_run(make_job, backend):
    """Stopped at a checkpoint after 5,000 s of work: it waits for the rest of the whole
    runtime predicted from the runs that got that far, at least the overrun guess."""
    make_job(name="resumed", progress_seconds=5000.0, preemption_count=1)
    make_job(name="nearly", progress_seconds=5000.0, preemption_count=1)
    predictor = StubPredictor(resumed=lambda e: 20_000.0 if e else 6000.0,
                              nearly=lambda e: 5100.0 if e else 6000.0)  # fmt: skip
    by_name = {p.id: p for p in snapshot_of(backend, predictor).pending}
    resumed, nearly = sorted(by_name.values(), key=lambda p: p.id)
    assert resumed.predicted_runtime_s == 15_000.0
    assert nearly.predicted_runtime_s == et.PolicyConfig().overrun_s


def test_a_preempting_job_holds_its_gpus_in_the_preempting_state(running_job, make_job, backend):
    waiting = make_job(name="big", gpus=16, gpus_per_node=8)
    running_job(name="stopping", state="preempting", preempted_for=waiting)
    snap = snapshot_of(backend, StubPredictor())
    (running,) = snap.running
    assert (running.state, running.preempted_for) == (et.PREEMPTING, waiting.pk)
    assert [p.id for p in snap.pending] == [waiting.pk]


def test_finished_jobs_are_not_in_the_snapshot(make_job, backend):
    for state in ("succeeded", "failed", "cancelled"):
        make_job(name=state, state=state)
    predictor = StubPredictor()
    snap = snapshot_of(backend, predictor)
    assert (snap.pending, snap.running, predictor.asked) == ((), (), [])


# -- borrowing inputs (#19, scheduling/borrow_inputs.py) -----------------------------------
def test_borrowing_inputs_reach_the_snapshot(make_job, backend, cluster):
    """A job preempted 10 min ago and its queue carry the time (the cool-down); the lines'
    usage samples give the entitled-demand peaks; the rollup's ratio reaches the queue."""
    from quotas.models import UsageSample
    from scheduling import borrow_inputs
    from scheduling.engine.borrowing import HORIZONS_S
    from scheduling.models import Eviction

    queue = cluster["queue"]
    job = make_job(name="again", preemption_count=1)
    make_job(name="fresh")
    Eviction.objects.create(job=job, queue=queue, at=at(T0 - 600), reason="preemption",
                            gpus=8, gpu_seconds=3600.0)  # fmt: skip
    Eviction.objects.create(
        job=job, queue=queue, at=at(T0 - 7200), reason="preemption", gpus=8, gpu_seconds=3600.0
    )  # fmt: skip: outside the cool-down
    line = queue.business_line
    # entitled demand = used - borrowed + pending, at most the quota (100)
    for age, used, borrowed, pending in ((60, 40, 10, 0), (3000, 90, 0, 50), (40_000, 20, 0, 0)):
        UsageSample.objects.create(at=at(T0 - age), business_line=line, used_gpus=used,
                                   borrowed_gpus=borrowed, pending_gpus=pending)  # fmt: skip
    reading = borrow_inputs.EvictionReading(0.25, 9000.0, 36_000.0)
    borrow_inputs.provide_eviction_readings(lambda: {queue.pk: reading})
    try:
        s = snapshot_of(backend, StubPredictor())
    finally:
        from monitoring.rollup import get_eviction_readings

        borrow_inputs.provide_eviction_readings(get_eviction_readings)
    by_name = {p.id: p for p in s.pending}
    assert by_name[job.pk].last_evicted_at == T0 - 600
    assert len(s.pending) == 2 and [p.last_evicted_at for p in s.pending].count(None) == 1
    (q,) = s.queues
    assert (q.last_reclaim_at, q.eviction_ratio) == (T0 - 600, 0.25)
    assert (q.evicted_gpu_s, q.delivered_gpu_s) == (9000.0, 36_000.0)
    # 30 min: only the sample of a minute ago (30); from 1 h on the 100 (capped 140) counts
    expected = tuple(30 if h < 3000 else 100 for h in HORIZONS_S)
    assert s.demand_peaks == expected


def test_an_inference_stop_cools_the_job_down_but_not_its_queue(make_job, backend, cluster):
    """Inference taking a shared node's GPUs back is not a lender's reclaim: the stopped
    job waits out its own cool-down, the rest of its queue may still borrow."""
    from scheduling.models import Eviction

    queue = cluster["queue"]
    job = make_job(name="stopped", preemption_count=1)
    Eviction.objects.create(job=job, queue=queue, at=at(T0 - 600), reason="inference",
                            gpus=8, gpu_seconds=3600.0)  # fmt: skip
    s = snapshot_of(backend, StubPredictor())
    (pending,) = s.pending
    (q,) = s.queues
    assert (pending.last_evicted_at, q.last_reclaim_at) == (T0 - 600, None)


def test_the_loop_policy_takes_the_borrowing_knobs_from_the_quota_policy(db):
    from quotas.models import QuotaPolicy
    from scheduling.cycle.context import production_policy

    assert production_policy().borrow_cooldown_s == 1800.0  # the default, without a row
    # 25 min of predictive patience before a reclaim, urgent work at once (session 29),
    # in the model and the preset
    full = et.PolicyConfig.preset("full")
    assert (production_policy().preempt_after_s, production_policy().tier_preempt_after_s) == (
        1500.0, 0.0) == (full.preempt_after_s, full.tier_preempt_after_s)  # fmt: skip
    assert production_policy().predictive_patience and full.predictive_patience
    # the cap is off by default (session 15, docs/quotas.md), in the model and the engine
    assert not production_policy().borrow_cap
    assert not full.borrow_cap
    assert production_policy().defragment_nodes == 0 == et.PolicyConfig().defragment_nodes
    # the starvation bound: 7 days with the quota hold, in the model and the preset
    default = production_policy()
    assert (
        default.starvation_bound_s
        == 7 * 86400.0
        == et.PolicyConfig.preset("full").starvation_bound_s
    )
    assert (
        default.hold_quota_when_overdue and et.PolicyConfig.preset("full").hold_quota_when_overdue
    )
    QuotaPolicy.objects.create(borrow_cooldown_minutes=45, eviction_target=0.2,
                               preempt_after_minutes=20, urgent_preempt_after_minutes=5,
                               predictive_patience=False, borrow_cap=True,
                               defragment_nodes=2, starvation_bound_hours=72)  # fmt: skip
    policy = production_policy()
    assert not policy.predictive_patience and policy.borrow_cap
    assert (policy.preempt_after_s, policy.tier_preempt_after_s) == (1200.0, 300.0)
    assert policy.defragment_nodes == 2
    assert policy.starvation_bound_s == 72 * 3600.0 and policy.hold_quota_when_overdue
    QuotaPolicy.objects.update(starvation_bound_hours=0)
    unbound = production_policy()
    assert unbound.starvation_bound_s is None and not unbound.hold_quota_when_overdue
    assert (policy.borrow_cooldown_s, policy.borrow_queue_cooldown_s) == (2700.0, 2700.0)
    assert policy.borrow_eviction_target == 0.2
    assert (policy.preempt_after_s, policy.tier_preempt_after_s) == (1200.0, 300.0)
