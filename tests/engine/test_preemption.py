"""Preemption (R1-R3, Q5): who may be stopped, which victims, and how."""

from __future__ import annotations

import pytest

from scheduling.engine import Code, LineView, PolicyConfig, QueueView, Tier
from scheduling.engine.explain import iso

from .helpers import HOUR, NOW, code, node, pjob, rack, rjob, run, snap, started, victims


def full(nodes=2):
    return [node(f"n{i}") for i in range(nodes)]


def test_urgent_preempts_a_lower_tier_experiment_gracefully():
    running = [rjob(1, {"n0": range(8)}, tier="experiment")]
    plan = run(snap(full(1), [pjob(9, 8, tier="urgent")], running))
    assert victims(plan) == {1: 9}
    (p,) = plan.preemptions
    assert p.mode == "graceful" and p.grace_deadline == NOW + 300
    assert code(plan, 9) == Code.PREEMPTING
    assert plan.verdicts[9].estimated_start == NOW + 300
    assert [r.job_id for r in plan.reservations] == [9]
    assert plan.reservations[0].nodes == ("n0",)


def test_cold_mode_is_available_but_not_the_default():
    running = [rjob(1, {"n0": range(8)})]
    plan = run(
        snap(
            full(1),
            [pjob(9, 8, tier="urgent")],
            running,
            policy=PolicyConfig(preemption_mode="cold"),
        )
    )
    assert plan.preemptions[0].mode == "cold" and plan.preemptions[0].grace_deadline == NOW


@pytest.mark.parametrize(
    "victim_tier, preemptor_tier, preempted",
    [
        ("experiment", "urgent", True),
        ("finetune", "urgent", True),
        ("core", "urgent", True),  # core marked preemptible below
        ("urgent", "urgent", False),  # equal tier
        ("experiment", "core", False),  # by default only urgent preempts
        ("experiment", "experiment", False),
    ],
)
def test_tier_rules(victim_tier, preemptor_tier, preempted):
    running = [rjob(1, {"n0": range(8)}, tier=victim_tier, preemptible=True)]
    plan = run(snap(full(1), [pjob(9, 8, tier=preemptor_tier)], running))
    assert bool(plan.preemptions) is preempted


def test_queue_policy_can_let_core_preempt_experiments():
    queues = [
        QueueView("llm-core", "llm", Tier.CORE, preempts_tiers=frozenset({Tier.EXPERIMENT})),
        QueueView("llm-experiment", "llm", Tier.EXPERIMENT),
        QueueView("llm-finetune", "llm", Tier.FINETUNE),
    ]
    running = [rjob(1, {"n0": range(8)}), rjob(2, {"n1": range(8)}, tier="finetune")]
    plan = run(snap(full(2), [pjob(9, 8, tier="core")], running, queues=queues))
    assert victims(plan) == {1: 9}


def test_queue_policy_can_forbid_urgent_preemption():
    queues = [
        QueueView("llm-urgent", "llm", Tier.URGENT, preempts_tiers=frozenset()),
        QueueView("llm-experiment", "llm", Tier.EXPERIMENT),
    ]
    running = [rjob(1, {"n0": range(8)})]
    plan = run(snap(full(1), [pjob(9, 8, tier="urgent")], running, queues=queues))
    assert plan.preemptions == ()


def test_non_preemptible_jobs_are_never_victims():
    running = [rjob(1, {"n0": range(8)}, tier="core", preemptible=False)]
    plan = run(snap(full(1), [pjob(9, 8, tier="urgent")], running))
    assert plan.preemptions == ()
    assert code(plan, 9) == Code.INSUFFICIENT_GPUS


def test_demoted_jobs_are_never_victims():
    running = [
        rjob(1, {"n0": range(8)}, preemption_count=4, last_checkpoint_at=NOW),
        rjob(2, {"n1": range(8)}, preemption_count=3, last_checkpoint_at=NOW - 5 * HOUR),
    ]
    plan = run(snap(full(2), [pjob(9, 8, tier="urgent")], running))
    assert victims(plan) == {2: 9}  # the demoted one is cheaper but protected


