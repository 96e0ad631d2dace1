"""How a start's placement reads on a job's timeline (``fmt_placement``): GPUs listed where
a node lends part of them, whole nodes by name, consecutive ones as a range. A 256-GPU
job's line listed 32 nodes with 8 GPU indices each (session 33, the full demo)."""

from __future__ import annotations

from scheduling.cycle.context import fmt_placement, node_ranges
from scheduling.engine.types import Slot

SIZES = {f"r005-n{i:02d}": 8 for i in range(32)} | {"a0": 4, "a1": 4}


def whole(name: str) -> Slot:
    return Slot(name, tuple(range(SIZES[name])))


def test_a_gang_of_whole_nodes_reads_as_ranges():
    slots = [whole(f"r005-n{i:02d}") for i in range(32) if i != 6]
    assert fmt_placement(slots, SIZES) == (
        "31 whole nodes (248 GPUs): r005-n00 to r005-n05, r005-n07 to r005-n31"
    )


def test_part_of_a_node_lists_its_gpus_and_a_whole_one_says_so():
    assert fmt_placement([Slot("a0", (1, 3))], SIZES) == "a0[1,3]"
    assert fmt_placement([whole("a0")], SIZES) == "a0 (whole node, 4 GPUs)"
    assert fmt_placement([whole("a0"), Slot("a1", (0,))], SIZES) == (
        "a0 (whole node, 4 GPUs); a1[0]"
    )


def test_without_the_nodes_sizes_every_node_lists_its_gpus():
    assert fmt_placement([whole("a0"), Slot("a1", (2,))]) == "a0[0,1,2,3], a1[2]"


def test_only_runs_of_three_or_more_become_ranges():
    assert node_ranges(["n1", "n2", "x", "n4", "n5", "n6", "n08", "n09", "n10"]) == (
        "n1, n2, x, n4 to n6, n08 to n10"
    )
    assert node_ranges(["n9", "n10", "n11"]) == "n9, n10, n11"  # widths differ
