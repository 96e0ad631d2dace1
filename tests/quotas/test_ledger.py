"""The pure quota arithmetic (quotas.ledger), table-driven: validation, the sum of guarantees
against capacity, borrowed use, the impact of a change, recent use and R4 suggestions."""

import pytest

from monitoring import metrics
from quotas import advice
from quotas import ledger as L

LINES = (L.LineContract("a", 10, 4), L.LineContract("b", 10, 2))
QUEUES = (
    L.QueueContract("a-core", "a", None, 2),
    L.QueueContract("a-exp", "a", 4, 0),
    L.QueueContract("b-core", "b", None, 2),
    L.QueueContract("b-exp", "b", 4, 0),
)
C = L.Contracts(LINES, QUEUES)
CLUSTER = 32

# ---------------------------------------------------------------------------
# validate_change

VALID = [
    L.Change("a", quota_gpus=12, guarantee_gpus=6),
    L.Change("a", quota_gpus=12),
    L.Change("a", guarantee_gpus=10),
    L.Change("a", queue="a-exp", quota_gpus=6, guarantee_gpus=2),
    L.Change("a", queue="a-core", guarantee_gpus=10),
    L.Change("b", quota_gpus=32, guarantee_gpus=32),
    L.Change("a", quota_gpus=3, guarantee_gpus=2),  # below a queue's quota: the line caps it
]


@pytest.mark.parametrize("change", VALID, ids=repr)
def test_valid_changes_have_no_errors(change):
    assert L.validate_change(C, change, CLUSTER) == {}


INVALID = [
    # change, field, fragment of the message
    (L.Change("a"), "quota_gpus", "give a new quota, a new guarantee, or both"),
    (L.Change("a", quota_gpus=-1), "quota_gpus", "must not be negative (got -1)"),
    (L.Change("a", guarantee_gpus=-2), "guarantee_gpus", "must not be negative (got -2)"),
    (L.Change("a", quota_gpus=33), "quota_gpus", "more than the cluster holds (32 GPUs)"),
    (L.Change("a", quota_gpus=40, guarantee_gpus=40), "guarantee_gpus", "more than the cluster"),
    (L.Change("a", quota_gpus=8, guarantee_gpus=9), "guarantee_gpus", "guarantee (9) cannot be above the quota (8)"),
    (L.Change("a", guarantee_gpus=11), "guarantee_gpus", "above the current quota of 10; ask for a quota of at least 11"),
    (L.Change("a", queue="a-exp", quota_gpus=11), "quota_gpus", "cannot be above its line's quota (10)"),
    (L.Change("a", queue="a-exp", guarantee_gpus=5), "guarantee_gpus", "above the current quota of 4"),
    (L.Change("a", queue="a-core", guarantee_gpus=11), "guarantee_gpus", "a queue's guarantee (11) cannot be above its line's quota (10)"),
    (L.Change("a", quota_gpus=1, guarantee_gpus=0), "quota_gpus", "queues guarantee 2 GPUs together"),
    (L.Change("a", quota_gpus=10, guarantee_gpus=4), "non_field_errors", "already the contract of the line a"),
    (L.Change("a", queue="a-exp", quota_gpus=4), "non_field_errors", "already the contract of the queue a-exp"),
]  # fmt: skip


@pytest.mark.parametrize("change,field,fragment", INVALID, ids=lambda v: repr(v)[:60])
def test_invalid_changes_name_the_field_and_say_why(change, field, fragment):
    errors = L.validate_change(C, change, CLUSTER)
    assert field in errors, errors
    assert any(fragment in m for m in errors[field]), errors


# ---------------------------------------------------------------------------
# guarantees against capacity


@pytest.mark.parametrize(
    "changes,total",
    [
        ((), 6),  # a: max(4, 2+0); b: max(2, 2+0)
        ((L.Change("b", queue="b-core", guarantee_gpus=5),), 9),  # b's queues promise 5 > 2
        ((L.Change("a", guarantee_gpus=1),), 4),  # a's queues still promise 2
        ((L.Change("a", guarantee_gpus=8), L.Change("b", guarantee_gpus=0)), 10),
    ],
)
def test_the_sum_of_guarantees_counts_what_each_line_promises(changes, total):
    assert L.guarantee_total(C.with_changes(changes)) == total


FITS = [
    # change, healthy, reserve, scheduled, (before, after, allowed, needs_override)
    (L.Change("a", guarantee_gpus=6), 10, 2, (), (6, 8, True, False)),
    (L.Change("a", guarantee_gpus=7), 10, 2, (), (6, 9, True, True)),
    (L.Change("a", guarantee_gpus=9), 10, 2, (), (6, 11, False, False)),
    (L.Change("a", guarantee_gpus=6), 10, 2, (L.Change("b", guarantee_gpus=4),), (8, 10, True, True)),
    (L.Change("a", guarantee_gpus=7), 10, 0, (L.Change("b", guarantee_gpus=4),), (8, 11, False, False)),
    (L.Change("a", guarantee_gpus=3), 4, 0, (), (6, 5, True, False)),  # over, but lowering
    (L.Change("a", quota_gpus=20), 6, 0, (), (6, 6, True, False)),  # quota only
]  # fmt: skip


