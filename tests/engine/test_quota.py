"""Quotas, guarantees' bookkeeping and borrowing of idle capacity (Q3-Q5, Q7)."""

from __future__ import annotations

from scheduling.engine import Code, LineView, PolicyConfig, QueueView, Tier
from scheduling.engine.accounting import snapshot_usage

from .helpers import code, node, pjob, rack, rjob, run, snap, started, victims


def lines_llm(quota, guarantee=0):
    return [LineView("llm", quota, guarantee), LineView("search", None)]


def test_line_quota_blocks_a_non_preemptible_job_with_numbers():
    running = [rjob(1, {"a": range(8)}, tier="core")]
    s = snap(
        rack(
            "a",
            3,
            "r0",
        ),
        [pjob(2, 16, tier="core")],
        running,
        lines=lines_llm(16),
    )
    plan = run(s)
    v = plan.verdicts[2]
    assert v.code == Code.QUOTA_EXCEEDED
    assert v.details["held_gpus"] == 8 and v.details["quota_gpus"] == 16
    assert v.details["requested_gpus"] == 16 and v.details["short_gpus"] == 8
    assert "llm holds 8 of its 16 GPU quota; this job needs 16" in v.message


def test_queue_quota_is_enforced_below_the_line_quota():
    queues = [
        QueueView("llm-core", "llm", Tier.CORE, quota_gpus=8),
        QueueView("llm-experiment", "llm", Tier.EXPERIMENT),
    ]
    s = snap(
        rack("a", 4, "r0"),
        [pjob(1, 8, tier="core"), pjob(2, 8, tier="core")],
        lines=lines_llm(None),
        queues=queues,
    )
    plan = run(s)
    assert list(started(plan)) == [1]
    assert plan.verdicts[2].code == Code.QUOTA_EXCEEDED
    assert plan.verdicts[2].details["scope"] == "queue"


def test_jobs_within_quota_start_up_to_exactly_the_quota():
    s = snap(rack("a", 4, "r0"), [pjob(i, 8, tier="core") for i in (1, 2, 3)], lines=lines_llm(16))
    plan = run(s)
    assert sorted(started(plan)) == [1, 2]
    assert code(plan, 3) == Code.QUOTA_EXCEEDED


def test_preemptible_job_borrows_idle_capacity_beyond_quota_and_is_flagged():
    s = snap(rack("a", 4, "r0"), [pjob(1, 16, tier="core"), pjob(2, 8)], lines=lines_llm(16))
    plan = run(s)
    by_id = {st.job_id: st for st in plan.starts}
    assert by_id[1].borrowed is False
    assert by_id[2].borrowed is True


def test_borrowers_come_after_every_entitled_job():
    # The experiment is first in fair-share order but over its line's quota; the
    # search job (no quota) is entitled and must get the only free node.
    s = snap(
        [node("a")],
        [pjob(1, 8, line="llm", submitted_at=0), pjob(2, 8, line="search", submitted_at=5)],
        [rjob(9, {"x": range(8)}, tier="core")],
        lines=lines_llm(8),
    )
    s = snap([node("a"), node("x")], s.pending, s.running, lines=s.lines)
    plan = run(s)
    assert list(started(plan)) == [2]
    assert code(plan, 1) == Code.QUOTA_EXCEEDED
    assert "none fits it now" in plan.verdicts[1].message


def test_no_borrowing_when_policy_disables_it():
    s = snap(
        rack("a", 2, "r0"), [pjob(1, 8)], lines=lines_llm(0), policy=PolicyConfig(borrowing=False)
    )
    plan = run(s)
    assert code(plan, 1) == Code.QUOTA_EXCEEDED


def test_non_preemptible_or_demoted_jobs_never_borrow():
    s = snap(
        rack("a", 2, "r0"),
        [pjob(1, 8, preemptible=False), pjob(2, 8, preemption_count=4)],
        lines=lines_llm(0),
    )
    plan = run(s)
    assert plan.starts == ()
    assert {code(plan, 1), code(plan, 2)} == {Code.QUOTA_EXCEEDED}


def test_running_work_beyond_quota_is_derived_as_borrowed_newest_first():
    running = [
        rjob(1, {"a": range(8)}, tier="core", started_at=0),
        rjob(2, {"b": range(8)}, started_at=10),
        rjob(3, {"c": range(8)}, started_at=20),
    ]
    s = snap([node("a"), node("b"), node("c")], [], running, lines=lines_llm(16))
    usage = snapshot_usage(s)
    assert usage.borrowed_ids == frozenset({3})
    assert usage.nb_line["llm"] == 16 and usage.held_line["llm"] == 24


def test_owner_within_quota_reclaims_borrowed_capacity_even_at_equal_tier():
    # llm (quota 8) borrowed the search line's idle node; search now needs it.
    running = [
        rjob(1, {"a": range(8)}, started_at=0),
        rjob(2, {"b": range(8)}, started_at=10),  # beyond llm's quota: borrowed
    ]
    lines = [LineView("llm", 8), LineView("search", 8)]
    s = snap([node("a"), node("b")], [pjob(5, 8, line="search")], running, lines=lines)
    plan = run(s)
    assert victims(plan) == {2: 5}
    assert code(plan, 5) == Code.PREEMPTING


def test_job_over_its_own_quota_cannot_reclaim():
    running = [rjob(1, {"a": range(8)}, started_at=0), rjob(2, {"b": range(8)}, started_at=10)]
    lines = [LineView("llm", 8), LineView("search", 0)]
    s = snap(
        [node("a"), node("b")], [pjob(5, 8, line="search", preemptible=False)], running, lines=lines
    )
    plan = run(s)
    assert plan.preemptions == ()
    assert code(plan, 5) == Code.QUOTA_EXCEEDED


def test_urgent_job_makes_quota_room_by_preempting_its_own_lines_experiments():
    running = [rjob(1, {"a": range(8)}), rjob(2, {"b": range(8)})]
    s = snap(
        [node("a"), node("b"), node("c")],
        [pjob(5, 16, tier="urgent")],
        running,
        lines=lines_llm(24),
    )
    plan = run(s)
    # 16 held + 16 asked > 24: 8 GPUs of the line must go; that same victim's
    # node plus the free node c give it room, so one victim suffices.
    assert len(plan.preemptions) == 1
    assert code(plan, 5) == Code.PREEMPTING
