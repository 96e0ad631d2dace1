"""Consolidation (#19): a waiting gang starts after a few checkpointable jobs move.

Scenario: rack r0 holds two 2-GPU checkpointable experiment jobs (on a00, a01) and two
free nodes; rack r1's nodes are each 6/8 used by core work. A 32-GPU core gang needs four
whole nodes of one rack: 36 GPUs are free but no rack has four whole nodes, and the jobs
in the way run for 10 more hours. Moving the two small jobs onto r1's partly used nodes
frees rack r0 now.
"""

from __future__ import annotations

import dataclasses

import pytest

from scheduling.engine import check_plan, plan
from scheduling.engine import types as et
from scheduling.engine.consolidation import dominates, enabled

from .helpers import (
    HOUR,
    NOW,
    code,
    node,
    pjob,
    rack,
    rjob,
    run,
    snap,
    standard_queues,
    started,
    victims,
)
from .sim import Stepper

GANG = 1
MOVABLE = dict(checkpointable=True, started_at=NOW - 2 * HOUR, predicted_end=NOW + 10 * HOUR)


def cluster(**b_kw) -> list[et.NodeView]:
    return rack("a", 4, "r0") + rack("b", 4, "r1", **b_kw)


def in_the_way(first: dict | None = None, second: dict | None = None) -> list[et.RunningJob]:
    """The two small jobs on a00 and a01 (each may be changed), and r1's core work."""
    jobs = [
        rjob(100, {"a00": [0, 1]}, **{**MOVABLE, **(first or {})}),
        rjob(101, {"a01": [0, 1]}, **{**MOVABLE, **(second or {})}),
    ]
    for i in range(4):
        jobs.append(
            rjob(
                200 + i,
                {f"b{i:02d}": range(6)},
                tier="core",
                started_at=NOW - 2 * HOUR,
                predicted_end=NOW + 10 * HOUR,
            )
        )
    return jobs


def scenario(
    first: dict | None = None,
    second: dict | None = None,
    nodes: list[et.NodeView] | None = None,
    running: list[et.RunningJob] | None = None,
    **policy: object,
) -> et.Snapshot:
    return snap(
        nodes or cluster(),
        [pjob(GANG, 32, tier="core")],
        running if running is not None else in_the_way(first, second),
        policy=et.PolicyConfig(**policy),
    )


def test_the_gang_starts_after_two_jobs_move_off_rack_r0():
    s = scenario()
    p = run(s)
    deadline = NOW + s.policy.grace_seconds
    assert [(m.job_id, m.for_job_id, m.grace_deadline) for m in p.migrations] == [
        (100, GANG, deadline),
        (101, GANG, deadline),
    ]
    # Each lands on one of r1's partly used nodes (best fit), never on a00..a03.
    assert sorted(m.to_node for m in p.migrations) == ["b00", "b01"]
    assert p.preemptions == ()
    assert [(r.job_id, sorted(r.nodes), r.expected_start) for r in p.reservations] == [
        (GANG, ["a00", "a01", "a02", "a03"], deadline)
    ]
    v = p.verdicts[GANG]
    assert v.code == et.Code.PREEMPTING
    assert v.message.startswith("Starts after 2 jobs move off rack r0 (4 GPUs)")
    assert "restart elsewhere from their checkpoints" in v.message
    assert "preempted" not in v.message
    assert v.details == {
        "victims": 2,
        "victim_gpus": 4,
        "moving_off": "rack r0",
        "consolidation": 1,
        "victims_stop_at": "1970-01-12T13:51:40Z",
    }
    assert v.estimated_start == deadline


def test_without_consolidation_the_gang_waits_for_the_jobs_to_end():
    p = run(scenario(consolidation=False))
    assert p.migrations == ()
    assert code(p, GANG) == et.Code.TOPOLOGY
    assert p.verdicts[GANG].estimated_start == NOW + 10 * HOUR


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(dict(checkpointable=False), id="not checkpointable"),
        pytest.param(dict(preemptible=False), id="not preemptible"),
        pytest.param(dict(preemption_count=4), id="demoted"),
        pytest.param(dict(tier="urgent"), id="urgent"),
        pytest.param(dict(started_at=NOW - 600), id="restarted 10 min ago"),
        pytest.param(dict(predicted_end=NOW + 600), id="ends in 10 min"),
        pytest.param(dict(state="preempting", preempted_for=GANG), id="already stopping"),
    ],
)
def test_work_that_may_not_move_stays_and_nothing_moves(change):
    """Job 100 may not move; 101 alone frees too little: nothing moves (no partial moves)."""
    first = dict(change)
    if first.get("state") == "preempting":
        first["preempt_deadline"] = NOW + 10 * HOUR
    p = run(scenario(first=first))
    assert p.migrations == ()