@pytest.mark.parametrize("change,healthy,reserve,scheduled,expected", FITS)
def test_fit_counts_scheduled_changes_and_never_allows_growth_past_capacity(
    change, healthy, reserve, scheduled, expected
):
    fit = L.check_fit(C, change, healthy, reserve, scheduled=scheduled)
    assert (fit.total_before, fit.total_after, fit.allowed, fit.needs_reserve_override) == expected
    assert fit.message().startswith(
        "Does not fit" if not fit.allowed else "Fits only" if fit.needs_reserve_override else "Fits"
    )


# ---------------------------------------------------------------------------
# positions and impact

J1 = L.Hold(1, "a-exp", "a", 4, preemptible=True, started_at=1, name="j1", owner="ann")
J2 = L.Hold(2, "a-exp", "a", 2, preemptible=True, started_at=2, name="j2", owner="ann")
K1 = L.Hold(11, "b-exp", "b", 4, preemptible=True, started_at=1, name="k1", owner="bob")
K2 = L.Hold(12, "b-exp", "b", 4, preemptible=True, started_at=5, name="k2", owner="bob")
K3 = L.Hold(13, "b-core", "b", 2, preemptible=False, started_at=3, name="k3", owner="bob")


def test_positions_follow_the_engine_borrowing_rule():
    """Reclaimable jobs are the engine's; the borrowed number is each scope's use beyond its
    own quota (#15: a line within its quota borrows nothing, whatever its queues do)."""
    p = L.positions(C, (J1, J2, K1, K2, K3))
    assert p.borrowed_ids == {2, 12}, "the newest preemptible jobs above a queue quota"
    a_exp = p.queues["a-exp"]
    assert (a_exp.used_gpus, a_exp.borrowed_gpus, a_exp.within_quota_gpus,
            a_exp.headroom_gpus, a_exp.reclaimable_gpus) == (6, 2, 4, 0, 2)  # fmt: skip
    a = p.lines["a"]
    assert (a.used_gpus, a.borrowed_gpus, a.within_quota_gpus, a.headroom_gpus,
            a.protected_gpus) == (6, 0, 6, 4, 4)  # fmt: skip
    assert a.reclaimable_gpus == 2 and a.room_gpus == 6, "the engine lets it start 6 more"
    assert p.queues["a-core"].headroom_gpus is None, "no queue quota: bounded by its line"
    b = p.lines["b"]
    assert (b.used_gpus, b.borrowed_gpus, b.reclaimable_gpus) == (10, 0, 4), (
        "line b is at its quota (10 of 10): nothing beyond it, though k2 is reclaimable"
    )


def test_a_quota_cut_makes_the_targets_own_jobs_reclaimable():
    state = L.ClusterState(C, holds=(J1, J2), healthy_gpus=32, free_gpus=26)
    result = L.impact(state, L.Change("a", queue="a-exp", quota_gpus=2))
    assert [j.id for j in result.newly_reclaimable] == [1]
    # The engine's stacking: a 4-GPU job cannot sit within 2, so both are reclaimable;
    # the queue holds 4 GPUs beyond its quota of 2.
    assert (result.after.borrowed_gpus, result.after.within_quota_gpus) == (4, 2)
    assert result.after.reclaimable_gpus == 6
    assert result.likely_preempted == () and result.borrowing_shrinks == ()
    assert any("become the first reclaimed" in n for n in result.notes)


def test_a_quota_raise_with_pending_demand_reclaims_other_lines_borrowing():
    contracts = C.with_change(L.Change("a", quota_gpus=6))
    state = L.ClusterState(
        contracts, holds=(J1, J2, K1, K2, K3), pending_gpus={"a-core": 8},
        healthy_gpus=18, free_gpus=2,
    )  # fmt: skip
    same_quota = L.impact(state, L.Change("a", guarantee_gpus=3))
    assert same_quota.likely_preempted == (), "headroom 2 is covered by the 2 free GPUs"
    result = L.impact(state, L.Change("a", quota_gpus=10))
    assert result.demand_gpus == 8
    # line a uses 6 of 6 (nothing unused), though the engine would let it start 2 more
    # (j2 sits above a-exp's quota and makes way)
    assert (result.before.headroom_gpus, result.after.headroom_gpus) == (0, 4)
    assert (result.before.room_gpus, result.after.room_gpus) == (2, 6)
    assert [j.id for j in result.likely_preempted] == [12], "b's borrowed job, not its core job"
    assert result.borrowing_shrinks == (L.LineShrink("b", 0, 4, 4),), "b is within its quota"
    assert any("reclaim about 4 borrowed GPUs" in n for n in result.notes)
    data = result.as_dict()
    assert data["likely_preempted"][0]["owner"] == "bob" and data["fits"] is True


