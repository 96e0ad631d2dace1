"""A reservation's nodes are chosen with runs past their predicted end foreseen to run
longer, in proportion to what they have run (``PolicyConfig.overrun_foresight``,
``Planner.reserved_nodes``, session 39), and held from when those nodes free on the
backfill timeline."""

from __future__ import annotations

from scheduling.engine import PolicyConfig
from scheduling.engine.policy import foreseen_end, running_end

from .helpers import HOUR, NOW, node, pjob, rjob, run, snap

FORESIGHT = PolicyConfig(overrun_foresight=1.0)
OVERRUN_S = FORESIGHT.overrun_s


def whole_node_wait(overrun_started: float, other_end: float, policy: PolicyConfig) -> tuple:
    """n0's run started at ``overrun_started`` and is past its predicted end; n1's is
    predicted to end at ``other_end``. One core job of a whole node waits."""
    nodes = [node("n0"), node("n1")]
    running = [
        rjob(1, {"n0": range(8)}, tier="core", started_at=overrun_started, predicted_end=NOW - 60),
        rjob(2, {"n1": range(8)}, tier="core", predicted_end=other_end),
    ]
    pending = [pjob(10, 8, tier="core", gpus_per_node=8)]
    return run(snap(nodes, pending, running, policy=policy))


def test_a_run_that_has_outlived_its_prediction_is_foreseen_to_run_as_long_again():
    overrun = rjob(1, {"n0": range(8)}, started_at=NOW - 19 * HOUR, predicted_end=NOW - 60)
    assert running_end(overrun, NOW, FORESIGHT) == NOW + OVERRUN_S
    assert foreseen_end(overrun, NOW, FORESIGHT) == NOW + 19 * HOUR
    just_over = rjob(2, {"n0": range(8)}, started_at=NOW - 600, predicted_end=NOW - 60)
    assert foreseen_end(just_over, NOW, FORESIGHT) == NOW + OVERRUN_S, "never before running_end"
    on_time = rjob(3, {"n0": range(8)}, predicted_end=NOW + HOUR)
    assert foreseen_end(on_time, NOW, FORESIGHT) == running_end(on_time, NOW, FORESIGHT)
    half = PolicyConfig(overrun_foresight=0.5)
    assert foreseen_end(overrun, NOW, half) == NOW + 9.5 * HOUR


def test_the_reservation_goes_to_the_node_whose_run_is_predicted_to_end():
    # n0's run has run 19 h past its prediction; n1's ends in 5 h
    plan = whole_node_wait(NOW - 19 * HOUR, NOW + 5 * HOUR, FORESIGHT)
    assert [r.nodes for r in plan.reservations] == [("n1",)]
    assert plan.verdicts[10].estimated_start == NOW + 5 * HOUR
    # without foresight: n0 "within overrun_s", at every cycle
    plain = whole_node_wait(NOW - 19 * HOUR, NOW + 5 * HOUR, PolicyConfig())
    assert [r.nodes for r in plain.reservations] == [("n0",)]
    assert plain.verdicts[10].estimated_start == NOW + OVERRUN_S


def test_off_no_overrun_is_foreseen_and_no_preset_turns_it_on():
    plan = whole_node_wait(NOW - 19 * HOUR, NOW + 5 * HOUR, PolicyConfig(overrun_foresight=0))
    assert [r.nodes for r in plan.reservations] == [("n0",)]
    assert all(PolicyConfig.preset(p).overrun_foresight == 0 for p in ("backfill", "full"))


def test_a_short_overrun_still_gets_the_reservation_at_its_plain_start():
    # n0's run has run 2 h (foreseen: 2 h more), n1's ends in 5 h: n0 stays the earliest,
    # and the reservation starts when the backfill timeline frees it, not 2 h from now
    plan = whole_node_wait(NOW - 2 * HOUR, NOW + 5 * HOUR, FORESIGHT)
    assert [r.nodes for r in plan.reservations] == [("n0",)]
    assert plan.verdicts[10].estimated_start == NOW + OVERRUN_S


def test_a_gang_reserves_around_an_overrunning_node_from_when_its_nodes_free():
    nodes = [node("n0"), node("n1"), node("n2")]
    running = [
        rjob(1, {"n0": range(8)}, tier="core", started_at=NOW - 10 * HOUR, predicted_end=NOW - 1),
        rjob(2, {"n1": range(8)}, tier="core", predicted_end=NOW + HOUR),
        rjob(3, {"n2": range(8)}, tier="core", predicted_end=NOW + 3 * HOUR),
    ]
    gang = [pjob(10, 16, tier="core", gpus_per_node=8)]
    plan = run(snap(nodes, gang, running, policy=FORESIGHT))
    assert [set(r.nodes) for r in plan.reservations] == [{"n1", "n2"}]
    assert plan.verdicts[10].estimated_start == NOW + 3 * HOUR
    plain = run(snap(nodes, gang, running))
    assert [set(r.nodes) for r in plain.reservations] == [{"n0", "n1"}]
    assert plain.verdicts[10].estimated_start == NOW + HOUR


def test_backfill_on_the_reserved_node_ends_by_the_reservations_start():
    # n1 (ends in 5 h) is reserved for job 10; a 1-GPU job predicted at 4 h backfills there
    # only because it ends before the reservation starts; a 6-hour one does not
    nodes = [node("n0"), node("n1", free=range(7, 8))]
    running = [
        rjob(1, {"n0": range(8)}, tier="core", started_at=NOW - 19 * HOUR, predicted_end=NOW - 60),
        rjob(2, {"n1": range(7)}, tier="core", predicted_end=NOW + 5 * HOUR),
    ]
    pending = [
        pjob(10, 8, tier="core", gpus_per_node=8),
        pjob(11, 1, predicted_runtime_s=6 * HOUR),
        pjob(12, 1, predicted_runtime_s=4 * HOUR),
    ]
    plan = run(snap(nodes, pending, running, policy=FORESIGHT))
    assert {r.job_id: r.nodes for r in plan.reservations}[10] == ("n1",)
    assert [s.job_id for s in plan.starts] == [12]


def test_the_reservation_starts_when_its_nodes_free_on_the_backfill_timeline():
    # n0 has overrun 10 h, n1 1 h (foreseen: 1 h more), n2 ends in 50 min. Foresight picks
    # n1 + n2 (foreseen by 1 h); the hold starts when the backfill timeline frees them,
    # 50 min from now (n1 "within overrun_s"), as every backfill check reads it
    nodes = [node("n0"), node("n1"), node("n2")]
    running = [
        rjob(1, {"n0": range(8)}, tier="core", started_at=NOW - 10 * HOUR, predicted_end=NOW - 1),
        rjob(2, {"n1": range(8)}, tier="core", started_at=NOW - HOUR, predicted_end=NOW - 1),
        rjob(3, {"n2": range(8)}, tier="core", predicted_end=NOW + 3000),
    ]
    plan = run(snap(nodes, [pjob(10, 16, tier="core", gpus_per_node=8)], running, policy=FORESIGHT))
    assert [set(r.nodes) for r in plan.reservations] == [{"n1", "n2"}]
    assert plan.reservations[0].expected_start == plan.verdicts[10].estimated_start == NOW + 3000
