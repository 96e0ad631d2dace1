"""Placement rules (P1-P5): where a job lands, table-driven."""

from __future__ import annotations

import pytest

from scheduling.engine import Code, PolicyConfig

from .helpers import code, node, pjob, rack, rjob, run, snap, started


def test_small_job_best_fits_on_the_fullest_node_keeping_whole_nodes_whole():
    nodes = [node("a"), node("b"), node("c")]
    running = [rjob(1, {"a": range(5)}), rjob(2, {"b": range(2)})]
    plan = run(snap(nodes, [pjob(10, 3)], running))
    assert started(plan) == {10: {"a": (5, 6, 7)}}


@pytest.mark.parametrize(
    "free_a, free_b, gpus, expected",
    [
        (range(8), range(4, 8), 4, "b"),  # b has exactly 4 free
        (range(6, 8), range(8), 4, "b"),  # a too small
        (range(8), range(8), 8, "a"),  # tie: lowest index
        (range(1, 8), range(2, 8), 6, "b"),  # tightest fit
    ],
)
def test_best_fit_table(free_a, free_b, gpus, expected):
    nodes = [node("a", free=free_a), node("b", free=free_b)]
    plan = run(snap(nodes, [pjob(1, gpus)]))
    assert list(started(plan)[1]) == [expected]


def test_job_gets_the_lowest_free_gpu_indices_of_its_node():
    plan = run(snap([node("a", free=(1, 3, 5, 6))], [pjob(1, 3)]))
    assert started(plan)[1] == {"a": (1, 3, 5)}


def test_multi_node_job_takes_whole_nodes_in_one_rack():
    nodes = rack("x", 2, "r0") + rack("y", 4, "r1") + rack("z", 4, "r2")
    plan = run(snap(nodes, [pjob(1, 32, rdma=True)]))
    placement = started(plan)[1]
    assert sorted(placement) == ["y00", "y01", "y02", "y03"]
    assert all(len(g) == 8 for g in placement.values())


def test_multi_node_prefers_the_rack_it_fills_best():
    # r1 has exactly 2 whole nodes, r2 has 4: a 16-GPU job should not break r2.
    nodes = rack("y", 2, "r1") + rack("z", 4, "r2")
    plan = run(snap(nodes, [pjob(1, 16)]))
    assert sorted(started(plan)[1]) == ["y00", "y01"]


def test_multi_node_spans_fewest_racks_of_one_block_when_no_rack_suffices():
    nodes = (
        rack("a", 3, "r0", "b0")
        + rack("b", 1, "r1", "b0")
        + rack("c", 2, "r2", "b0")
        + rack("d", 4, "r3", "b1")[:2]
    )
    plan = run(snap(nodes, [pjob(1, 40)]))
    racks = {n[0] for n in started(plan)[1]}
    assert racks == {"a", "c"}  # 3 + 2 nodes, two racks of block b0


def test_multi_node_never_spans_network_blocks():
    nodes = rack("a", 2, "r0", "b0") + rack("b", 2, "r1", "b1")
    plan = run(snap(nodes, [pjob(1, 32)]))
    assert plan.verdicts[1].code == Code.NEVER_FITS
    assert "network block" in plan.verdicts[1].message


def test_uneven_multi_node_job_is_spread_evenly():
    plan = run(snap(rack("a", 3, "r0"), [pjob(1, 12)]))
    assert sorted(len(g) for g in started(plan)[1].values()) == [6, 6]


def test_gpus_per_node_is_respected():
    plan = run(snap(rack("a", 4, "r0"), [pjob(1, 8, gpus_per_node=2)]))
    placement = started(plan)[1]
    assert len(placement) == 4 and all(len(g) == 2 for g in placement.values())


def test_rdma_job_only_lands_on_rdma_nodes():
    nodes = [node("plain", rdma=False), node("fast", rdma=True, free=range(4, 8))]
    plan = run(snap(nodes, [pjob(1, 4, rdma=True)]))
    assert list(started(plan)[1]) == ["fast"]


def test_rdma_job_without_rdma_capacity_waits():
    nodes = [node("plain", rdma=False), node("fast", rdma=True, free=range(6, 8))]
    plan = run(snap(nodes, [pjob(1, 4, rdma=True)]))
    assert code(plan, 1) == Code.INSUFFICIENT_GPUS


def test_gpu_memory_requirement_is_respected():
    nodes = [node("small", gpu_memory_gb=40), node("big", gpu_memory_gb=80, free=range(4))]
    plan = run(snap(nodes, [pjob(1, 2, gpu_memory_gb=80)]))
    assert list(started(plan)[1]) == ["big"]


def test_gpu_model_requirement_is_respected():
    nodes = [node("a", gpu_model="A100"), node("h", gpu_model="H100", free=range(4))]
    plan = run(snap(nodes, [pjob(1, 2, gpu_model="H100")]))
    assert list(started(plan)[1]) == ["h"]


def test_pool_restricts_nodes():
    nodes = [node("a", pool="vc1"), node("b", pool="vc2")]
    plan = run(snap(nodes, [pjob(1, 8, pool="vc2")]))
    assert list(started(plan)[1]) == ["b"]


@pytest.mark.parametrize("state", ["cordoned", "draining", "down", "unhealthy"])
def test_never_lands_on_unavailable_nodes(state):
    nodes = [node("bad", state=state), node("good", free=range(4))]
    plan = run(snap(nodes, [pjob(1, 4), pjob(2, 4)]))
    assert started(plan) == {1: {"good": (0, 1, 2, 3)}}
    assert code(plan, 2) == Code.INSUFFICIENT_GPUS  # job 1 took the only usable GPUs


