"""Scheduled maintenance in the engine (``NodeView.unavailable_from``): a node entering
maintenance takes only work predicted to end before the maintenance starts; nothing is
reserved, preempted for or moved there; a job that fits only with such nodes waits as
NODES_UNAVAILABLE naming the maintenance."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import check_plan, plan
from scheduling.engine import types as et
from scheduling.engine.policy import job_runtime
from tests.engine.helpers import HOUR, NOW, code, node, pjob, rjob, run, snap, started, victims
from tests.engine.strategies import snapshots

MAINT = NOW + 2 * HOUR  # the window starts in two hours


def test_a_short_job_starts_on_a_node_entering_maintenance_a_long_one_does_not():
    nodes = [node("m", unavailable_from=MAINT, maintenance_reason="PDU swap on rack r0")]
    short = pjob(1, 8, predicted_runtime_s=HOUR)
    long = pjob(2, 8, predicted_runtime_s=12 * HOUR, submitted_at=NOW - 5000)
    result = run(snap(nodes, [long, short]))
    assert started(result) == {1: {"m": tuple(range(8))}}
    v = result.verdicts[2]
    assert v.code == et.Code.NODES_UNAVAILABLE
    assert v.details["maintenance_nodes"] == 1
    assert v.details["maintenance_node_names"] == "m"
    assert v.details["maintenance_starts_at"] == "1970-01-12T15:46:40Z"
    assert v.details["maintenance_reason"] == "PDU swap on rack r0"
    assert "scheduled maintenance" in v.message
    assert "from 1970-01-12 15:46 UTC: PDU swap on rack r0)" in v.message
    assert v.estimated_start is None
    # a long reason is clipped in the words, whole in the details
    long_reason = "x" * 120
    nodes = [node("m", unavailable_from=MAINT, maintenance_reason=long_reason)]
    v = run(snap(nodes, [long, short])).verdicts[2]
    assert v.details["maintenance_reason"] == long_reason
    assert f"UTC: {'x' * 79}…)" in v.message


def test_without_backfill_too_only_work_ending_before_the_start_lands_there():
    nodes = [node("m", unavailable_from=MAINT)]
    policy = et.PolicyConfig.preset("fifo")
    short = pjob(1, 4, predicted_runtime_s=HOUR)
    result = run(snap(nodes, [short], policy=policy))
    assert 1 in started(result)
    long = pjob(2, 4, predicted_runtime_s=3 * HOUR)
    assert code(run(snap(nodes, [long], policy=policy)), 2) == et.Code.NODES_UNAVAILABLE


def test_a_job_that_ends_exactly_at_the_start_may_use_the_node():
    nodes = [node("m", unavailable_from=MAINT)]
    result = run(snap(nodes, [pjob(1, 8, predicted_runtime_s=2 * HOUR)]))
    assert 1 in started(result)


def test_a_long_job_goes_to_the_other_node_and_the_short_one_fills_the_maintenance_node():
    nodes = [node("a"), node("m", unavailable_from=MAINT)]
    long = pjob(1, 8, predicted_runtime_s=12 * HOUR)
    short = pjob(2, 8, predicted_runtime_s=HOUR)
    result = run(snap(nodes, [long, short]))
    assert started(result) == {1: {"a": tuple(range(8))}, 2: {"m": tuple(range(8))}}


def test_a_reservation_never_counts_on_a_node_entering_maintenance():
    # "a" frees in an hour; "m" is free now but enters maintenance in two hours.
    nodes = [node("a"), node("m", unavailable_from=MAINT)]
    busy = rjob(10, {"a": range(8)}, predicted_end=NOW + HOUR)
    long = pjob(1, 8, predicted_runtime_s=12 * HOUR)
    result = run(snap(nodes, [long], [busy]))
    assert not result.starts
    assert [r.nodes for r in result.reservations] == [("a",)]
    assert result.verdicts[1].estimated_start == NOW + HOUR
    assert result.verdicts[1].code != et.Code.NODES_UNAVAILABLE


def test_a_gang_does_not_count_a_node_entering_maintenance():
    nodes = [node("a"), node("b"), node("m", unavailable_from=MAINT)]
    busy = rjob(10, {"b": range(8)}, predicted_end=NOW + 3 * HOUR)
    gang = pjob(1, 16, predicted_runtime_s=12 * HOUR)
    result = run(snap(nodes, [gang], [busy]))
    assert not result.starts
    assert all("m" not in r.nodes for r in result.reservations)


def test_preemption_makes_no_room_on_a_node_entering_maintenance():
    nodes = [node("a"), node("m", unavailable_from=MAINT)]
    # the victim on m has lost less work since its checkpoint: the cheaper one, without maintenance
    on_a = rjob(10, {"a": range(8)}, started_at=NOW - 10 * HOUR, predicted_end=NOW + 9 * HOUR)
    on_m = rjob(11, {"m": range(8)}, started_at=NOW - 60, predicted_end=NOW + 9 * HOUR)
    urgent = pjob(1, 8, tier="urgent", predicted_runtime_s=12 * HOUR)
    without = run(snap([node("a"), node("m")], [urgent], [on_a, on_m]))
    assert victims(without) == {11: 1}
    result = run(snap(nodes, [urgent], [on_a, on_m]))
    assert victims(result) == {10: 1}
    assert all("m" not in r.nodes for r in result.reservations)


def test_maintenance_on_a_node_already_out_of_service_changes_nothing():
    nodes = [node("a"), node("c", state="cordoned", unavailable_from=MAINT)]
    jobs = [pjob(1, 8, predicted_runtime_s=12 * HOUR), pjob(2, 16, predicted_runtime_s=HOUR)]
    plain = [node("a"), node("c", state="cordoned")]
    assert run(snap(nodes, jobs)) == run(snap(plain, jobs))


def test_check_plan_reports_a_long_start_on_a_node_entering_maintenance():
    nodes = [node("m", unavailable_from=MAINT)]
    long = pjob(1, 8, predicted_runtime_s=12 * HOUR)
    s = snap(nodes, [long])
    bad = et.Plan(
        starts=(et.Start(1, (et.Slot("m", tuple(range(8))),), False),),
        preemptions=(),
        reservations=(),
        verdicts={},
        now=NOW,
    )
    assert any("enters maintenance" in v for v in check_plan(s, bad))
    held = dataclasses.replace(
        bad, starts=(), reservations=(et.Reservation(1, ("m",), NOW + HOUR),),
        verdicts={1: plan(s, NOW).verdicts[1]},
    )  # fmt: skip
    assert any("entering maintenance" in v for v in check_plan(s, held))


# -- properties ---------------------------------------------------------------------------

OFFSETS = st.lists(
    st.one_of(st.none(), st.sampled_from([-HOUR, 0.0, 0.5 * HOUR, 2 * HOUR, 13 * HOUR])),
    min_size=10,
    max_size=10,
)


def with_maintenance(snapshot: et.Snapshot, offsets: list[float | None]) -> et.Snapshot:
    from tests.engine.strategies import NOW as SNOW

    nodes = tuple(
        dataclasses.replace(n, unavailable_from=None if o is None else SNOW + o)
        for n, o in zip(snapshot.nodes, offsets, strict=False)
    )
    return dataclasses.replace(snapshot, nodes=nodes)


@settings(max_examples=400, deadline=None)
@given(snapshots(), OFFSETS)
def test_no_job_is_placed_on_a_node_whose_maintenance_starts_before_its_predicted_end(
    snapshot, offsets
):
    from tests.engine.strategies import NOW as SNOW

    s = with_maintenance(snapshot, offsets)
    result = plan(s, SNOW)
    assert check_plan(s, result) == []
    # re-derived independently of check_plan
    by_name = {n.name: n for n in s.nodes}
    pending = {j.id: j for j in s.pending}
    for start in result.starts:
        end = SNOW + job_runtime(pending[start.job_id], s.policy)
        for slot in start.placement:
            t = by_name[slot.node].unavailable_from
            assert t is None or t >= end, (start, t, end)
    for res in result.reservations:
        assert all(by_name[n].unavailable_from is None for n in res.nodes)
    for m in result.migrations:
        assert m.to_node not in by_name or by_name[m.to_node].unavailable_from is None
    # a waiting job's verdict names the maintenance only when there is some
    for v in result.verdicts.values():
        if "maintenance_nodes" in v.details:
            assert v.code == et.Code.NODES_UNAVAILABLE


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_with_no_maintenance_the_plan_is_the_same_as_with_the_field_left_out(snapshot):
    """Every node given ``unavailable_from=None`` explicitly plans as before (the stored plan
    corpus, ``test_plan_corpus.py``, checks the plans themselves did not change)."""
    from tests.engine.strategies import NOW as SNOW

    explicit = with_maintenance(snapshot, [None] * len(snapshot.nodes))
    assert plan(explicit, SNOW) == plan(snapshot, SNOW)
