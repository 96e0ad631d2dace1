"""Quota room held for an overdue job (#19, ``QuotaRoom.hold`` / ``held``).

On ITP a tenant's small jobs took every GPU of quota released before one of its large
jobs fitted, so under backfill the large job waited days longer than under strict FIFO.
With ``hold_quota_when_overdue`` an overdue job over quota holds its queue's or line's
room as a reservation holds nodes: later jobs of that scope start within quota only if
predicted to end before the room is due.
"""

from __future__ import annotations

from scheduling.engine import explain
from scheduling.engine import types as et

from .helpers import HOUR, NOW, code, node, pjob, rack, rjob, run, snap
from .test_verdict_readable import unreadable

DAY = 24 * HOUR
# line llm: quota 8; job 1 holds 4 of it until NOW + 2 h
RUNNING = [rjob(1, {"a00": range(4)}, tier="core", predicted_end=NOW + 2 * HOUR)]


def scenario(pending: list[et.PendingJob], **policy: object) -> et.Snapshot:
    knobs: dict[str, object] = dict(starvation_bound_s=DAY, hold_quota_when_overdue=True)
    knobs.update(policy)
    return snap(
        rack("a", 4, "r0"),
        pending,
        RUNNING,
        lines=[et.LineView("llm", 8)],
        policy=et.PolicyConfig.preset("backfill", **knobs),  # type: ignore[arg-type]
    )


OVERDUE = pjob(10, 8, tier="core", submitted_at=NOW - 2 * DAY)  # needs the whole quota
LONG = pjob(11, 4, tier="core", predicted_runtime_s=3 * HOUR)  # would end after the room
SHORT = pjob(12, 4, tier="core", predicted_runtime_s=HOUR)  # ends before it


def started_ids(result: et.Plan) -> list[int]:
    return [s.job_id for s in result.starts]


def test_without_the_hold_later_jobs_take_the_room():
    result = run(scenario([OVERDUE, LONG], hold_quota_when_overdue=False))
    assert started_ids(result) == [11]
    assert code(result, 10) == "QUOTA_EXCEEDED"


def test_an_overdue_job_holds_its_lines_quota_room():
    result = run(scenario([OVERDUE, LONG]))
    assert started_ids(result) == []
    assert code(result, 10) == "QUOTA_EXCEEDED"
    v = result.verdicts[11]
    assert v.code == "PRIORITY"
    assert v.details["quota_held_for"] == 10
    assert (v.details["scope"], v.details["name"]) == ("line", "llm")
    assert "starvation bound" in v.message


def test_work_predicted_to_end_before_the_room_is_due_still_starts():
    result = run(scenario([OVERDUE, LONG, SHORT]))
    assert started_ids(result) == [12]
    assert code(result, 11) == "QUOTA_EXCEEDED"  # the line is full now: the first code


def test_a_job_not_yet_overdue_holds_nothing():
    fresh = pjob(10, 8, tier="core", submitted_at=NOW - HOUR)
    assert started_ids(run(scenario([fresh, LONG]))) == [11]


def test_a_job_larger_than_the_whole_quota_holds_nothing():
    huge = pjob(10, 16, tier="core", submitted_at=NOW - 2 * DAY)
    assert started_ids(run(scenario([huge, LONG]))) == [11]


def test_other_lines_are_not_held():
    other = pjob(13, 4, tier="core", line="search", predicted_runtime_s=3 * HOUR)
    s = snap(
        rack("a", 4, "r0"),
        [OVERDUE, other],
        RUNNING,
        lines=[et.LineView("llm", 8), et.LineView("search", 8)],
        policy=et.PolicyConfig.preset(
            "backfill", starvation_bound_s=DAY, hold_quota_when_overdue=True
        ),
    )
    assert started_ids(run(s)) == [13]


def test_nodes_unavailable_reads_before_the_hold():
    """API.md's order: NODES_UNAVAILABLE before PRIORITY. A job that fits its quota but
    whose only matching node is cordoned reads NODES_UNAVAILABLE even behind a hold."""
    big_memory = pjob(14, 4, tier="core", gpu_memory_gb=141, predicted_runtime_s=3 * HOUR)
    nodes = [*rack("a", 4, "r0"), node("h00", rack="r1", gpu_memory_gb=141, state=et.CORDONED)]
    s = snap(
        nodes,
        [OVERDUE, big_memory],
        RUNNING,
        lines=[et.LineView("llm", 8)],
        policy=et.PolicyConfig.preset("backfill"),
    )
    assert code(run(s), 14) == "NODES_UNAVAILABLE"
    assert code(run(scenario([OVERDUE, LONG])), 11) == "PRIORITY"


