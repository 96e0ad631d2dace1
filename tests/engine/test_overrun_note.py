"""A waiting job whose estimated start is the release of a run past its predicted end says
which run and how long it has run (``scheduling.engine.overrun_note``, session 38)."""

from __future__ import annotations

from scheduling.engine import LineView, PolicyConfig, explain
from scheduling.engine.line_estimate import ESTIMATE_BASIS, LINE
from scheduling.engine.overrun_note import OVERRUN_JOB, OVERRUN_RAN

from .helpers import HOUR, NOW, node, pjob, rjob, run, snap

OVERRUN_S = PolicyConfig().overrun_s


def whole_node_wait(overrun_started: float, other_end: float) -> tuple:
    """Two busy nodes: n0's run started at ``overrun_started`` and is past its predicted
    end; n1's is predicted to end at ``other_end``. One job of a whole node waits."""
    nodes = [node("n0"), node("n1")]
    running = [
        rjob(1, {"n0": range(8)}, tier="core", started_at=overrun_started, predicted_end=NOW - 60),
        rjob(2, {"n1": range(8)}, tier="core", predicted_end=other_end),
    ]
    return nodes, running, [pjob(10, 8, tier="core", gpus_per_node=8)]


def test_a_reservation_on_an_overrunning_runs_node_names_the_run():
    nodes, running, pending = whole_node_wait(NOW - 19 * HOUR, NOW + 5 * HOUR)
    plan = run(snap(nodes, pending, running))
    v = plan.verdicts[10]
    # the plan's own guess, unchanged: the run ends overrun_s from now, so n0 is reserved
    assert [r.nodes for r in plan.reservations] == [("n0",)]
    assert v.estimated_start == NOW + OVERRUN_S
    assert v.details[OVERRUN_JOB] == 1 and v.details[OVERRUN_RAN] == 19 * 3600
    assert "Its estimate waits for job 1, which has run 19 h, past its predicted end" in v.message
    assert "each cycle expects it within 30 min, so this estimate keeps moving later" in v.message


def test_no_note_when_the_estimate_is_another_release():
    # n1 frees first (in 10 min): the reservation is there, the overrun is not waited on
    nodes, running, pending = whole_node_wait(NOW - 19 * HOUR, NOW + 600)
    v = run(snap(nodes, pending, running)).verdicts[10]
    assert v.estimated_start == NOW + 600
    assert OVERRUN_JOB not in v.details and "past its predicted end" not in v.message


def test_the_longest_running_overrun_of_a_lines_quota_room_is_named():
    # line llm holds its 16-GPU quota with two runs past their ends: the room comes with them
    nodes = [node("n0"), node("n1"), node("n2")]
    running = [
        rjob(1, {"n0": range(8)}, tier="core", started_at=NOW - 3 * HOUR, predicted_end=NOW - 1),
        rjob(2, {"n1": range(8)}, tier="core", started_at=NOW - 8 * HOUR, predicted_end=NOW - 1),
    ]
    plan = run(snap(nodes, [pjob(10, 8, tier="core")], running, lines=[LineView("llm", 16)]))
    v = plan.verdicts[10]
    assert v.code == "QUOTA_EXCEEDED" and v.estimated_start == NOW + OVERRUN_S
    assert v.details[OVERRUN_JOB] == 2 and v.details[OVERRUN_RAN] == 8 * 3600


def test_a_turn_in_the_line_on_an_overrunning_runs_gpus_names_it():
    # n0: 4 GPUs held by a run past its end, 4 free. Job 10 starts on the free ones; job 11
    # (4 GPUs, no reservations) gets the overrun's 4 in its turn, overrun_s from now
    nodes = [node("n0", free=range(4, 8))]
    running = [
        rjob(1, {"n0": range(4)}, tier="core", started_at=NOW - 2 * HOUR, predicted_end=NOW - 1)
    ]
    pending = [
        pjob(10, 4, tier="core", predicted_runtime_s=HOUR),
        pjob(11, 4, tier="core", predicted_runtime_s=HOUR),
    ]
    plan = run(snap(nodes, pending, running, policy=PolicyConfig(max_reservations=0)))
    v = plan.verdicts[11]
    assert v.details[ESTIMATE_BASIS] == LINE and v.estimated_start == NOW + OVERRUN_S
    assert v.details[OVERRUN_JOB] == 1 and v.details[OVERRUN_RAN] == 2 * 3600


def test_every_noted_verdict_is_readable_and_its_estimate_is_the_overrun_release():
    nodes, running, pending = whole_node_wait(NOW - 2 * HOUR, NOW + 5 * HOUR)
    plan = run(snap(nodes, pending, running))
    noted = {j: v for j, v in plan.verdicts.items() if OVERRUN_JOB in v.details}
    assert set(noted) == {10}
    for v in noted.values():
        assert v.estimated_start == NOW + OVERRUN_S
        assert v.details[OVERRUN_RAN] == 2 * 3600 and isinstance(v.details[OVERRUN_RAN], int)
        assert explain.NO_ESTIMATE not in v.details


def test_a_preemptor_whose_victims_stop_then_is_not_told_of_an_overrun():
    # n0: a preemptible run, and beside it a run past its end. The urgent job's victim
    # checkpoints for overrun_s, so its deadline is the overrun's release time too
    policy = PolicyConfig(grace_seconds=OVERRUN_S)
    nodes = [node("n0")]
    running = [
        rjob(1, {"n0": range(4)}, tier="experiment"),
        rjob(2, {"n0": range(4, 8)}, tier="core", started_at=NOW - 5 * HOUR, predicted_end=NOW - 1),
    ]
    plan = run(snap(nodes, [pjob(10, 4, tier="urgent")], running, policy=policy))
    v = plan.verdicts[10]
    assert v.code == "PREEMPTING" and v.estimated_start == NOW + OVERRUN_S
    assert [r.nodes for r in plan.reservations] == [("n0",)]
    assert OVERRUN_JOB not in v.details and "past its predicted end" not in v.message
