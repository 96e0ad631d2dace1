"""The placement building blocks, called directly: classes, topology, the free-capacity
index and the generic placement over counts (P1-P5)."""

from __future__ import annotations

import pytest

from scheduling.engine.placement import (
    Cluster,
    Topology,
    choose_racks,
    class_key,
    node_matches,
    pick_nodes,
    place_on_counts,
)

from .helpers import node, rjob

ANY = class_key(None, False, True, None, None)


def three_racks() -> list:
    """b0: r0 = a, b; r1 = c. b1: r0 = d (a rack name may repeat in another block)."""
    return [
        node("a", rack="r0", block="b0"),
        node("b", rack="r0", block="b0", free=range(2, 8)),
        node("c", rack="r1", block="b0", free=(0, 1)),
        node("d", rack="r0", block="b1", recent_models=("llama",)),
    ]


# -- classes ---------------------------------------------------------------------------


def test_class_key_normalises_its_parts():
    assert class_key(None, 1, 0, None, None) == (0, True, False, None, None)
    assert class_key(80, False, True, "vc1", "H100") == (80, False, True, "vc1", "H100")


@pytest.mark.parametrize(
    "attrs, key, ok",
    [
        ({}, (80, True, False, None, None), True),
        ({"gpu_memory_gb": 40}, (80, False, True, None, None), False),
        ({"rdma": False}, (0, True, True, None, None), False),
        ({"rdma": False}, (0, False, True, None, None), True),
        ({"inference": True}, (0, False, False, None, None), False),
        ({"inference": True}, (0, False, True, None, None), True),
        ({"pool": "vc1"}, (0, False, True, "vc2", None), False),
        ({"pool": "vc1"}, (0, False, True, None, None), True),
        ({}, (0, False, True, None, "A100"), False),
        ({}, (0, False, True, None, "H100"), True),
    ],
)
def test_node_matches(attrs, key, ok):
    assert node_matches(node("n", **attrs), key) is ok


# -- topology --------------------------------------------------------------------------


def test_topology_numbers_racks_by_block_then_name():
    topo = Topology(three_racks())
    assert topo.index == {"a": 0, "b": 1, "c": 2, "d": 3}
    assert topo.rack_label == ["r0", "r1", "r0"]
    assert topo.block_label == ["b0", "b1"]
    assert topo.rack_of == [0, 0, 1, 2]
    assert topo.rack_block == [0, 0, 1]
    assert topo.block_of == [0, 0, 0, 1]
    assert topo.block_racks == [[0, 1], [2]]
    assert topo.model_nodes == {"llama": [3]} and topo.model_racks == {"llama": {2: 1}}
    assert topo.rack_affinity("llama") == {2: 1}
    assert topo.rack_affinity(None) == {} and topo.rack_affinity("bert") == {}


def test_topology_sizes():
    topo = Topology([node("a", gpus=4), node("b", gpus=-2, free=())])
    assert topo.total == [4, 0] and topo.max_gpus == 4
    assert Topology([]).max_gpus == 8  # an empty cluster still has a node size


def test_static_and_class_eligibility():
    nodes = [
        node("a"),
        node("b", state="down"),
        node("c", exclusive=True),
        node("d", gpu_memory_gb=40),
    ]
    topo = Topology(nodes)
    key = class_key(80, False, True, None, None)
    assert list(topo.static_elig(key)) == [1, 1, 1, 0]
    elig, racks = topo.class_nodes(key)
    assert list(elig) == [1, 0, 0, 0] and racks == {0: [0]}


def test_slots_and_gpus_by_node_skip_unknown_nodes():
    topo = Topology(three_racks())
    a = rjob(1, [("a", (0, 1)), ("zz", (0,)), ("c", (0,))])
    b = rjob(2, {"a": (2, 3, 4)})
    assert topo.slots_of(a) == [(0, 2), (2, 1)]
    assert topo.gpus_by_node([a, b]) == {0: 5, 2: 1}
    assert topo.gpus_by_node([a, b], only={2}) == {2: 1}
    assert topo.gpus_by_node([]) == {}


# -- choosing racks and nodes ----------------------------------------------------------


def test_choose_racks_prefers_affinity_then_the_rack_it_fills_best():
    topo = Topology([node(f"n{i}", rack=f"r{i % 3}") for i in range(9)])
    counts = {0: 3, 1: 2, 2: 2}
    assert choose_racks(topo, 2, counts, {}) == [1]  # fewest qualifying, lowest
    assert choose_racks(topo, 2, counts, {2: 1}) == [2]  # the model ran there
    assert choose_racks(topo, 3, counts, {2: 1}) == [0]  # only r0 is big enough


def test_choose_racks_falls_back_to_the_fewest_racks_of_one_block():
    nodes = [node(f"x{i}", rack=f"r{i}", block="b0") for i in range(3)]
    nodes += [node(f"y{i}", rack=f"s{i}", block="b1") for i in range(2)]
    topo = Topology(nodes)
    assert topo.block_racks == [[0, 1, 2], [3, 4]]
    # b0's racks have 1 qualifying node each, b1's 2 each
    counts = {0: 1, 1: 1, 2: 1, 3: 2, 4: 2}
    assert choose_racks(topo, 3, counts, {}) == [3, 4]  # two racks of b1, not three of b0
    assert choose_racks(topo, 5, counts, {}) is None  # never across blocks
    # equally few racks: the lower block, its fullest racks first
    assert choose_racks(topo, 3, {0: 1, 1: 2, 3: 2, 4: 2}, {}) == [1, 0]


