"""Ordering, reservations and backfill (Q3, S3), and the replay policies."""

from __future__ import annotations

from scheduling.engine import Code, LineView, PolicyConfig

from .helpers import HOUR, NOW, code, node, pjob, rack, rjob, run, snap, started


def test_higher_tier_jumps_ahead_of_waiting_lower_tiers():
    pending = [
        pjob(1, 8, tier="experiment", submitted_at=0),
        pjob(2, 8, tier="core", submitted_at=100),
    ]
    plan = run(snap([node("a")], pending))
    assert list(started(plan)) == [2]
    # No GPU is left free this cycle: a capacity verdict, the same next cycle.
    assert code(plan, 1) == Code.INSUFFICIENT_GPUS


def test_fair_share_orders_a_tier_by_line_use_relative_to_quota():
    lines = [LineView("llm", 32), LineView("search", 32)]
    running = [rjob(1, {"x": range(8)}, tier="core", line="llm")]  # llm at 25 %, search 0 %
    pending = [
        # (recent: jobs waiting past the starvation bound go first whatever the share)
        pjob(2, 8, tier="core", line="llm", submitted_at=NOW - 100),
        pjob(3, 8, tier="core", line="search", submitted_at=NOW - 50),
    ]
    plan = run(snap([node("a"), node("x")], pending, running, lines=lines))
    assert list(started(plan)) == [3]


def test_submit_time_breaks_ties_within_a_tier_and_share():
    pending = [pjob(2, 8, submitted_at=50), pjob(1, 8, submitted_at=10)]
    plan = run(snap([node("a")], pending))
    assert list(started(plan)) == [1]


def test_demoted_job_goes_to_the_back_of_its_tier():
    pending = [
        pjob(1, 8, tier="core", preemption_count=4, submitted_at=NOW - 200),
        pjob(2, 8, tier="core", submitted_at=NOW - 100),
    ]
    plan = run(snap([node("a")], pending))
    assert list(started(plan)) == [2]
    assert code(plan, 1) == Code.DEMOTED


def test_top_blocked_job_gets_a_reservation_from_predicted_ends():
    nodes = rack("a", 2, "r0")
    running = [
        rjob(1, {"a00": range(8)}, tier="core", predicted_end=NOW + 2 * HOUR),
        rjob(2, {"a01": range(4)}, tier="core", predicted_end=NOW + 1 * HOUR),
    ]
    plan = run(snap(nodes, [pjob(9, 16, tier="core")], running))
    (res,) = plan.reservations
    assert res.job_id == 9 and sorted(res.nodes) == ["a00", "a01"]
    assert res.expected_start == NOW + 2 * HOUR
    assert plan.verdicts[9].estimated_start == NOW + 2 * HOUR


def test_short_job_backfills_on_reserved_nodes_without_delaying_the_reservation():
    nodes = rack("a", 2, "r0")
    running = [rjob(1, {"a00": range(8)}, tier="core", predicted_end=NOW + 2 * HOUR)]
    pending = [
        pjob(9, 16, tier="core"),
        pjob(10, 8, predicted_runtime_s=1 * HOUR),  # ends before the reservation
    ]
    plan = run(snap(nodes, pending, running))
    assert started(plan) == {10: {"a01": tuple(range(8))}}
    assert plan.reservations[0].expected_start == NOW + 2 * HOUR


def test_long_job_may_not_use_reserved_nodes():
    nodes = rack("a", 2, "r0")
    running = [rjob(1, {"a00": range(8)}, tier="core", predicted_end=NOW + 2 * HOUR)]
    pending = [pjob(9, 16, tier="core"), pjob(10, 8, predicted_runtime_s=3 * HOUR)]
    plan = run(snap(nodes, pending, running))
    assert started(plan) == {}
    v = plan.verdicts[10]
    assert v.code == Code.PRIORITY and v.details["reservations_ahead"] == 1


def test_unknown_runtime_is_treated_conservatively():
    nodes = rack("a", 2, "r0")
    running = [rjob(1, {"a00": range(8)}, tier="core", predicted_end=NOW + 2 * HOUR)]
    pending = [pjob(9, 16, tier="core"), pjob(10, 8)]  # no prediction: default 12 h
    plan = run(snap(nodes, pending, running))
    assert 10 not in started(plan)