def test_a_higher_tier_job_does_not_move_for_a_lower_tier_gang():
    """Experiment jobs move for an experiment gang; a finetune job does not."""
    running = in_the_way()
    s = snap(cluster(), [pjob(GANG, 32, tier="experiment")], running)
    assert len(run(s).migrations) == 2
    promoted = [dataclasses.replace(running[0], tier=et.Tier.FINETUNE, queue="llm-finetune")]
    s = snap(cluster(), [pjob(GANG, 32, tier="experiment")], promoted + running[1:])
    assert run(s).migrations == ()


def test_borrowed_work_is_not_moved():
    """With a 2-GPU quota on the experiment queue, one of the two jobs is borrowed."""
    queues = [
        dataclasses.replace(q, quota_gpus=2) if q.name == "llm-experiment" else q
        for q in scenario().queues
    ]
    s = dataclasses.replace(scenario(), queues=tuple(queues))
    p = run(s)
    assert p.migrations == ()


def test_guaranteed_work_is_never_moved():
    """A guarantee covering the experiment queue's 4 active GPUs leaves nothing to move;
    one of 2 GPUs leaves one job, too little."""
    for guarantee in (4, 2):
        queues = tuple(
            dataclasses.replace(q, guarantee_gpus=guarantee) if q.name == "llm-experiment" else q
            for q in scenario().queues
        )
        assert run(dataclasses.replace(scenario(), queues=queues)).migrations == ()
    lines = (et.LineView("llm", None, guarantee_gpus=24 + 2),)
    assert run(dataclasses.replace(scenario(), lines=lines)).migrations == ()
    lines = (et.LineView("llm", None, guarantee_gpus=24),)
    assert len(run(dataclasses.replace(scenario(), lines=lines)).migrations) == 2


def test_the_eviction_budget_per_queue_and_per_plan_is_never_exceeded():
    assert run(scenario(max_migrations_per_queue=1)).migrations == ()
    assert run(scenario(max_migrations=1)).migrations == ()
    # In two queues, one move each fits a budget of one per queue.
    second = dict(tier="finetune")
    assert len(run(scenario(second=second, max_migrations_per_queue=1)).migrations) == 2


def test_the_budget_is_shared_across_gangs_in_one_plan():
    """Two gangs, jobs of one queue in the way of both: two moves per queue per plan."""
    nodes = cluster() + rack("c", 4, "r2", block="b1") + rack("d", 4, "r3", block="b1")
    running = in_the_way()
    running += [
        rjob(102, {"c00": [0, 1]}, **MOVABLE),
        rjob(103, {"c01": [0, 1]}, **MOVABLE),
    ]
    running += [
        rjob(300 + i, {f"d{i:02d}": range(6)}, tier="core", predicted_end=NOW + 10 * HOUR)
        for i in range(4)
    ]
    s = snap(nodes, [pjob(1, 32, tier="core"), pjob(2, 32, tier="core")], running)
    p = run(s)
    assert len(p.migrations) == 2
    assert {m.for_job_id for m in p.migrations} == {1}
    second = run(dataclasses.replace(s, policy=et.PolicyConfig(max_migrations_per_queue=4)))
    assert len(second.migrations) == 4
    assert {m.for_job_id for m in second.migrations} == {1, 2}


def test_moved_jobs_need_room_on_an_already_used_node():
    """r1 full: the jobs could only go to a wholly free node (r2), which they would break."""
    nodes = cluster() + rack("c", 2, "r2")
    running = in_the_way()
    running = [
        dataclasses.replace(r, placement=(et.Slot(r.placement[0].node, tuple(range(8))),), gpus=8)
        if r.id >= 200
        else r
        for r in running
    ]
    p = run(scenario(nodes=nodes, running=running))
    assert p.migrations == ()


def test_a_job_filling_a_whole_node_may_move_onto_a_free_one():
    """A 4-node gang, rack r0 has three free nodes and one 8-GPU job; r1 (another block)
    one free node."""
    nodes = rack("a", 4, "r0") + rack("b", 2, "r1", block="b1")
    running = [
        rjob(100, {"a00": range(8)}, **MOVABLE),
        rjob(200, {"b00": range(8)}, tier="core", predicted_end=NOW + 10 * HOUR),
    ]
    p = run(scenario(nodes=nodes, running=running))
    assert [(m.job_id, m.to_node) for m in p.migrations] == [(100, "b01")]
    assert p.verdicts[GANG].message.startswith("Starts after 1 job moves off node a00")