def test_guaranteed_capacity_is_never_preempted():
    queues = [
        QueueView("llm-urgent", "llm", Tier.URGENT),
        QueueView("llm-experiment", "llm", Tier.EXPERIMENT, guarantee_gpus=8),
        QueueView("llm-finetune", "llm", Tier.FINETUNE),
    ]
    running = [rjob(1, {"n0": range(8)})]
    plan = run(snap(full(1), [pjob(9, 8, tier="urgent")], running, queues=queues))
    assert plan.preemptions == ()


def test_only_the_part_above_a_guarantee_can_be_preempted():
    queues = [
        QueueView("llm-urgent", "llm", Tier.URGENT),
        QueueView("llm-experiment", "llm", Tier.EXPERIMENT, guarantee_gpus=8),
    ]
    running = [rjob(1, {"n0": range(8)}), rjob(2, {"n1": range(8)}), rjob(3, {"n2": range(8)})]
    pending = [pjob(8, 8, tier="urgent"), pjob(9, 8, tier="urgent"), pjob(10, 8, tier="urgent")]
    plan = run(snap(full(3), pending, running, queues=queues))
    assert len(plan.preemptions) == 2  # 24 held, 8 guaranteed
    assert code(plan, 10) == Code.INSUFFICIENT_GPUS


def test_line_guarantee_protects_too():
    lines = [LineView("llm", None, guarantee_gpus=8)]
    running = [rjob(1, {"n0": range(8)})]
    plan = run(snap(full(1), [pjob(9, 8, tier="urgent", line="llm")], running, lines=lines))
    assert plan.preemptions == ()


def test_cheapest_victim_is_the_one_with_the_most_recent_checkpoint():
    running = [
        rjob(1, {"n0": range(8)}, last_checkpoint_at=NOW - 3 * HOUR),
        rjob(2, {"n1": range(8)}, last_checkpoint_at=NOW - 600),
        rjob(3, {"n2": range(8)}, last_checkpoint_at=NOW - 2 * HOUR),
    ]
    plan = run(snap(full(3), [pjob(9, 8, tier="urgent")], running))
    assert victims(plan) == {2: 9}


def test_fewest_victims_at_equal_cost():
    # n0: two 4-GPU jobs (2 x 4 GPU-h lost); n1: one 8-GPU job (8 GPU-h): equal cost.
    running = [
        rjob(1, {"n0": range(4)}),
        rjob(2, {"n0": range(4, 8)}),
        rjob(3, {"n1": range(8)}),
    ]
    plan = run(snap(full(2), [pjob(9, 8, tier="urgent")], running))
    assert victims(plan) == {3: 9}


def test_victims_are_minimal_for_a_small_job():
    # 2 GPUs needed on a full node with 1-GPU jobs: exactly two victims.
    running = [rjob(i + 1, {"n0": [i]}, last_checkpoint_at=NOW - i * 60) for i in range(8)]
    plan = run(snap(full(1), [pjob(9, 2, tier="urgent")], running))
    assert sorted(victims(plan)) == [1, 2]  # the two with the freshest checkpoints


def test_multi_node_urgent_job_preempts_whole_nodes_in_one_rack():
    nodes = rack("a", 2, "r0") + rack("b", 2, "r1")
    running = [
        rjob(1, {"a00": range(8)}),
        rjob(2, {"a01": range(8)}),
        rjob(3, {"b00": range(8)}, tier="core", preemptible=False),
        rjob(4, {"b01": range(8)}),
    ]
    plan = run(snap(nodes, [pjob(9, 16, tier="urgent")], running))
    assert sorted(victims(plan)) == [1, 2]
    assert sorted(plan.reservations[0].nodes) == ["a00", "a01"]


def test_no_preemption_when_free_capacity_suffices():
    running = [rjob(1, {"n0": range(8)})]
    plan = run(snap(full(2), [pjob(9, 8, tier="urgent")], running))
    assert plan.preemptions == () and 9 in started(plan)


def test_preemption_switched_off_by_policy():
    running = [rjob(1, {"n0": range(8)})]
    plan = run(
        snap(full(1), [pjob(9, 8, tier="urgent")], running, policy=PolicyConfig(preemption=False))
    )
    assert plan.preemptions == ()


