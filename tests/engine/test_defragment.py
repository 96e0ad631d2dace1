"""Defragmentation (#19): with ``defragment_nodes`` > 0 the planner empties partly used
nodes before a gang asks, moving their jobs into holes on fuller nodes.

Scenario: four 8-GPU nodes. n00 runs one 1-GPU checkpointable job (7 GPUs free), n01 and
n02 are 7/8 used by core work (1 free each), n03 is wholly free. A 1-GPU job of another
line waits, over its line's quota and not preemptible (it may not borrow), so nothing
starts: 9 free GPUs sit on partly used nodes. Moving n00's job into a hole of n01 or n02
frees n00 whole.
"""

from __future__ import annotations

import dataclasses

import pytest

from scheduling.engine import check_plan, plan
from scheduling.engine import types as et

from .helpers import HOUR, NOW, node, pjob, rjob, run, snap

SMALL = 100
MOVABLE = dict(checkpointable=True, started_at=NOW - 2 * HOUR, predicted_end=NOW + 10 * HOUR)
ON = et.PolicyConfig(defragment_nodes=1)


def state(
    small: dict | None = None,
    policy: et.PolicyConfig = ON,
    queues: list | None = None,
    llm_quota: int | None = None,
) -> et.Snapshot:
    nodes = [node(f"n{i:02d}") for i in range(4)]
    running = [rjob(SMALL, {"n00": [0]}, **{**MOVABLE, **(small or {})})]
    running += [
        rjob(200 + i, {f"n{i:02d}": range(7)}, tier="core", started_at=NOW - HOUR,
             predicted_end=NOW + 10 * HOUR)
        for i in (1, 2)
    ]  # fmt: skip
    waiting = [pjob(1, 1, line="cv", preemptible=False)]  # over quota, may not borrow
    lines = [et.LineView("llm", llm_quota), et.LineView("cv", 0)]
    return snap(nodes, waiting, running, lines=lines, queues=queues, policy=policy)


def test_a_lone_small_job_moves_into_a_hole_and_its_node_comes_free_whole():
    result = run(state())
    assert result.starts == ()
    assert [(m.job_id, m.for_job_id) for m in result.migrations] == [(SMALL, None)]
    assert result.migrations[0].to_node in ("n01", "n02")  # a hole, never the free n03
    assert result.migrations[0].grace_deadline == NOW + ON.grace_seconds
    assert result.preemptions == ()  # a move, not a preemption


def test_off_by_default_nothing_moves():
    assert et.PolicyConfig().defragment_nodes == 0
    assert run(state(policy=et.PolicyConfig())).migrations == ()


@pytest.mark.parametrize(
    "change",
    [
        dict(preemptible=False),
        dict(checkpointable=False),
        dict(preemption_count=4),  # demoted (demote_after 3)
        dict(started_at=NOW - 600),  # moved or started too recently
        dict(predicted_end=NOW + 1800),  # ends within defragment_min_left_s by itself
    ],
)
def test_work_that_may_not_move_stays(change):
    assert run(state(change)).migrations == ()


def test_borrowed_work_stays():
    """Over its line's quota the small job runs on borrowed capacity: reclaimed, not moved."""
    assert run(state(dict(borrowed=True), llm_quota=14)).migrations == ()
    assert run(state(llm_quota=15)).migrations  # within the quota it moves


def test_guaranteed_work_stays():
    """The small job's queue holds exactly its guarantee: moving it would take it below."""
    queues = [
        et.QueueView("llm-experiment", "llm", et.Tier.EXPERIMENT, None, 1),
        et.QueueView("llm-core", "llm", et.Tier.CORE, None),
        et.QueueView("cv-experiment", "cv", et.Tier.EXPERIMENT, None),
    ]
    assert run(state(queues=queues)).migrations == ()


def test_no_move_when_the_holes_cannot_make_a_whole_node():
    """With n02 full, 8 GPUs are free on partly used nodes but the job has one hole to go
    to; take that hole away too and there is nowhere to gather a node."""
    s = state()
    nodes = [
        dataclasses.replace(n, free_gpus=()) if n.name in ("n01", "n02") else n for n in s.nodes
    ]
    result = run(dataclasses.replace(s, nodes=tuple(nodes)))
    assert result.migrations == ()


def test_the_checker_refuses_a_move_for_no_gang_when_defragmentation_is_off():
    s = state()
    moved = plan(s, NOW)
    assert moved.migrations
    off = dataclasses.replace(s, policy=et.PolicyConfig())
    errors = check_plan(off, moved)
    assert any("defragmentation is off" in e for e in errors), errors


def test_the_checker_refuses_a_half_emptied_node():
    """A second movable job on n00 that the plan leaves behind: n00 does not come free."""
    s = state()
    moved = plan(s, NOW)
    other = rjob(101, {"n00": [1]}, **MOVABLE)
    nodes = tuple(
        dataclasses.replace(n, free_gpus=tuple(g for g in n.free_gpus if g != 1))
        if n.name == "n00" else n
        for n in s.nodes
    )  # fmt: skip
    half = dataclasses.replace(s, nodes=nodes, running=(*s.running, other))
    errors = check_plan(half, moved)
    assert any("jobs stay on it" in e for e in errors), errors


def test_a_node_a_job_just_moved_to_is_not_emptied_in_the_same_plan():
    """A (1 GPU used) empties into B's hole (B: two 3-GPU movable jobs, 2 free); C and D are
    partly used by core work (6 and 2 free). B is next by use, and its jobs would fit on C,
    but A's job now has room on B: emptying B would not free it, so B stays."""
    nodes = [node(n) for n in ("A", "B", "C", "D")]
    running = [
        rjob(1, {"A": [0]}, **MOVABLE),
        rjob(2, {"B": [0, 1, 2]}, **MOVABLE),
        rjob(3, {"B": [3, 4, 5]}, **MOVABLE),
        rjob(4, {"C": [0, 1]}, tier="core", predicted_end=NOW + 10 * HOUR),
        rjob(5, {"D": range(6)}, tier="core", predicted_end=NOW + 10 * HOUR),
    ]
    waiting = [pjob(9, 1, line="cv", preemptible=False)]
    lines = [et.LineView("llm", None), et.LineView("cv", 0)]
    policy = et.PolicyConfig(defragment_nodes=2, max_migrations_per_queue=4)
    result = run(snap(nodes, waiting, running, lines=lines, policy=policy))
    assert [(m.job_id, m.to_node) for m in result.migrations] == [(1, "B")]