def test_a_moved_job_only_goes_where_it_could_run():
    """r1's nodes lack RDMA (or have another GPU model, or less memory) that r0's have."""
    for change in (dict(rdma=False), dict(gpu_model="A100"), dict(gpu_memory_gb=40)):
        p = run(scenario(nodes=cluster(**change)))
        assert p.migrations == (), change
    assert dominates(node("x", rdma=True), node("y", rdma=False))
    assert not dominates(node("x", inference=True), node("y"))


def test_not_worth_it_when_the_gang_would_start_soon_anyway():
    """Rack r2's four nodes each hold a 1-GPU core job ending in 10 minutes: the gang
    reserves r2 for then rather than moving anything."""
    nodes = cluster() + rack("c", 4, "r2")
    running = in_the_way() + [
        rjob(300 + i, {f"c{i:02d}": [0]}, tier="core", predicted_end=NOW + 600) for i in range(4)
    ]
    p = run(scenario(nodes=nodes, running=running))
    assert p.migrations == ()
    assert p.verdicts[GANG].estimated_start == NOW + 600
    p = run(scenario(nodes=nodes, running=running, consolidate_min_wait_s=300))
    assert len(p.migrations) == 2


def test_only_gangs_consolidate_and_only_with_graceful_preemption():
    s = snap(cluster(), [pjob(GANG, 4, tier="core")], in_the_way())
    assert run(s).migrations == ()  # a 4-GPU job is no gang
    for policy in (
        et.PolicyConfig(preemption=False),
        et.PolicyConfig(preemption_mode="cold"),
        et.PolicyConfig(grace_seconds=0),
        et.PolicyConfig.preset("backfill"),
    ):
        assert not enabled(policy)
        assert run(dataclasses.replace(scenario(), policy=policy)).migrations == ()
    assert enabled(et.PolicyConfig.preset("full"))


def test_an_exclusive_gang_gets_a_whole_node():
    """An 8-GPU exclusive job: every job on the node must move."""
    nodes = rack("a", 1, "r0") + rack("b", 1, "r1")
    running = [
        rjob(100, {"a00": [0, 1]}, **MOVABLE),
        rjob(101, {"a00": [2, 3]}, **MOVABLE, queue="llm-finetune", tier="finetune"),
        rjob(200, {"b00": range(4)}, tier="core", predicted_end=NOW + 10 * HOUR),
    ]
    s = snap(nodes, [pjob(GANG, 4, tier="core", exclusive_node=True)], running)
    p = run(s)
    assert sorted(m.job_id for m in p.migrations) == [100, 101]
    assert {m.to_node for m in p.migrations} == {"b00"}


def stepper(s: et.Snapshot, nodes: list[et.NodeView] | None = None) -> Stepper:
    """A simulated cluster (``nodes``, else ``cluster()``) running the scenario's jobs (its
    pending jobs left out), the small jobs 100 and 101 checkpointable."""
    sim = Stepper(nodes or cluster(), s.lines, s.queues, s.policy, now=NOW)
    sim.checkpointable = {100, 101}
    for r in s.running:
        spec = pjob(
            r.id, r.gpus, tier=r.tier.label, line=r.line, queue=r.queue, preemptible=r.preemptible
        )
        sim.place(
            spec,
            {sl.node: sl.gpus for sl in r.placement},
            duration=12 * HOUR,
            started_at=r.started_at,
            predicted_end=r.predicted_end,
        )
    return sim


def test_over_several_cycles_the_moved_jobs_restart_elsewhere_not_preempted():
    """Plan 1 moves the jobs; plan 2 (they checkpoint) says so again; plan 3, after the
    grace period, starts the gang on rack r0 and the moved jobs on r1, with their
    ``preemption_count`` unchanged."""
    sim = stepper(scenario())
    sim.submit(pjob(GANG, 32, tier="core", predicted_runtime_s=HOUR), duration=HOUR)
    first = sim.step()
    assert {m.job_id for m in first.migrations} == {100, 101}
    assert all(sim.running[i].migrating for i in (100, 101))
    second = sim.step(60)
    assert second.migrations == () and second.preemptions == ()
    assert second.verdicts[GANG].message.startswith("Starts after 2 jobs move off rack r0")
    third = sim.step(240)
    assert started(third)[GANG].keys() == {"a00", "a01", "a02", "a03"}
    for jid in (100, 101):
        assert sim.is_running(jid)
        assert sim.running[jid].preemption_count == 0
        assert sim.running[jid].placement[0].node in {"b00", "b01"}
    assert sim.preempted == []
    assert [(jid, for_) for _t, jid, for_, _node in sim.moved] == [(100, GANG), (101, GANG)]