def test_preemptor_waits_with_preempting_while_victims_checkpoint():
    running = [
        rjob(1, {"n0": range(8)}, state="preempting", preempted_for=9, preempt_deadline=NOW + 120),
    ]
    plan = run(snap(full(1), [pjob(9, 8, tier="urgent")], running))
    assert plan.preemptions == ()  # nothing new
    v = plan.verdicts[9]
    assert v.code == Code.PREEMPTING and v.estimated_start == NOW + 120
    assert plan.reservations[0].nodes == ("n0",)


def test_nodes_held_for_a_preemptor_are_not_given_to_others():
    # Victim frees 4 GPUs of n0 whose other 4 are free: they are held for job 9.
    running = [
        rjob(1, {"n0": range(4)}, state="preempting", preempted_for=9, preempt_deadline=NOW + 120),
    ]
    plan = run(snap(full(1), [pjob(9, 8, tier="urgent"), pjob(10, 4)], running))
    assert 10 not in started(plan)
    assert code(plan, 10) == Code.PRIORITY


def test_preemptor_starts_once_victims_are_gone():
    plan = run(snap(full(1), [pjob(9, 8, tier="urgent", preemption_count=0)]))
    assert 9 in started(plan)


def test_preemptor_count_is_bounded_per_plan():
    running = [rjob(i, {f"n{i}": range(8)}) for i in range(4)]
    pending = [pjob(10 + i, 8, tier="urgent") for i in range(4)]
    plan = run(snap(full(4), pending, running, policy=PolicyConfig(max_preemptors=2)))
    assert len(plan.preemptions) == 2


def test_borrowed_work_is_reclaimed_before_entitled_work():
    # Job 2 runs beyond the llm quota (borrowed) and has lost more progress than
    # job 1; it still goes first.
    lines = [LineView("llm", 8)]
    running = [
        rjob(1, {"n0": range(8)}, started_at=NOW - 8 * HOUR, last_checkpoint_at=NOW - 600),
        rjob(2, {"n1": range(8)}, started_at=NOW - 6 * HOUR, last_checkpoint_at=NOW - 5 * HOUR),
    ]
    plan = run(snap(full(2), [pjob(9, 8, tier="urgent", line="search")], running, lines=lines))
    assert victims(plan) == {2: 9}


# -- fewer victims (R2, #19): a fixed cost per eviction ----------------------------------
def test_a_reclaim_takes_one_borrower_over_many_fresh_small_ones():
    """Line search (quota 0) borrows both nodes: n0 holds eight 1-GPU jobs that just
    checkpointed (8 x ~0 GPU-h lost), n1 one 8-GPU job 30 min after its checkpoint (4
    GPU-h). llm's urgent 8-GPU job, within its quota, reclaims a node. Lost work alone
    picks n0 (8 evictions); each eviction also costs ``eviction_cost_gpu_h`` (1 GPU-h),
    so n1 (1 eviction) wins. (Entitled victims already count one by one: each weighs
    ``ENTITLED``.)"""
    running = [
        rjob(i + 1, {"n0": [i]}, line="search", last_checkpoint_at=NOW - 60) for i in range(8)
    ]
    running.append(rjob(20, {"n1": range(8)}, line="search", last_checkpoint_at=NOW - HOUR / 2))
    pending = [pjob(99, 8, tier="urgent")]
    lines = [LineView("llm", 8), LineView("search", 0)]
    assert victims(run(snap(full(2), pending, running, lines=lines))) == {20: 99}
    lost_work_only = PolicyConfig(eviction_cost_gpu_h=0.0)
    got = victims(run(snap(full(2), pending, running, lines=lines, policy=lost_work_only)))
    assert sorted(got) == list(range(1, 9))


