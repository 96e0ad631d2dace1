"""The shared policy rules (R3, Q2, S3), called directly."""

from __future__ import annotations

import gc

import pytest

from scheduling.engine import PolicyConfig, QueueView, Tier
from scheduling.engine import policy as rules

from .helpers import HOUR, NOW, pjob, rjob

POLICY = PolicyConfig(default_runtime_s=10 * HOUR, overrun_s=1800.0, demote_after=3)
E, F, C, U = Tier.EXPERIMENT, Tier.FINETUNE, Tier.CORE, Tier.URGENT


@pytest.mark.parametrize("count, demoted", [(0, False), (3, False), (4, True)])
def test_is_demoted_after_more_than_demote_after_preemptions(count, demoted):
    assert rules.is_demoted(count, POLICY) is demoted


@pytest.mark.parametrize(
    "tier, queue_tier, effective",
    [(U, C, C), (E, C, E), (C, C, C), (U, None, U)],
)
def test_effective_tier_never_exceeds_the_queue_s(tier, queue_tier, effective):
    queue = None if queue_tier is None else QueueView("q", "l", queue_tier)
    assert rules.effective_tier(tier, queue) is effective


@pytest.mark.parametrize(
    "queue, tier, allowed",
    [
        (QueueView("q", "l", U), U, {E, F, C}),
        (QueueView("q", "l", U), C, {E, F}),  # a core job in an urgent queue
        (QueueView("q", "l", C), C, set()),
        (QueueView("q", "l", C, preempts_tiers={E, U}), C, {E}),  # strictly lower only
        (None, U, {E, F, C}),
        (None, F, set()),
    ],
)
def test_queue_preempts(queue, tier, allowed):
    assert rules.queue_preempts(queue, tier) == allowed


@pytest.mark.parametrize(
    "predicted, runtime", [(None, 10 * HOUR), (0.0, 10 * HOUR), (-5.0, 10 * HOUR), (60, 60.0)]
)
def test_job_runtime_falls_back_to_the_default(predicted, runtime):
    assert rules.job_runtime(pjob(1, 1, predicted_runtime_s=predicted), POLICY) == runtime


@pytest.mark.parametrize(
    "kw, end",
    [
        ({"predicted_end": NOW + HOUR}, NOW + HOUR),
        ({"predicted_end": NOW - HOUR}, NOW + 1800),  # overran: assume overrun_s more
        ({"predicted_end": NOW}, NOW + 1800),
        ({"predicted_end": None, "started_at": NOW - HOUR}, NOW + 9 * HOUR),
        ({"state": "preempting", "preempt_deadline": NOW + 60}, NOW + 60),
        ({"state": "preempting", "preempt_deadline": NOW - 60}, NOW),
        ({"state": "preempting", "preempt_deadline": None}, NOW),
    ],
)
def test_running_end(kw, end):
    assert rules.running_end(rjob(1, {"n": range(8)}, **kw), NOW, POLICY) == end


@pytest.mark.parametrize(
    "gpus, per_node, node_gpus, shape",
    [
        (1, None, 8, (1, 1, 1)),
        (8, None, 8, (1, 8, 8)),
        (12, None, 8, (2, 6, 6)),  # spread evenly
        (20, None, 8, (3, 7, 6)),
        (64, None, 8, (8, 8, 8)),  # whole nodes
        (16, 4, 8, (4, 4, 4)),
        (10, 4, 8, (3, 4, 2)),
        (3, 4, 8, (1, 3, 3)),
        (0, None, 8, (1, 1, 1)),  # at least one GPU
        (3, None, 0, (3, 1, 1)),  # at least one GPU per node
        (5, 0, 8, (1, 5, 5)),  # a per-node limit below 1 is no limit
    ],
)
def test_shape_counts(gpus, per_node, node_gpus, shape):
    assert rules.shape_counts(gpus, per_node, node_gpus) == shape


@pytest.mark.parametrize(
    "kw, weight, cost",
    [
        ({"last_checkpoint_at": NOW - 1800}, 0.0, 2.0),  # lost work since the checkpoint
        ({"started_at": NOW - HOUR}, 0.0, 4.0),  # no checkpoint: since the start
        ({"last_checkpoint_at": NOW + 60}, 0.0, 0.0),
        # the run's 4 given GPU-hours weigh 0.1 each on top of the 2 lost
        ({"started_at": NOW - HOUR, "last_checkpoint_at": NOW - 1800}, 0.1, 2.4),
        # restarted 30 min ago from a checkpoint taken 3 h ago: it loses this run's 30 min
        ({"started_at": NOW - 1800, "last_checkpoint_at": NOW - 3 * HOUR}, 0.0, 2.0),
    ],
)
def test_victim_cost_is_lost_work_plus_the_weighted_given_gpu_time(kw, weight, cost):
    r = rjob(1, {"n": range(4)}, **kw)
    got = rules.victim_cost_gpu_h(r.gpus, r.started_at, r.last_checkpoint_at, NOW, weight)
    assert got == pytest.approx(cost)


@pytest.mark.parametrize(
    "kw, ok",
    [
        ({"preemptible": True}, True),
        ({"preemptible": True, "avoid_inference": True}, False),
        ({"preemptible": False}, False),
    ],
)
def test_inference_ok(kw, ok):
    assert rules.inference_ok(pjob(1, 1, **kw)) is ok


def test_gc_paused_restores_the_collector_as_it_was():
    assert gc.isenabled()
    with rules.gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with rules.gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