def borrowing_gang(**policy: object) -> et.Snapshot:
    """The scenario with an experiment gang whose queue's quota (4 GPUs) the two small jobs
    already fill: the gang may only borrow, and no rack has four whole nodes to lend."""
    return snap(
        cluster(),
        [pjob(GANG, 32, tier="experiment", preemptible=True)],
        in_the_way(),
        queues=standard_queues("llm", experiment=4),
        policy=et.PolicyConfig(**policy),
    )


def test_jobs_move_for_a_gang_over_its_quota_that_may_borrow():
    """The borrowing pass consolidates too: the gang holds rack r0, claims no quota, and
    its verdict says it will run on borrowed capacity."""
    s = borrowing_gang()
    p = run(s)
    assert sorted((m.job_id, m.for_job_id) for m in p.migrations) == [(100, GANG), (101, GANG)]
    assert p.starts == () and p.preemptions == ()
    assert [sorted(r.nodes) for r in p.reservations] == [["a00", "a01", "a02", "a03"]]
    v = p.verdicts[GANG]
    assert v.code == et.Code.PREEMPTING and v.details["over_quota"] == "borrowed"
    assert "It is over its quota: it starts on borrowed idle capacity" in v.message
    assert run(borrowing_gang(consolidate_over_quota=False)).migrations == ()


def test_nothing_moves_for_a_gang_the_borrowing_rules_refuse():
    """Evicted 10 minutes ago, the gang is in its cool-down: it may not borrow, so nothing
    moves for it."""
    s = borrowing_gang()
    cooling = dataclasses.replace(s.pending[0], last_evicted_at=NOW - 600)
    p = run(dataclasses.replace(s, pending=(cooling,)))
    assert p.migrations == ()
    assert code(p, GANG) == et.Code.QUOTA_EXCEEDED


def test_over_several_cycles_the_borrowing_gang_starts_on_borrowed_nodes():
    """Plan 2 (the moved jobs checkpoint) keeps rack r0 for it without a second move; plan
    3 starts it there as borrowed work, and the moved jobs restart on r1."""
    sim = stepper(borrowing_gang())
    gang = pjob(GANG, 32, tier="experiment", preemptible=True, predicted_runtime_s=HOUR)
    sim.submit(gang, duration=HOUR)
    assert {m.job_id for m in sim.step().migrations} == {100, 101}
    second = sim.step(60)
    assert second.migrations == () and second.preemptions == ()
    assert second.verdicts[GANG].details["over_quota"] == "borrowed"
    assert [r.job_id for r in second.reservations] == [GANG]
    third = sim.step(240)
    assert started(third)[GANG].keys() == {"a00", "a01", "a02", "a03"}
    assert [st.borrowed for st in third.starts if st.job_id == GANG] == [True]
    for jid in (100, 101):
        assert sim.running[jid].placement[0].node in {"b00", "b01"}
        assert sim.running[jid].preemption_count == 0


def swapping_gang(**policy: object) -> et.Snapshot:
    """A non-preemptible finetune gang of llm (24 GPUs: three whole nodes of a rack) whose
    line is at its quota, held by preemptible finetune work on r1 that can become the
    borrowed part (a quota swap); the small jobs on a00 and a01 are of line search."""
    running = [
        rjob(100, {"a00": [0, 1]}, line="search", **MOVABLE),
        rjob(101, {"a01": [0, 1]}, line="search", **MOVABLE),
    ]
    running += [rjob(200 + i, {f"b{i:02d}": range(6)}, tier="finetune") for i in range(4)]
    return snap(
        cluster(),
        [pjob(GANG, 24, tier="finetune", preemptible=False, predicted_runtime_s=HOUR)],
        running,
        lines=[et.LineView("llm", 24), et.LineView("search", None)],
        queues=standard_queues("llm") + standard_queues("search"),
        policy=et.PolicyConfig(**policy),
    )