def test_quota_room_comes_from_one_job_when_that_costs_no_more():
    """Line llm (quota 8) is full: four fresh 1-GPU experiments and one 4-GPU experiment
    30 min after its checkpoint (2 GPU-h). An urgent 4-GPU job needs 4 GPUs of quota room:
    the four 1-GPU jobs cost 4 x 1 GPU-h, the 4-GPU job 1 + 2: one victim. (With the quota
    swap off: on, the experiments become the borrowed part instead, test_quota_swap.py.)"""
    running = [rjob(i + 1, {"n0": [i]}, last_checkpoint_at=NOW - 60) for i in range(4)]
    running.append(rjob(20, {"n1": range(4)}, last_checkpoint_at=NOW - HOUR / 2))
    pending = [pjob(99, 4, tier="urgent")]
    lines = [LineView("llm", 8)]
    no_swap = PolicyConfig(swap_quota=False)
    assert victims(run(snap(full(3), pending, running, lines=lines, policy=no_swap))) == {20: 99}
    lost_work_only = PolicyConfig(eviction_cost_gpu_h=0.0, swap_quota=False)
    got = victims(run(snap(full(3), pending, running, lines=lines, policy=lost_work_only)))
    assert sorted(got) == [1, 2, 3, 4]


def test_with_patience_a_job_preempts_only_after_waiting_it_out():
    """``tier_preempt_after_s`` (an urgent job; ``preempt_after_s`` the others): capacity that frees while the job waits needs no eviction;
    past the patience (counted from its submission or its last eviction) it preempts."""
    running = [rjob(1, {"n0": range(8)}, tier="experiment")]
    patient = PolicyConfig(tier_preempt_after_s=1800)
    fresh = pjob(9, 8, tier="urgent", submitted_at=NOW - 600)
    plan = run(snap(full(1), [fresh], running, policy=patient))
    assert plan.preemptions == () and code(plan, 9) != Code.PREEMPTING
    assert plan.verdicts[9].details["may_preempt_at"] == iso(NOW + 1200)
    assert "it may then preempt" in plan.verdicts[9].message
    waited = pjob(9, 8, tier="urgent", submitted_at=NOW - 1800)
    assert victims(run(snap(full(1), [waited], running, policy=patient))) == {1: 9}
    requeued = pjob(9, 8, tier="urgent", submitted_at=NOW - 7200, last_evicted_at=NOW - 60)
    assert run(snap(full(1), [requeued], running, policy=patient)).preemptions == ()


def test_a_job_does_not_preempt_for_capacity_predicted_to_free_soon():
    """``wait_if_free_within_s``: an urgent job whose room the running work is predicted to
    free within that long reserves it instead of evicting; room further off, it preempts
    at once (no fixed patience)."""
    waits = PolicyConfig(wait_if_free_within_s=1800)
    urgent = pjob(9, 8, tier="urgent", submitted_at=NOW - 60)
    soon = [rjob(1, {"n0": range(8)}, tier="experiment", predicted_end=NOW + 1200)]
    assert victims(run(snap(full(1), [urgent], soon))) == {1: 9}  # off: preempts
    plan = run(snap(full(1), [urgent], soon, policy=waits))
    assert plan.preemptions == () and code(plan, 9) != Code.PREEMPTING
    assert plan.verdicts[9].estimated_start == NOW + 1200
    later = [rjob(1, {"n0": range(8)}, tier="experiment", predicted_end=NOW + 7200)]
    assert victims(run(snap(full(1), [urgent], later, policy=waits))) == {1: 9}


def test_an_urgent_queue_has_its_own_patience_and_reclaiming_the_other():
    """``tier_preempt_after_s`` for a queue that preempts lower tiers; ``preempt_after_s``
    for a job within its quota reclaiming borrowed work."""
    policy = PolicyConfig(preempt_after_s=3600, tier_preempt_after_s=0)
    running = [rjob(1, {"n0": range(8)}, tier="experiment")]
    urgent = pjob(9, 8, tier="urgent", submitted_at=NOW - 60)
    assert victims(run(snap(full(1), [urgent], running, policy=policy))) == {1: 9}
    lines = [LineView("llm", 8), LineView("cv", 0)]
    borrowed = [rjob(1, {"n0": range(8)}, line="cv", tier="experiment")]
    lender = pjob(9, 8, tier="core", submitted_at=NOW - 60)
    plan = run(snap(full(1), [lender], borrowed, lines=lines, policy=policy))
    assert plan.preemptions == () and "may_preempt_at" in plan.verdicts[9].details
    lender = pjob(9, 8, tier="core", submitted_at=NOW - 3600)
    assert victims(run(snap(full(1), [lender], borrowed, lines=lines, policy=policy))) == {1: 9}


#: Line ``llm`` owns the one node; line ``cv`` owns nothing and borrows it.
LENT_LINES = [LineView("llm", 8), LineView("cv", 0)]