# Session 32: an overdue job that holds its quota room reserves nodes from then too.
# Line vision (quota 8) holds 4 GPUs on node a until +1 h, so an overdue 8-GPU vision job
# has its room at +1 h; but node a is whole only at +2 h (an llm job) and node b at +3 h.
SPLIT_NODES = [
    rjob(1, {"a": range(4)}, tier="core", line="vision", predicted_end=NOW + HOUR),
    rjob(2, {"a": range(4, 7)}, tier="core", predicted_end=NOW + 2 * HOUR),
    rjob(3, {"b": range(8)}, tier="core", predicted_end=NOW + 3 * HOUR),
]
OVERDUE_VISION = pjob(20, 8, tier="core", line="vision", submitted_at=NOW - 2 * DAY)
LLM_LONG = pjob(21, 1, predicted_runtime_s=3 * HOUR)  # node a's free GPU, past +2 h
LLM_SHORT = pjob(22, 1, predicted_runtime_s=HOUR)  # ends before +2 h


def split_nodes(pending: list[et.PendingJob], preset: str, hold: bool = True) -> et.Plan:
    policy = et.PolicyConfig.preset(preset, starvation_bound_s=DAY, hold_quota_when_overdue=hold)  # type: ignore[arg-type]
    return run(
        snap(
            [node("a"), node("b")],
            pending,
            SPLIT_NODES,
            lines=[et.LineView("llm", None), et.LineView("vision", 8)],
            policy=policy,
        )
    )


def reservation(result: et.Plan, job_id: int) -> tuple[tuple[str, ...], float | None] | None:
    got = [(r.nodes, r.expected_start) for r in result.reservations if r.job_id == job_id]
    return got[0] if got else None


def test_an_overdue_job_waiting_for_quota_reserves_nodes_from_when_they_free():
    """Hypothesis found the gap (session 31's known limit): a gang waiting for its quota
    room held the room but no nodes, so other lines' work split the nodes just before the
    room came, and it waited one runtime more. Now its reservation starts when both are
    there: node a, at +2 h, which a later llm job running past it may not take."""
    for preset in ("backfill", "full"):
        result = split_nodes([OVERDUE_VISION, LLM_LONG, LLM_SHORT], preset)
        assert started_ids(result) == [22], preset  # the short one backfills
        assert reservation(result, 20) == (("a",), NOW + 2 * HOUR), preset
        v = result.verdicts[20]
        assert v.code == "QUOTA_EXCEEDED"
        assert v.estimated_start == NOW + 2 * HOUR
        assert v.details["quota_room_at"] == explain.iso(NOW + HOUR)
        assert v.details["reservation_starts_at"] == explain.iso(NOW + 2 * HOUR)
        assert v.remedy.startswith(
            "Starts once 4 GPUs of line vision are released and its reserved nodes free "
            f"(predicted by {explain.when(NOW + 2 * HOUR)})"
        )
        assert unreadable(v) == []  # the one time it names is its estimate
        alone = split_nodes([OVERDUE_VISION, LLM_LONG], preset)
        assert started_ids(alone) == [], preset
        assert alone.verdicts[21].code == "PRIORITY"  # it would fit now but for the reservation


def test_without_the_hold_nothing_is_reserved_for_a_quota_wait():
    result = split_nodes([OVERDUE_VISION, LLM_LONG], "backfill", hold=False)
    assert started_ids(result) == [21]  # node a's free GPU, past when a frees
    assert reservation(result, 20) is None
    assert result.verdicts[20].estimated_start == NOW + HOUR


def test_a_quota_wait_not_yet_overdue_reserves_nothing():
    fresh = pjob(20, 8, tier="core", line="vision", submitted_at=NOW - HOUR)
    result = split_nodes([fresh, LLM_LONG], "full")
    assert started_ids(result) == [21]
    assert reservation(result, 20) is None