def test_pick_nodes_takes_best_fit_first_inside_the_racks():
    models = [frozenset(), frozenset(), frozenset({"m"}), frozenset()]
    counts = [8, 4, 4, 2]
    qual = {0: [0, 1, 2], 1: [3]}
    assert pick_nodes(2, [0, 1], qual, counts, models, None) == [1, 2]
    assert pick_nodes(1, [0, 1], qual, counts, models, None) == [1]
    assert pick_nodes(1, [0, 1], qual, counts, models, "m") == [2]  # the model ran there
    assert pick_nodes(4, [0, 1], qual, counts, models, None) == [0, 1, 2, 3]
    assert pick_nodes(1, [1, 0], qual, counts, models, None) == [3]


@pytest.mark.parametrize(
    "counts, k, c, exclusive, model, expected",
    [
        ([8, 6, 2, 8], 1, 2, False, None, [2]),  # best fit
        ([8, 6, 2, 8], 1, 4, False, None, [1]),
        ([8, 6, 2, 8], 1, 8, False, None, [0]),  # lowest index on a tie
        # whole-rack capacity before the model: d (b1/r0) is a whole free rack
        ([8, 6, 2, 8], 1, 8, False, "llama", [0]),
        ([8, 8, 2, 8], 1, 8, False, None, [3]),  # both racks whole: break the smaller
        ([6, 6, 2, 8], 1, 4, True, None, [3]),  # exclusive: only a whole node
        ([8, 8, 2, 8], 2, 8, False, None, [0, 1]),  # one rack
        ([8, 0, 8, 8], 2, 8, False, None, [0, 2]),  # two racks of one block
        ([8, 0, 0, 8], 2, 8, False, None, None),  # never across blocks
        ([8, 8, 8, 8], 5, 8, False, None, None),
    ],
)
def test_place_on_counts(counts, k, c, exclusive, model, expected):
    topo = Topology(three_racks())
    assert place_on_counts(topo, [1, 1, 1, 1], counts, k, c, exclusive, model) == expected


def test_place_on_counts_only_uses_eligible_nodes():
    topo = Topology(three_racks())
    assert place_on_counts(topo, [0, 1, 1, 1], [8, 8, 8, 8], 1, 8, False, None) == [1]
    assert place_on_counts(topo, [0, 0, 0, 0], [8, 8, 8, 8], 1, 1, False, None) is None


# -- the live index --------------------------------------------------------------------


def test_cluster_indexes_usable_nodes_by_free_gpus():
    nodes = [
        node("a", free=(7, 3, 3, 9, -1)),  # duplicates and bad indices dropped
        node("b", free=range(2, 8)),
        node("c", state="cordoned"),
        node("d", exclusive=True),
    ]
    live = Cluster(Topology(nodes))
    assert live.free[0] == [3, 7] and live.nfree == [2, 6, 8, 8]
    assert list(live.usable) == [1, 1, 0, 0]
    assert live.buckets[2] == [0] and live.buckets[6] == [1] and live.buckets[8] == []
    assert live.usable_counts() == [2, 6, 0, 0]


def test_take_gives_the_lowest_free_gpus_and_reindexes():
    live = Cluster(Topology(three_racks()))
    cls = live.node_class(ANY)
    assert live.take(1, 2, False) == (2, 3)
    assert live.nfree[1] == 4 and live.buckets[4] == [1]
    assert cls.hist[0][4] == 1 and cls.hist[0][6] == 0 and cls.tot_hist[4] == 1
    with pytest.raises(ValueError, match="fewer than 5 free GPUs"):
        live.take(1, 5, False)


def test_taking_a_node_exclusively_or_blocking_it_makes_it_unusable():
    live = Cluster(Topology(three_racks()))
    cls = live.node_class(ANY)
    assert live.take(0, 1, True) == (0,)
    live.block(3)
    live.block(3)  # idempotent
    assert list(live.usable) == [0, 1, 1, 0]
    assert 0 not in live.buckets[7] and 3 not in live.buckets[8]
    assert cls.tot_whole[8] == 0 and live.free_gpus_of(cls) == 6 + 2


def test_copy_is_a_frozen_view_of_capacity_at_that_moment():
    live = Cluster(Topology(three_racks()))
    before = live.copy()
    live.take(0, 8, False)
    assert before.nfree[0] == 8 and live.nfree[0] == 0
    assert before.find(before.node_class(ANY), 1, 8, False, None) == [0]


def test_node_class_histograms_count_free_and_whole_nodes_per_rack():
    live = Cluster(Topology(three_racks()))
    cls = live.node_class(ANY)
    assert live.node_class(ANY) is cls
    assert cls.rack_nodes == {0: [0, 1], 1: [2], 2: [3]}
    assert cls.hist[0][8] == 1 and cls.hist[0][6] == 1 and cls.whole[0][8] == 1
    assert cls.tot_hist[8] == 2 and cls.tot_whole[8] == 2 and cls.tot_hist[2] == 1
    assert live.free_gpus_of(cls) == 8 + 6 + 2 + 8


@pytest.mark.parametrize(
    "k, c, exclusive, model, expected",
    [
        (1, 2, False, None, [2]),
        (1, 3, False, None, [1]),
        (1, 8, False, None, [0]),
        (1, 8, False, "llama", [0]),  # r0 is partly used, d's rack is whole: keep it
        (1, 9, False, None, None),
        (2, 6, False, None, [0, 1]),
        (2, 8, True, None, None),
        (3, 2, False, None, [0, 1, 2]),  # r0 whole, then r1 of the same block
    ],
)
def test_find_on_the_live_index(k, c, exclusive, model, expected):
    live = Cluster(Topology(three_racks()))
    assert live.find(live.node_class(ANY), k, c, exclusive, model) == expected