def test_exclusive_job_takes_a_wholly_free_node_and_nothing_lands_beside_it():
    nodes = [node("part", free=range(4, 8)), node("whole")]
    plan = run(snap(nodes, [pjob(1, 4, tier="core", exclusive_node=True), pjob(2, 4)]))
    s = started(plan)
    assert s[1] == {"whole": (0, 1, 2, 3)}
    assert s[2] == {"part": (4, 5, 6, 7)}


def test_exclusive_job_waits_when_no_node_is_wholly_free():
    plan = run(snap([node("part", free=range(2, 8))], [pjob(1, 2, exclusive_node=True)]))
    assert code(plan, 1) == Code.TOPOLOGY


def test_nothing_lands_on_a_node_held_exclusively():
    running = [rjob(1, {"a": range(4)}, tier="core", exclusive_node=True)]
    plan = run(snap([node("a")], [pjob(2, 2)], running))
    assert 2 not in started(plan)


def test_second_job_does_not_share_a_node_taken_exclusively_in_the_same_plan():
    plan = run(snap([node("a")], [pjob(1, 4, tier="core", exclusive_node=True), pjob(2, 4)]))
    assert 1 in started(plan) and 2 not in started(plan)


@pytest.mark.parametrize(
    "preemptible, avoid, lands",
    [(True, False, True), (False, False, False), (True, True, False)],
)
def test_training_on_inference_nodes_only_if_preemptible_and_willing(preemptible, avoid, lands):
    nodes = [node("inf", inference=True)]
    job = pjob(1, 4, preemptible=preemptible, avoid_inference=avoid)
    plan = run(snap(nodes, [job]))
    assert (1 in started(plan)) is lands


def test_preemptible_work_goes_to_nodes_without_inference_first():
    """Best fit alone would pick the shared node (4 free beside inference); inference
    traffic could stop the job there, so a node without inference comes first (#19) and
    the shared node's GPUs are the fallback."""
    nodes = [node("inf", free=range(4), inference=True), node("a", free=range(6))]
    job = pjob(1, 4, preemptible=True)
    assert list(started(run(snap(nodes, [job])))[1]) == ["a"]
    second = pjob(2, 4, preemptible=True)  # "a" has 2 left: the shared node takes it
    placed = started(run(snap(nodes, [job, second])))
    assert (list(placed[1]), list(placed[2])) == (["a"], ["inf"])


def test_prefers_node_that_recently_ran_the_same_model_among_equal_fits():
    nodes = [node("a", free=range(4)), node("b", free=range(4), recent_models=("llama",))]
    plan = run(snap(nodes, [pjob(1, 4, model_name="llama")]))
    assert list(started(plan)[1]) == ["b"]


def test_multi_node_prefers_rack_that_recently_ran_the_model():
    nodes = rack("a", 2, "r0") + rack("b", 2, "r1", recent_models=("llama",))
    plan = run(snap(nodes, [pjob(1, 16, model_name="llama")]))
    assert sorted(started(plan)[1]) == ["b00", "b01"]


def test_gang_is_all_or_nothing():
    # 3 whole nodes free, the job needs 4: nothing at all is started for it.
    nodes = rack("a", 4, "r0")
    plan = run(snap(nodes, [pjob(1, 32)], [rjob(9, {"a03": [0]})]))
    assert plan.starts == ()
    assert code(plan, 1) in (Code.INSUFFICIENT_GPUS, Code.TOPOLOGY)


def test_one_gpu_is_never_given_twice_within_a_plan():
    plan = run(snap([node("a")], [pjob(i, 3) for i in range(1, 5)]))
    gpus = [g for s in plan.starts for slot in s.placement for g in slot.gpus]
    assert sorted(gpus) == sorted(set(gpus)) and len(plan.starts) == 2


def test_policy_flag_combinations_still_place():
    for name in ("fifo", "priority", "backfill", "full"):
        plan = run(snap([node("a")], [pjob(1, 8)], policy=PolicyConfig.preset(name)))
        assert 1 in started(plan)


def test_runtime_aware_packing_puts_a_job_where_its_end_extends_the_busy_time_least():
    """``align_ends`` (#19): of two equally tight nodes, a long job goes beside long work and
    a short job beside short work, so each node falls wholly free at once."""
    from .helpers import HOUR, NOW

    nodes = [node("a", free=range(4, 8)), node("b", free=range(4, 8))]
    running = [rjob(8, {"a": range(4)}, predicted_end=NOW + HOUR),
               rjob(9, {"b": range(4)}, predicted_end=NOW + 10 * HOUR)]  # fmt: skip
    aligned = PolicyConfig(align_ends=True)
    long = pjob(1, 2, predicted_runtime_s=8 * HOUR)
    short = pjob(2, 2, predicted_runtime_s=0.5 * HOUR)
    assert list(started(run(snap(nodes, [long], running, policy=aligned)))[1]) == ["b"]
    assert list(started(run(snap(nodes, [short], running, policy=aligned)))[2]) == ["a"]
    # a job longer than every node's work goes where it extends the busy time least
    longest = pjob(3, 2, predicted_runtime_s=20 * HOUR)
    assert list(started(run(snap(nodes, [longest], running, policy=aligned)))[3]) == ["b"]
    # off: the lowest index, whatever the runtimes
    assert list(started(run(snap(nodes, [long], running)))[1]) == ["a"]