def test_a_job_moves_for_a_gang_that_will_start_by_a_quota_swap():
    """No idle capacity fits the swap; one move frees a third whole node of r0. Later
    plans keep r0 for it (nothing moves twice), then it starts within quota, displacing
    r1's preemptible work, which no other job of those plans stopped or moved."""
    p = run(swapping_gang())
    assert [(m.job_id, m.for_job_id) for m in p.migrations] == [(100, GANG)]
    assert p.swaps == () and p.starts == ()
    v = p.verdicts[GANG]
    assert v.code == et.Code.PREEMPTING and v.details["over_quota"] == "swapped"
    assert "a quota swap" in v.message
    off = run(swapping_gang(consolidate_over_quota=False))
    assert off.migrations == () and "no idle capacity fits it" in off.verdicts[GANG].message

    sim = stepper(swapping_gang())
    sim.submit(swapping_gang().pending[0], duration=HOUR)
    assert [m.job_id for m in sim.step().migrations] == [100]
    second = sim.step(60)
    assert second.migrations == () and second.verdicts[GANG].details["over_quota"] == "swapped"
    third = sim.step(240)
    assert set(started(third)[GANG]) == {"a00", "a02", "a03"}
    assert [(sw.job_id, sorted(sw.displaced)) for sw in third.swaps] == [
        (GANG, [200, 201, 202, 203])
    ]
    assert sim.preempted == []


def test_an_overdue_swapping_gang_moves_jobs_in_the_first_pass_as_a_swapper():
    """Overdue with the quota hold, the gang swaps in the first pass
    (``QuotaSwap.overdue_first``): the same move, and it still claims no quota and keeps
    the work it will displace out of the search."""
    s = swapping_gang(starvation_bound_s=HOUR, hold_quota_when_overdue=True)
    overdue = dataclasses.replace(s.pending[0], submitted_at=NOW - 2 * HOUR)
    p = run(dataclasses.replace(s, pending=(overdue,)))
    assert [(m.job_id, m.for_job_id) for m in p.migrations] == [(100, GANG)]
    v = p.verdicts[GANG]
    assert v.code == et.Code.PREEMPTING and v.details["over_quota"] == "swapped"
    assert "a quota swap" in v.message


# -- the invariant checker ---------------------------------------------------------------
def base() -> tuple[et.Snapshot, et.Plan]:
    s = scenario()
    return s, plan(s, NOW)


def mutated(p: et.Plan, **changes: object) -> et.Plan:
    """The plan with its first migration changed."""
    first = dataclasses.replace(p.migrations[0], **changes)
    return dataclasses.replace(p, migrations=(first, *p.migrations[1:]))


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda s, p: (s, mutated(p, to_node="a02")), "wholly free node a02"),
        (lambda s, p: (s, mutated(p, to_node="a00")), "which cannot run it"),
        (lambda s, p: (s, mutated(p, to_node="zz")), "unknown node zz"),
        (lambda s, p: (s, mutated(p, job_id=999)), "unknown running job 999"),
        (lambda s, p: (s, mutated(p, job_id=200)), "may not move"),
        (lambda s, p: (s, mutated(p, for_job_id=77)), "unknown pending job 77"),
        (lambda s, p: (s, mutated(p, grace_deadline=NOW)), "deadline other than"),
        (
            lambda s, p: (s, dataclasses.replace(p, migrations=p.migrations * 2)),
            "moved twice",
        ),
        (
            lambda s, p: (dataclasses.replace(s, policy=et.PolicyConfig(consolidation=False)), p),
            "consolidation is off",
        ),
        (
            lambda s, p: (
                dataclasses.replace(s, policy=et.PolicyConfig(max_migrations_per_queue=1)),
                p,
            ),
            "queue llm-experiment has 2 jobs moved in one plan, over 1",
        ),
        (
            lambda s, p: (dataclasses.replace(s, policy=et.PolicyConfig(max_migrations=1)), p),
            "2 migrations in one plan, over 1",
        ),
        (
            lambda s, p: (
                dataclasses.replace(
                    s,
                    queues=tuple(
                        dataclasses.replace(q, guarantee_gpus=2)
                        if q.name == "llm-experiment"
                        else q
                        for q in s.queues
                    ),
                ),
                p,
            ),
            "queue llm-experiment loses 4 GPUs to preemption and migration, below its guarantee",
        ),
        (
            lambda s, p: (
                dataclasses.replace(
                    s,
                    running=tuple(
                        dataclasses.replace(r, preemption_count=4) if r.id == 100 else r
                        for r in s.running
                    ),
                ),
                p,
            ),
            "job 100 moved but may not move",
        ),
        (
            lambda s, p: (
                s,
                dataclasses.replace(
                    p,
                    preemptions=(et.Preemption(100, GANG, "graceful", NOW + 300),),
                ),
            ),
            "job 100 both preempted and moved",
        ),
        (
            lambda s, p: (s, dataclasses.replace(p, reservations=())),
            "holds no nodes",
        ),
    ],
)
def test_check_plan_reports_every_broken_migration(mutate, expected):
    s, p = base()
    assert check_plan(s, p) == []
    s2, p2 = mutate(s, p)
    found = check_plan(s2, p2)
    assert any(expected in v for v in found), found