def borrowed_node(ends_at: float):
    """``cv``'s experiment borrowing the whole of ``n0`` (running since an hour ago),
    predicted to end at ``ends_at``."""
    return [rjob(1, {"n0": range(8)}, line="cv", tier="experiment", predicted_end=ends_at)]


def test_predictive_patience_waits_only_for_room_predicted_to_free_within_it():
    """``predictive_patience``: a lender within its quota waits out its patience only if
    the borrowed work is predicted to free its room before the patience ends; room further
    off than that is reclaimed at once (blind patience would wait the whole hour); past the
    patience it reclaims whatever the prediction."""
    blind = PolicyConfig(preempt_after_s=3600)
    predictive = PolicyConfig(preempt_after_s=3600, predictive_patience=True)
    lines, borrowed = LENT_LINES, borrowed_node

    lender = pjob(9, 8, tier="core", submitted_at=NOW - 600)  # patience ends at NOW + 3000
    soon, late = borrowed(NOW + 1200), borrowed(NOW + 7200)
    plan = run(snap(full(1), [lender], soon, lines=lines, policy=predictive))
    assert plan.preemptions == () and plan.verdicts[9].estimated_start == NOW + 1200
    assert plan.verdicts[9].details["may_preempt_at"] == iso(NOW + 3000)
    assert victims(run(snap(full(1), [lender], late, lines=lines, policy=predictive))) == {1: 9}
    assert run(snap(full(1), [lender], late, lines=lines, policy=blind)).preemptions == ()
    waited = pjob(9, 8, tier="core", submitted_at=NOW - 3600)
    assert victims(run(snap(full(1), [waited], soon, lines=lines, policy=predictive))) == {1: 9}


def test_the_full_preset_waits_only_for_runs_predicted_to_end_not_for_overruns():
    """The ``full`` preset (the portal's default, session 29) waits 25 minutes before a
    reclaim, predictively: for borrowed work predicted to end within them, not for work
    already past its predicted end, which the timeline guesses ends ``overrun_s`` (30 min)
    from now. Urgent work still preempts at once."""
    policy = PolicyConfig.preset("full")
    assert 0 < policy.preempt_after_s < policy.overrun_s and policy.predictive_patience
    assert policy.tier_preempt_after_s == 0
    lines, borrowed = LENT_LINES, borrowed_node

    lender = pjob(9, 8, tier="core", submitted_at=NOW)
    soon = run(snap(full(1), [lender], borrowed(NOW + 600), lines=lines, policy=policy))
    assert soon.preemptions == () and soon.verdicts[9].estimated_start == NOW + 600
    overrun = borrowed(NOW - 600)  # its prediction has passed: a guess, not a forecast
    assert victims(run(snap(full(1), [lender], overrun, lines=lines, policy=policy))) == {1: 9}
    at_once = PolicyConfig.preset("full", preempt_after_s=0.0)
    waited = run(snap(full(1), [lender], borrowed(NOW + 600), lines=lines, policy=at_once))
    assert victims(waited) == {1: 9}


def test_the_victim_weighs_the_gpu_time_its_run_was_given():
    """R4 counts an evicted run's whole GPU time: of two experiments, the one that has run
    20 h and checkpointed 5 min ago loses less work than the one that has run 1 h and
    checkpointed 30 min ago, but evicting it costs 160 GPU-hours of eviction ratio
    against 8. With ``victim_given_weight`` (0.1 per GPU-hour, the default) the young one
    goes; with 0, lost work alone decides and the old one goes."""
    old = rjob(1, {"n0": range(8)}, started_at=NOW - 20 * HOUR,
               last_checkpoint_at=NOW - 300)  # fmt: skip
    young = rjob(2, {"n1": range(8)}, started_at=NOW - HOUR,
                 last_checkpoint_at=NOW - 1800)  # fmt: skip
    urgent = [pjob(9, 8, tier="urgent")]
    assert victims(run(snap(full(2), urgent, [old, young]))) == {2: 9}
    by_loss = PolicyConfig(victim_given_weight=0.0)
    assert victims(run(snap(full(2), urgent, [old, young], policy=by_loss))) == {1: 9}