def test_a_guarantee_cut_says_how_much_running_work_loses_protection():
    state = L.ClusterState(C, holds=(J1, J2), healthy_gpus=32, free_gpus=26)
    result = L.impact(state, L.Change("a", guarantee_gpus=1))
    assert (result.before.protected_gpus, result.after.protected_gpus) == (4, 1)
    assert any("Protected use drops from 4 to 1" in n for n in result.notes)


def test_impact_reports_a_change_that_does_not_fit():
    state = L.ClusterState(
        C, healthy_gpus=8, free_gpus=8, scheduled=(L.Change("b", guarantee_gpus=3),)
    )
    result = L.impact(state, L.Change("a", guarantee_gpus=6))
    assert result.guarantees.total_before == 7 and result.guarantees.total_after == 9
    assert not result.guarantees.allowed
    assert result.notes[0].startswith("Does not fit")


# ---------------------------------------------------------------------------
# recent use


@pytest.mark.parametrize(
    "points,expected",
    [
        ([], (0, 0, 0.0, 0, 0.0, None)),
        ([(0, 2, 1), (60, 6, 3), (120, 4, 0)], (3, 6, 4.0, 3, 1.3, 0)),
        ([(60, 5, 5)], (1, 5, 5.0, 5, 5.0, 60)),
    ],
)
def test_recent_use_summary(points, expected):
    u = advice.summarize_use(points)
    assert (u.samples, u.peak_used, u.avg_used, u.peak_pending, u.avg_pending, u.since) == expected


def test_recent_use_is_compared_with_the_proposed_contract():
    use = advice.summarize_use([(0, 2, 1), (60, 6, 3)])
    notes = " ".join(advice.compare_use(use, 20, 8))
    assert "11 GPUs would have gone unused" in notes
    assert "guarantee of 8 is above the recent peak of use (6)" in notes
    assert "below the recent peak" in " ".join(advice.compare_use(use, 4, 0))
    assert "No usage history" in advice.compare_use(advice.summarize_use([]), 4, 0)[0]


# ---------------------------------------------------------------------------
# eviction ratio and suggestions


@pytest.mark.parametrize(
    "points,until,expected",
    [
        ([], 10, 0.0),
        ([(0, 2), (10, 4)], 20, 60.0),
        ([(0, 2), (10, 4)], 5, 10.0),
        ([(0, 3)], 0, 0.0),
    ],
)
def test_delivered_gpu_seconds_integrates_the_step_series(points, until, expected):
    assert metrics.delivered_gpu_seconds(points, until) == expected


@pytest.mark.parametrize(
    "used,gpus,needed", [(8, 2, 7), (2, 2, 1), (1, 4, 1), (10, 1, 10), (0, 3, 1)]
)
def test_the_guarantee_needed_to_forbid_an_eviction(used, gpus, needed):
    assert advice.guarantee_needed(advice.EvictionEvent(gpus, 1.0, used)) == needed


MIXED = [
    advice.EvictionEvent(2, 7200, 4),  # needs 3
    advice.EvictionEvent(2, 7200, 6),  # needs 5
    advice.EvictionEvent(2, 720, 8),  # needs 7
]


def test_a_suggestion_covers_most_of_the_lost_gpu_time_with_its_numbers():
    s = advice.suggest_guarantee("q", MIXED, 40_000, 2, cap=None, target_ratio=0.1)
    assert s is not None
    assert s.suggested_guarantee == 5, "3 and 5 cover 14400 of 15120 GPU-s (>= 80%)"
    assert (s.evictions, s.prevented_evictions, s.capped_at) == (3, 2, None)
    assert s.prevented_share == round(14400 / 15120, 4)
    assert s.eviction_ratio == round(15120 / 40_000, 4)
    assert s.ratio_after == round(720 / 40_000, 4)
    assert "A guarantee of 5 GPUs (now 2)" in s.message()


@pytest.mark.parametrize(
    "events,delivered,current,cap,target,expected",
    [
        (MIXED, 40_000, 2, 4, 0.1, 4),  # capped by the quota
        (MIXED, 40_000, 5, None, 0.1, None),  # the current guarantee already covers it
        (MIXED, 1_000_000, 2, None, 0.1, None),  # ratio 1.5% is under the target
        (MIXED[:2], 40_000, 2, None, 0.1, None),  # too few evictions to call it a pattern
        (MIXED, 0, 2, None, 0.1, 5),  # no usage series: the evicted time counts as delivered
    ],
)
def test_suggestions_only_when_the_ratio_stays_above_target(
    events, delivered, current, cap, target, expected
):
    s = advice.suggest_guarantee("q", events, delivered, current, cap, target)
    assert (s.suggested_guarantee if s else None) == expected
    if s is not None:
        assert s.eviction_ratio <= 1.0
        if cap is not None and expected == cap:
            assert s.capped_at == cap and "capped" in s.message()
