"""The release timeline behind reservations (S3), called directly."""

from __future__ import annotations

from scheduling.engine.backfill import Timeline
from scheduling.engine.placement import Topology

from .helpers import NOW, node

ALL = [1, 1, 1]


def topo() -> Topology:
    """a, b in rack r0 of block b0; c alone in block b1; 8 GPUs each."""
    return Topology([node("a", rack="r0"), node("b", rack="r0"), node("c", rack="r1", block="b1")])


def test_events_come_out_in_time_order():
    tl = Timeline()
    tl.add(NOW + 20, 1, 4, job_id=7)
    tl.add(NOW + 10, 0, 8)
    assert tl.ordered() == [(NOW + 10, 0, 8, 1), (NOW + 20, 1, 4, 0)]


def test_move_voids_a_job_s_releases_and_adds_its_new_ones():
    tl = Timeline()
    tl.add(NOW + 100, 0, 4, job_id=7)
    tl.add(NOW + 100, 1, 4, job_id=7)
    tl.add(NOW + 50, 2, 8, job_id=8)
    tl.move(7, NOW + 10, [(0, 8)])
    assert tl.voided == {0, 1}
    assert tl.ordered()[0] == (NOW + 10, 0, 8, 3)
    tl.move(99, NOW, [])  # a job with no releases: nothing happens
    assert tl.voided == {0, 1} and len(tl.events) == 4


def test_earliest_start_is_now_when_it_already_fits():
    tl = Timeline()
    tl.add(NOW + 100, 0, 8)
    assert tl.earliest_start(topo(), ALL, [0, 8, 8], 1, 8, False, None, NOW) == (NOW, [1])


def test_earliest_start_is_the_first_release_that_makes_room():
    tl = Timeline()
    tl.add(NOW + 300, 0, 4)
    tl.add(NOW + 100, 0, 2)
    tl.add(NOW + 200, 1, 8)
    # a has 2 free, b none: 4 GPUs on one node first exist on a at +100 ...
    assert tl.earliest_start(topo(), ALL, [2, 0, 0], 1, 4, False, None, NOW) == (
        NOW + 100,
        [0],
    )
    # ... and 8 on one node at +200 (b), before a is whole at +300.
    assert tl.earliest_start(topo(), ALL, [2, 0, 0], 1, 8, False, None, NOW) == (
        NOW + 200,
        [1],
    )


def test_a_release_in_the_past_means_now():
    tl = Timeline()
    tl.add(NOW - 50, 0, 8)
    assert tl.earliest_start(topo(), ALL, [0, 0, 0], 1, 8, False, None, NOW) == (NOW, [0])


def test_a_gang_waits_until_one_block_has_enough_nodes():
    tl = Timeline()
    tl.add(NOW + 100, 2, 8)  # c is alone in its block: no help
    tl.add(NOW + 200, 0, 8)
    tl.add(NOW + 300, 1, 8)
    got = tl.earliest_start(topo(), ALL, [0, 0, 0], 2, 8, False, None, NOW)
    assert got == (NOW + 300, [0, 1])


def test_releases_never_exceed_a_node_and_exclusive_jobs_need_it_whole():
    tl = Timeline()
    tl.add(NOW + 50, 0, 8)  # 4 free + 8 released: 8 (whole), not 12
    tl.add(NOW + 100, 1, 2)
    got = tl.earliest_start(topo(), ALL, [4, 6, 0], 1, 8, True, None, NOW)
    assert got == (NOW + 50, [0])
    # b has 6 free: only whole at +100 when its 2 come back
    got = tl.earliest_start(topo(), [0, 1, 0], [4, 6, 0], 1, 4, True, None, NOW)
    assert got == (NOW + 100, [1])


def test_voided_events_and_ineligible_nodes_do_not_count():
    tl = Timeline()
    tl.add(NOW + 100, 0, 8, job_id=7)
    tl.add(NOW + 200, 1, 8)
    tl.move(7, NOW + 400, [(0, 8)])
    assert tl.earliest_start(topo(), ALL, [0, 0, 0], 1, 8, False, None, NOW) == (
        NOW + 200,
        [1],
    )
    assert tl.earliest_start(topo(), [1, 0, 0], [0, 0, 0], 1, 8, False, None, NOW) == (
        NOW + 400,
        [0],
    )


def test_never_when_nothing_is_released_in_time():
    tl = Timeline()
    tl.add(NOW + 100, 0, 4)
    assert tl.earliest_start(topo(), ALL, [0, 0, 0], 1, 8, False, None, NOW) is None
    assert Timeline().earliest_start(topo(), ALL, [0, 0, 0], 3, 8, False, None, NOW) is None


def test_the_model_s_node_wins_a_tie():
    t = Topology([node("a"), node("b", recent_models=("llama",))])
    got = Timeline().earliest_start(t, [1, 1], [8, 8], 1, 8, False, "llama", NOW)
    assert got == (NOW, [1])