def test_jobs_fitting_elsewhere_start_freely_past_a_blocked_job():
    nodes = rack("a", 2, "r0") + [node("b", rack="r1", block="b1")]
    running = [rjob(1, {"a00": range(8)}, tier="core", predicted_end=NOW + 2 * HOUR)]
    pending = [pjob(9, 16, tier="core"), pjob(10, 8, predicted_runtime_s=10 * HOUR)]
    plan = run(snap(nodes, pending, running))
    assert sorted(plan.reservations[0].nodes) == ["a00", "a01"]
    assert started(plan) == {10: {"b": tuple(range(8))}}


def test_number_of_reservations_is_bounded():
    nodes = [node(f"n{i}") for i in range(6)]
    running = [rjob(i, {f"n{i}": range(8)}, tier="core") for i in range(6)]
    pending = [pjob(10 + i, 8, tier="core") for i in range(6)]
    plan = run(snap(nodes, pending, running, policy=PolicyConfig(max_reservations=2)))
    assert [r.job_id for r in plan.reservations] == [10, 11]
    assert plan.verdicts[12].estimated_start is None


def test_reservation_needs_enough_releases_to_exist():
    # Running work of a non-preemptible core job never predicted to end before
    # the other: the reservation takes the earliest two nodes that free up.
    nodes = [node(f"n{i}") for i in range(3)]
    running = [
        rjob(1, {"n0": range(8)}, tier="core", predicted_end=NOW + 5 * HOUR),
        rjob(2, {"n1": range(8)}, tier="core", predicted_end=NOW + 1 * HOUR),
        rjob(3, {"n2": range(8)}, tier="core", predicted_end=NOW + 3 * HOUR),
    ]
    plan = run(snap(nodes, [pjob(9, 16, tier="core")], running))
    assert plan.reservations[0].expected_start == NOW + 3 * HOUR
    assert sorted(plan.reservations[0].nodes) == ["n1", "n2"]


def test_overrunning_jobs_are_assumed_to_need_a_little_longer():
    running = [rjob(1, {"n0": range(8)}, tier="core", predicted_end=NOW - 10)]
    plan = run(snap([node("n0")], [pjob(9, 8, tier="core")], running))
    assert plan.reservations[0].expected_start == NOW + PolicyConfig().overrun_s


def test_without_backfill_the_first_blocked_job_blocks_the_rest():
    nodes = rack("a", 2, "r0")
    running = [rjob(1, {"a00": range(8)}, tier="core")]
    pending = [pjob(9, 16, tier="core"), pjob(10, 8, predicted_runtime_s=60)]
    plan = run(snap(nodes, pending, running, policy=PolicyConfig.preset("priority")))
    assert started(plan) == {}
    v = plan.verdicts[10]
    assert v.code == Code.PRIORITY and v.details["strict_order"] == 1


def test_strict_fifo_ignores_tiers():
    pending = [
        pjob(1, 8, tier="experiment", submitted_at=0),
        pjob(2, 8, tier="urgent", submitted_at=10),
    ]
    plan = run(snap([node("a")], pending, policy=PolicyConfig.preset("fifo")))
    assert list(started(plan)) == [1]
    assert plan.preemptions == ()


def test_fifo_does_not_skip_ahead_of_a_blocked_job():
    pending = [pjob(1, 16, submitted_at=0), pjob(2, 8, submitted_at=10)]
    running = [rjob(5, {"b": range(8)}, tier="core")]
    plan = run(snap([node("a"), node("b")], pending, running, policy=PolicyConfig.preset("fifo")))
    assert started(plan) == {}


def test_backfill_preset_backfills_but_never_preempts_or_borrows():
    lines = [LineView("llm", 0)]
    running = [rjob(1, {"a": range(8)})]
    pending = [pjob(9, 8, tier="urgent", line="llm"), pjob(10, 8, line="llm")]
    plan = run(
        snap(
            [node("a"), node("b")],
            pending,
            running,
            lines=lines,
            policy=PolicyConfig.preset("backfill"),
        )
    )
    assert plan.preemptions == () and plan.starts == ()


def test_a_job_never_ranks_above_its_queues_tier():
    # Job 1 claims "urgent" inside the experiment queue: it ranks as an experiment
    # and may not preempt.
    pending = [
        pjob(1, 8, tier="urgent", queue="llm-experiment", submitted_at=0),
        pjob(2, 8, tier="core", submitted_at=50),
    ]
    running = [rjob(5, {"b": range(8)})]
    plan = run(snap([node("a"), node("b")], pending, running))
    assert list(started(plan)) == [2]
    assert plan.preemptions == ()