def test_check_plan_reports_a_destination_without_room():
    s, p = base()
    gpus = next(r.gpus for r in s.running if r.id == p.migrations[0].job_id)
    assert gpus == 2
    full = tuple(
        dataclasses.replace(n, free_gpus=n.free_gpus[:1])
        if n.name == p.migrations[0].to_node
        else n
        for n in s.nodes
    )
    found = check_plan(dataclasses.replace(s, nodes=full), p)
    assert any("has no room for the 2 GPUs of jobs moved there" in v for v in found), found


def test_moved_jobs_release_their_gpus_at_the_deadline_for_the_reservation_check():
    """Without the migrations the gang's reservation would not fit at its start."""
    s, p = base()
    found = check_plan(s, dataclasses.replace(p, migrations=()))
    assert any("does not fit on its nodes" in v for v in found), found
    assert victims(p) == {}


def with_rack_r2() -> list[et.NodeView]:
    return cluster() + rack("c", 4, "r2", block="b1")


def borrowed_on_rack_r2(given_h: float = 64, **policy: object) -> et.Snapshot:
    """The scenario with a rack r2 (block b1) of four nodes, c00 wholly held by a job of
    line search, which has no quota: borrowed work the gang could reclaim instead, its run
    given ``given_h`` GPU-hours so far."""
    borrower = rjob(
        300,
        {"c00": range(8)},
        line="search",
        started_at=NOW - given_h * HOUR / 8,
        predicted_end=NOW + 10 * HOUR,
    )
    return snap(
        with_rack_r2(),
        [pjob(GANG, 32, tier="core", submitted_at=NOW - 2 * HOUR)],
        [*in_the_way(), borrower],
        lines=[et.LineView("llm", None), et.LineView("search", 0)],
        policy=et.PolicyConfig(**policy),
    )


def test_jobs_move_before_borrowed_work_is_reclaimed():
    """One reclaim (job 300, its run given 64 GPU-hours) or two moves would make room: the
    moves, since the moved jobs restart at once while a reclaimed borrower waits again and
    its 64 GPU-hours count as evicted."""
    p = run(borrowed_on_rack_r2())
    assert sorted(m.job_id for m in p.migrations) == [100, 101]
    assert p.preemptions == ()
    assert "move off rack r0" in p.verdicts[GANG].message
    # without the option the preemption search goes first and reclaims the borrower
    p = run(borrowed_on_rack_r2(consolidate_before_reclaim=False))
    assert p.migrations == ()
    assert victims(p) == {300: GANG}
    # consolidation off: the reclaim as before
    p = run(borrowed_on_rack_r2(consolidation=False))
    assert p.migrations == () and victims(p) == {300: GANG}
    # a reclaim of less than reclaim_move_min_gpu_h (32) GPU-hours is cheaper than moves
    p = run(borrowed_on_rack_r2(given_h=24))
    assert p.migrations == () and victims(p) == {300: GANG}
    p = run(borrowed_on_rack_r2(given_h=24, reclaim_move_min_gpu_h=16))
    assert len(p.migrations) == 2 and p.preemptions == ()


def test_over_several_cycles_the_borrower_is_never_reclaimed():
    """Plan 2 keeps rack r0 for the gang while the jobs move (no reclaim meanwhile); plan 3
    starts it there, and the borrower on c00 runs on."""
    sim = stepper(borrowed_on_rack_r2(), with_rack_r2())
    sim.submit(pjob(GANG, 32, tier="core", predicted_runtime_s=HOUR), duration=HOUR)
    assert {m.job_id for m in sim.step().migrations} == {100, 101}
    second = sim.step(60)
    assert second.migrations == () and second.preemptions == ()
    third = sim.step(240)
    assert started(third)[GANG].keys() == {"a00", "a01", "a02", "a03"}
    assert sim.is_running(300) and sim.preempted == []
