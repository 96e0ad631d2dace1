"""Properties of the quota arithmetic (quotas.ledger) over random contracts and running jobs.

The module's words are checked as invariants: ``used`` is what the jobs hold,
``entitled = used - borrowed``, ``borrowed`` is never negative and only preemptible jobs
are borrowed, headroom is ``quota - entitled`` floored at 0, the effective guarantee of a
line is the larger of its own and its queues' together, a change that passes validation
is a coherent contract, the guarantee fit never lets the sum grow past healthy capacity,
and an impact's lists say what changed and nothing else.
"""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitoring import metrics
from quotas import advice
from quotas import ledger as L

FAST = settings(max_examples=60, deadline=None)


@st.composite
def contracts(draw, max_lines: int = 3) -> L.Contracts:
    lines, queues = [], []
    for i in range(draw(st.integers(1, max_lines))):
        quota = draw(st.integers(0, 48))
        lines.append(L.LineContract(f"l{i}", quota, draw(st.integers(0, quota))))
        for j in range(draw(st.integers(0, 3))):
            q_quota = draw(st.none() | st.integers(0, quota))
            cap = quota if q_quota is None else q_quota
            queues.append(L.QueueContract(f"l{i}q{j}", f"l{i}", q_quota, draw(st.integers(0, cap))))
    return L.Contracts(tuple(lines), tuple(queues))


@st.composite
def holds_for(draw, c: L.Contracts) -> tuple[L.Hold, ...]:
    if not c.queues:
        return ()
    out = []
    for i in range(draw(st.integers(0, 10))):
        q = draw(st.sampled_from(c.queues))
        out.append(
            L.Hold(
                id=i + 1, queue=q.name, line=q.line, gpus=draw(st.integers(1, 16)),
                preemptible=draw(st.booleans()), started_at=float(draw(st.integers(0, 20))),
                borrowed=draw(st.booleans()), preempting=draw(st.integers(0, 4)) == 0,
                name=f"j{i + 1}", owner="o",
            )
        )  # fmt: skip
    return tuple(out)


@st.composite
def worlds(draw) -> tuple[L.Contracts, tuple[L.Hold, ...]]:
    c = draw(contracts())
    return c, draw(holds_for(c))


def positioned() -> st.SearchStrategy[tuple[L.Contracts, tuple[L.Hold, ...], L.Positions]]:
    """A world and the positions the ledger computes for it: ``(contracts, holds, positions)``."""
    return worlds().map(lambda world: (*world, L.positions(*world)))


@st.composite
def changes_for(draw, c: L.Contracts, low: int = -2, high: int = 60) -> L.Change:
    value = st.none() | st.integers(low, high)
    if c.queues and draw(st.booleans()):
        q = draw(st.sampled_from(c.queues))
        return L.Change(q.line, q.name, draw(value), draw(value))
    ln = draw(st.sampled_from(c.lines))
    return L.Change(ln.name, None, draw(value), draw(value))


def held(holds, key: str, name: str, only=lambda h: True) -> int:
    return sum(h.gpus for h in holds if getattr(h, key) == name and only(h))


# -- positions ------------------------------------------------------------------------------


@FAST
@given(positioned())
def test_used_is_what_the_jobs_hold_and_borrowed_is_a_part_of_it(world):
    c, holds, p = world
    for scope, positions in (("line", p.lines), ("queue", p.queues)):
        for name, pos in positions.items():
            assert pos.used_gpus == held(holds, scope, name)
            assert pos.active_gpus == held(holds, scope, name, lambda h: not h.preempting)
            assert 0 <= pos.borrowed_gpus <= pos.used_gpus
            quota = pos.quota_gpus
            assert pos.borrowed_gpus == (0 if quota is None else max(0, pos.used_gpus - quota))
            assert pos.entitled_gpus == pos.within_quota_gpus == pos.used_gpus - pos.borrowed_gpus
            assert pos.reclaimable_gpus == held(
                holds, scope, name, lambda h: h.id in p.borrowed_ids
            )
            assert pos.reclaimable_gpus >= pos.borrowed_gpus or any(
                not h.preemptible for h in holds if getattr(h, scope) == name
            ), "the engine reclaims at least the use beyond quota, unless firm work holds it"


@FAST
@given(positioned())
def test_only_preemptible_jobs_are_borrowed(world):
    c, holds, p = world
    assert p.borrowed_ids <= {h.id for h in holds if h.preemptible}


@FAST
@given(positioned())
def test_a_lines_queues_add_up_to_the_line(world):
    c, holds, p = world
    for ln in c.lines:
        qs = [p.queues[q.name] for q in c.queues_of(ln.name)]
        assert sum(q.used_gpus for q in qs) == p.lines[ln.name].used_gpus
        assert sum(q.reclaimable_gpus for q in qs) == p.lines[ln.name].reclaimable_gpus
        # borrowing is the line's own (beyond the line's quota), not its queues' sum
        assert p.lines[ln.name].borrowed_gpus == max(0, p.lines[ln.name].used_gpus - ln.quota_gpus)


@FAST
@given(positioned())
def test_entitled_use_stays_within_quota_unless_non_preemptible_work_alone_exceeds_it(world):
    c, holds, p = world
    for ln in c.lines:
        firm = held(holds, "line", ln.name, lambda h: not h.preemptible)
        assert p.lines[ln.name].entitled_gpus <= max(ln.quota_gpus, firm)
    for q in c.queues:
        if q.quota_gpus is not None:
            firm = held(holds, "queue", q.name, lambda h: not h.preemptible)
            assert p.queues[q.name].entitled_gpus <= max(q.quota_gpus, firm)


@FAST
@given(positioned())
def test_nothing_is_borrowed_in_a_line_that_is_within_all_its_quotas(world):
    c, holds, p = world
    for ln in c.lines:
        queues_fit = all(
            q.quota_gpus is None or p.queues[q.name].used_gpus <= q.quota_gpus
            for q in c.queues_of(ln.name)
        )
        if p.lines[ln.name].used_gpus <= ln.quota_gpus and queues_fit:
            assert p.lines[ln.name].borrowed_gpus == 0


@FAST
@given(positioned())
def test_headroom_is_quota_minus_entitled_floored_and_none_without_a_quota(world):
    c, holds, p = world
    for pos in (*p.lines.values(), *p.queues.values()):
        if pos.quota_gpus is None:
            assert pos.headroom_gpus is None
        else:
            assert pos.headroom_gpus == max(0, pos.quota_gpus - pos.entitled_gpus)
            assert 0 <= pos.headroom_gpus <= pos.quota_gpus
        assert pos.protected_gpus == min(pos.active_gpus, pos.guarantee_gpus)
        d = pos.as_dict()
        assert d["entitled_gpus"] + d["borrowed_gpus"] == d["used_gpus"]


@FAST
@given(worlds(), st.randoms(use_true_random=False))
def test_the_order_jobs_are_listed_in_changes_nothing(world, rnd: random.Random):
    c, holds = world
    shuffled = list(holds)
    rnd.shuffle(shuffled)
    assert L.positions(c, shuffled) == L.positions(c, holds)


def raised_pair(data) -> tuple[L.Contracts, L.Change, tuple[L.Hold, ...]]:
    """A world, and a change that raises one of its quotas (by 0 to 16 GPUs)."""
    c, holds = data.draw(worlds())
    change = data.draw(changes_for(c))
    quota, _ = c.target_contract(change)
    if quota is None:  # a queue bounded by its line: give it a quota first
        quota = data.draw(st.integers(0, 48))
        c = c.with_change(L.Change(change.line, change.queue, quota))
    return c, L.Change(change.line, change.queue, quota + data.draw(st.integers(0, 16))), holds


@FAST
@given(worlds())
def test_settled_flags_stay_settled(world):
    c, holds = world
    steady = L.settled(c, holds)
    assert L.positions(c, steady).borrowed_ids == L.positions(c, holds).borrowed_ids


@FAST
@given(st.data())
def test_raising_a_quota_never_makes_a_job_borrowed(data):
    """From the flags the last cycle wrote back, a raise only ever clears borrowed jobs."""
    c, raise_, holds = raised_pair(data)
    raised = c.with_change(raise_)
    holds = L.settled(c, holds)
    assert L.positions(raised, holds).borrowed_ids <= L.positions(c, holds).borrowed_ids


@FAST
@given(st.data())
def test_between_cycles_a_raise_borrows_only_jobs_already_flagged(data):
    """Between cycles the stored flags may lag (a job ended since the last plan). A raise
    then newly borrows only a job whose stored flag already says borrowed: the flags are
    sticky, so the job that stays borrowed may be the flagged one rather than the one
    the lower quota would have picked."""
    c, raise_, holds = raised_pair(data)
    raised = c.with_change(raise_)
    flagged = {h.id for h in holds if h.borrowed}
    assert L.positions(raised, holds).borrowed_ids <= L.positions(c, holds).borrowed_ids | flagged


def test_a_raise_between_cycles_keeps_the_flagged_job_borrowed_not_the_larger_one():
    """The case Hypothesis found against the unqualified rule. Line l2 (quota 27) holds 28:
    12 + 6 firm GPUs, j1 (9 GPUs, preemptible, started later) and j2 (1 GPU, preemptible,
    stored as borrowed). At queue quota 19, l2q1 is 2 over, so j1 is borrowed, and that
    also brings the line within its quota: j2's flag clears. Raised to 21, l2q1 is within
    quota; the line is 1 over, and the sticky flag keeps j2 borrowed. One GPU borrowed
    instead of nine, and no job the cycles had not already flagged."""

    def hold(i, queue, gpus, preemptible, started_at=0.0, borrowed=False):
        return L.Hold(id=i, queue=queue, line="l2", gpus=gpus, preemptible=preemptible,
                      started_at=started_at, borrowed=borrowed, preempting=False,
                      name=f"j{i}", owner="o")  # fmt: skip

    c = L.Contracts(
        (L.LineContract("l2", 27, 0),),
        (L.QueueContract("l2q0", "l2", None, 0), L.QueueContract("l2q1", "l2", 19, 0)),
    )
    holds = (
        hold(1, "l2q1", 9, True, started_at=1.0),
        hold(2, "l2q0", 1, True, borrowed=True),
        hold(4, "l2q1", 12, False),
        hold(8, "l2q0", 6, False),
    )
    raised = c.with_change(L.Change("l2", "l2q1", 21))
    assert L.positions(c, holds).borrowed_ids == {1}
    assert L.positions(raised, holds).borrowed_ids == {2}
    assert L.positions(raised, holds).lines["l2"].reclaimable_gpus == 1
    # From the flags the cycle writes back at quota 19 ({j1}), the raise borrows nothing
    # new: the line's one GPU over is then j1's, the flagged one.
    assert L.positions(raised, L.settled(c, holds)).borrowed_ids == {1}
    # and the impact page, which compares against that state, lists no job newly
    # reclaimable for the raise (it listed j2 while it compared the stale flags)
    result = L.impact(L.ClusterState(c, holds), L.Change("l2", "l2q1", 21))
    assert result.newly_reclaimable == ()


# -- contracts and changes ------------------------------------------------------------------


@FAST
@given(st.data())
def test_a_change_sets_what_it_gives_keeps_the_rest_and_touches_no_other_contract(data):
    c = data.draw(contracts())
    change = data.draw(changes_for(c))
    after = c.with_change(change)
    old_quota, old_guarantee = c.target_contract(change)
    assert after.target_contract(change) == (
        old_quota if change.quota_gpus is None else change.quota_gpus,
        old_guarantee if change.guarantee_gpus is None else change.guarantee_gpus,
    )
    target = change.queue or change.line
    assert [x for x in after.lines if x.name != target] == [x for x in c.lines if x.name != target]
    assert [x for x in after.queues if x.name != target] == [
        x for x in c.queues if x.name != target
    ]
    assert after.with_change(change) == after, "applying a change twice is applying it once"
    assert c.with_change(L.Change(change.line, change.queue)) == c
    assert c.with_changes([change]) == after and c.with_changes([]) == c


@FAST
@given(contracts())
def test_the_effective_guarantee_is_the_larger_of_the_lines_and_its_queues_together(c):
    total = 0
    for ln in c.lines:
        own = ln.guarantee_gpus
        queues = sum(q.guarantee_gpus for q in c.queues_of(ln.name))
        eff = L.effective_guarantee(ln, c.queues_of(ln.name))
        assert eff == max(own, queues) and own <= eff <= own + queues
        total += eff
    assert L.guarantee_total(c) == total


@FAST
@given(st.data())
def test_raising_a_guarantee_never_lowers_the_sum_of_guarantees(data):
    c = data.draw(contracts())
    change = data.draw(changes_for(c))
    _, guarantee = c.target_contract(change)
    more = guarantee + data.draw(st.integers(0, 16))
    raised = c.with_change(L.Change(change.line, change.queue, None, more))
    assert L.guarantee_total(raised) >= L.guarantee_total(c)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_change_that_validates_is_a_coherent_new_contract(data):
    c = data.draw(contracts())
    change = data.draw(changes_for(c))
    cluster = data.draw(st.integers(0, 64))
    errors = L.validate_change(c, change, cluster)
    given_values = [v for v in (change.quota_gpus, change.guarantee_gpus) if v is not None]
    if not given_values:
        assert errors == {"quota_gpus": ["give a new quota, a new guarantee, or both"]}
        return
    if any(v < 0 or v > cluster for v in given_values):
        assert errors and set(errors) <= {"quota_gpus", "guarantee_gpus"}
        return
    if errors:
        return
    after = c.with_change(change)
    quota, guarantee = after.target_contract(change)
    assert (quota, guarantee) != c.target_contract(change), "a no-op is refused"
    assert quota is None or guarantee <= quota
    if change.queue:
        line_quota = c.line(change.line).quota_gpus
        assert guarantee <= line_quota
        assert change.quota_gpus is None or change.quota_gpus <= line_quota
    elif change.quota_gpus is not None:
        assert change.quota_gpus >= sum(q.guarantee_gpus for q in c.queues_of(change.line))


@FAST
@given(st.data())
def test_every_error_names_a_field_of_the_change(data):
    c = data.draw(contracts())
    errors = L.validate_change(c, data.draw(changes_for(c)), data.draw(st.integers(0, 64)))
    assert set(errors) <= {"quota_gpus", "guarantee_gpus", "non_field_errors"}
    assert all(
        messages and all(isinstance(m, str) and m for m in messages) for messages in errors.values()
    )


# -- guarantees against capacity ------------------------------------------------------------


@FAST
@given(
    st.integers(0, 100), st.integers(0, 100), st.integers(0, 100), st.integers(0, 100)
)  # fmt: skip
def test_the_fit_never_allows_growth_past_capacity_and_flags_the_reserve(
    before, after, healthy, reserve
):
    fit = L.GuaranteeFit(before, after, healthy, reserve)
    assert fit.limit_gpus == max(0, healthy - reserve)
    assert fit.room_gpus == healthy - after
    assert fit.allowed == (after <= healthy or after <= before)
    if fit.increases and after > healthy:
        assert not fit.allowed
    assert fit.needs_reserve_override == (fit.allowed and after > before and after > fit.limit_gpus)
    message = fit.message()
    expected = (
        "Does not fit: " if not fit.allowed
        else "Fits only by using the reserve: " if fit.needs_reserve_override
        else "Fits: "
    )  # fmt: skip
    assert message.startswith(expected) and f"total {after} GPUs (now {before})" in message
    assert (f"{reserve} of them kept in the admins' reserve" in message) == bool(reserve)
    assert fit.as_dict()["allowed"] == fit.allowed


@FAST
@given(st.data())
def test_the_fit_counts_the_scheduled_changes_before_the_new_one(data):
    c = data.draw(contracts())
    scheduled = data.draw(st.lists(changes_for(c, low=0), max_size=3))
    change = data.draw(changes_for(c, low=0))
    fit = L.check_fit(c, change, 64, 8, scheduled=scheduled)
    committed = c.with_changes(scheduled)
    assert fit.total_before == L.guarantee_total(committed)
    assert fit.total_after == L.guarantee_total(committed.with_change(change))
    assert (fit.healthy_gpus, fit.reserve_gpus) == (64, 8)


# -- impact ---------------------------------------------------------------------------------


@st.composite
def impacts(draw):
    c, holds = draw(worlds())
    change = draw(changes_for(c, low=0))
    pending = {q.name: draw(st.integers(0, 24)) for q in c.queues if draw(st.booleans())}
    state = L.ClusterState(
        c, holds, pending, healthy_gpus=draw(st.integers(0, 96)),
        free_gpus=draw(st.integers(0, 24)), reserve_gpus=draw(st.integers(0, 8)),
    )  # fmt: skip
    return state, change, L.impact(state, change)


@FAST
@given(impacts())
def test_an_impact_lists_exactly_the_jobs_whose_borrowing_changes(arg):
    state, change, result = arg
    holds = L.settled(state.contracts, state.holds)  # the flags the next plan writes back
    pb = L.positions(state.contracts, holds)
    pa = L.positions(state.contracts.with_change(change), holds)
    assert {j.id for j in result.newly_reclaimable} == pa.borrowed_ids - pb.borrowed_ids
    assert {j.id for j in result.no_longer_reclaimable} == pb.borrowed_ids - pa.borrowed_ids
    target = result.before if change.queue else result.line_before
    assert result.before == target
    assert result.line_before == pb.lines[change.line]
    assert result.line_after == pa.lines[change.line]


@FAST
@given(st.data())
def test_the_impact_of_a_raise_lists_no_job_newly_reclaimable(data):
    c, raise_, holds = raised_pair(data)
    assert L.impact(L.ClusterState(c, holds), raise_).newly_reclaimable == ()


@FAST
@given(impacts())
def test_likely_preempted_jobs_are_other_lines_borrowed_running_jobs(arg):
    state, change, result = arg
    pa = L.positions(state.contracts.with_change(change), L.settled(state.contracts, state.holds))
    by_id = {h.id: h for h in state.holds}
    ids = [j.id for j in result.likely_preempted]
    assert len(ids) == len(set(ids))
    for i in ids:
        h = by_id[i]
        assert i in pa.borrowed_ids and not h.preempting
        assert (h.queue != change.queue) if change.queue else (h.line != change.line)
    if result.demand_gpus <= state.free_gpus:
        assert result.likely_preempted == (), "free GPUs cover the demand first"


@FAST
@given(impacts())
def test_an_impact_reports_its_demand_fit_and_notes_consistently(arg):
    state, change, result = arg
    queues = (
        [change.queue] if change.queue else [q.name for q in state.contracts.queues_of(change.line)]
    )
    assert result.demand_gpus == sum(state.pending_gpus.get(q, 0) for q in queues)
    assert result.notes[0] == result.guarantees.message()
    data = result.as_dict()
    assert data["fits"] == result.guarantees.allowed
    assert data["notes"] == list(result.notes)
    assert data["target"] == {
        "line": change.line, "queue": change.queue,
        "quota_gpus": change.quota_gpus, "guarantee_gpus": change.guarantee_gpus,
    }  # fmt: skip
    for s in result.borrowing_shrinks:
        # A queue may reclaim from its sibling queues; a line only from other lines.
        assert s.at_risk_gpus > 0 and (change.queue or s.line != change.line)


@FAST
@given(worlds())
def test_a_change_to_the_same_contract_has_no_effect_on_any_job(world):
    c, holds = world
    ln = c.lines[0]
    state = L.ClusterState(c, holds, healthy_gpus=64, free_gpus=0)
    result = L.impact(state, L.Change(ln.name, None, ln.quota_gpus, ln.guarantee_gpus))
    assert result.before == result.after
    assert result.newly_reclaimable == result.no_longer_reclaimable == ()
    assert result.likely_preempted == () and result.borrowing_shrinks == ()


# -- recent use, eviction and suggestions ---------------------------------------------------


samples = st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 500), st.integers(0, 500)), max_size=30
)


@FAST
@given(samples)
def test_a_use_summary_lies_between_the_samples_extremes(points):
    u = advice.summarize_use(points)
    assert u.samples == len(points)
    if not points:
        assert u == advice.UseSummary(0, 0, 0.0, 0, 0.0, None)
        return
    used = [p[1] for p in points]
    pending = [p[2] for p in points]
    assert u.peak_used == max(used) and u.peak_pending == max(pending)
    assert min(used) - 0.05 <= u.avg_used <= max(used) + 0.05
    assert min(pending) - 0.05 <= u.avg_pending <= max(pending) + 0.05
    assert u.since == min(p[0] for p in points)
    assert u.as_dict()["samples"] == len(points)


@FAST
@given(samples, st.none() | st.integers(0, 1200), st.integers(0, 600))
def test_the_comparison_with_recent_use_says_each_thing_only_when_true(points, quota, guarantee):
    u = advice.summarize_use(points)
    notes = advice.compare_use(u, quota, guarantee)
    if not points:
        assert notes == ["No usage history yet: the comparison with recent use is not available."]
        return
    gpus = "1 GPU" if u.peak_used == 1 else f"{u.peak_used:,} GPUs"
    assert notes[0].startswith(f"Recent use: peak {gpus}, average"), notes[0]
    text = " ".join(notes)
    wanted = u.peak_used + u.peak_pending
    assert ("would have gone unused" in text) == (quota is not None and quota > wanted)
    if quota is not None and quota > wanted:
        assert f"{quota - wanted} GPUs would have gone unused" in text
    assert ("below the recent peak" in text) == (quota is not None and quota < u.peak_used)
    assert ("would protect nothing" in text) == (guarantee > u.peak_used)


series = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 64)), max_size=12).map(sorted)


@FAST
@given(series.filter(bool), st.integers(-10, 1200))
def test_delivered_gpu_time_is_the_step_integral(points, until):
    got = metrics.delivered_gpu_seconds(points, until)
    assert got >= 0
    if until >= points[-1][0]:
        steps = [*points[1:], (until, 0)]
        assert got == sum(u * (nxt[0] - t) for (t, u), nxt in zip(points, steps, strict=True))


def test_no_samples_delivered_nothing():
    assert metrics.delivered_gpu_seconds([], 100.0) == 0.0


@FAST
@given(series, st.integers(0, 1000), st.integers(0, 500))
def test_delivered_gpu_time_only_grows_with_the_window(points, until, more):
    grown = metrics.delivered_gpu_seconds(points, until + more)
    assert metrics.delivered_gpu_seconds(points, until) <= grown


@FAST
@given(st.floats(0, 1e6), st.floats(-1e6, 1e6))
def test_the_eviction_ratio_is_zero_without_delivered_time(evicted, delivered):
    ratio = metrics.eviction_ratio(evicted, delivered)
    assert ratio == (0.0 if delivered <= 0 else evicted / delivered)


def test_the_guarantee_advice_uses_the_one_eviction_ratio():
    assert advice.window_eviction_ratio is metrics.window_eviction_ratio


@FAST
@given(st.integers(0, 64), st.integers(1, 16))
def test_the_guarantee_needed_is_the_smallest_that_forbids_the_eviction(used, gpus):
    g = advice.guarantee_needed(advice.EvictionEvent(gpus, 1.0, used))
    active = max(used, gpus)
    assert active - g < gpus, "with it, the queue may not lose this many GPUs"
    assert active - (g - 1) >= gpus, "one less and the eviction was allowed"
    assert 1 <= g <= active


events = st.lists(
    st.builds(advice.EvictionEvent, st.integers(1, 16), st.floats(1, 1e5), st.integers(0, 64)),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    events, st.floats(0, 1e6), st.integers(0, 40), st.none() | st.integers(0, 64),
    st.sampled_from([0.01, 0.1, 0.3]),
)  # fmt: skip
def test_a_suggestion_raises_the_guarantee_within_its_cap_and_never_promises_too_much(
    evs, delivered, current, cap, target
):
    s = advice.suggest_guarantee("q", evs, delivered, current, cap, target)
    evicted = sum(e.gpu_seconds for e in evs)
    if len(evs) < 3:
        assert s is None
    if s is None:
        return
    assert s.suggested_guarantee > current
    assert cap is None or s.suggested_guarantee <= cap
    assert s.capped_at in (None, cap) and (s.capped_at is None or s.suggested_guarantee == cap)
    assert target < s.eviction_ratio <= 1.0
    assert 0 <= s.ratio_after <= s.eviction_ratio
    assert 0 <= s.prevented_share <= 1 and 0 <= s.prevented_evictions <= s.evictions == len(evs)
    if s.capped_at is None:
        assert s.prevented_share >= 0.8 - 1e-4, "the default coverage is met"
        assert s.prevented_evictions > 0
    prevented = [e for e in evs if advice.guarantee_needed(e) <= s.suggested_guarantee]
    assert s.prevented_evictions == len(prevented)
    assert s.prevented_share == round(sum(e.gpu_seconds for e in prevented) / evicted, 4)
    noun = "eviction" if len(evs) == 1 else "evictions"  # "1 evictions" (session 41)
    assert s.message().startswith(f"Queue q: {len(evs):,} {noun} cost ")


def test_suggestions_group_events_by_the_guarantee_each_needs():
    """Ties: every eviction needing the suggested guarantee is counted as prevented."""
    evs = [advice.EvictionEvent(2, 100.0, 4)] * 3 + [advice.EvictionEvent(1, 1.0, 40)]
    s = advice.suggest_guarantee("q", evs, 400.0, 0, None, 0.1)
    assert s is not None and s.suggested_guarantee == 3
    assert (s.prevented_evictions, s.prevented_share) == (3, round(300 / 301, 4))
    by_needed = defaultdict(int)
    for e in evs:
        by_needed[advice.guarantee_needed(e)] += 1
    assert dict(by_needed) == {3: 3, 40: 1}


def test_a_capped_suggestion_that_would_prevent_no_eviction_is_not_made():
    evs = [advice.EvictionEvent(1, 3600.0, 2)] * 3  # each needed a guarantee of 2
    s = advice.suggest_guarantee("q", evs, 3 * 3600.0, 0, cap=1, target_ratio=0.1)
    assert s is None, s and s.message()


# -- small exact cases ----------------------------------------------------------------------


def test_unknown_names_are_key_errors_that_say_which():
    c = L.Contracts((L.LineContract("a", 4),), (L.QueueContract("a1", "a"),))
    with pytest.raises(KeyError, match="unknown line 'b'"):
        c.line("b")
    with pytest.raises(KeyError, match="unknown queue 'a2'"):
        c.queue("a2")
    with pytest.raises(KeyError):
        c.with_change(L.Change("a", "a2", 1))
    assert c.queues_of("b") == ()


@pytest.mark.parametrize(
    "change,target",
    [(L.Change("llm"), "line llm"), (L.Change("llm", "llm-core", 3), "queue llm-core")],
)
def test_a_change_names_its_target(change, target):
    assert change.target == target


def test_positions_as_dicts_carry_every_derived_number():
    pos = L.Position(quota_gpus=8, guarantee_gpus=6, used_gpus=12, reclaimable_gpus=5,
                     active_gpus=4)  # fmt: skip
    assert pos.as_dict() == {
        "quota_gpus": 8, "guarantee_gpus": 6, "used_gpus": 12, "within_quota_gpus": 8,
        "entitled_gpus": 8, "borrowed_gpus": 4, "headroom_gpus": 0, "protected_gpus": 4,
    }  # fmt: skip
    assert list(pos.as_dict()) == [
        "quota_gpus", "guarantee_gpus", "used_gpus", "within_quota_gpus", "entitled_gpus",
        "borrowed_gpus", "headroom_gpus", "protected_gpus",
    ], "the API's key order"  # fmt: skip
    assert pos.room_gpus == 1, "the engine's room: quota minus non-reclaimable use (7)"
    unbounded = L.Position(None, 0, 3)
    assert unbounded.headroom_gpus is None and unbounded.protected_gpus == 0


def test_a_fit_as_dict_has_the_numbers_and_verdicts_the_impact_page_shows():
    assert L.GuaranteeFit(10, 14, 16, 4).as_dict() == {
        "total_before": 10, "total_after": 14, "healthy_gpus": 16, "reserve_gpus": 4,
        "limit_gpus": 12, "room_gpus": 2, "fits_capacity": True, "fits_reserve": False,
        "allowed": True, "needs_reserve_override": True,
    }  # fmt: skip
    assert list(L.GuaranteeFit(1, 2, 3).as_dict()) == [
        "total_before", "total_after", "healthy_gpus", "reserve_gpus", "limit_gpus", "room_gpus",
        "fits_capacity", "fits_reserve", "allowed", "needs_reserve_override",
    ], "the API's key order"  # fmt: skip


def test_plain_records_as_dicts_are_their_fields_in_order():
    use = advice.UseSummary(samples=3, peak_used=9, avg_used=4.5, peak_pending=2, avg_pending=0.5,
                       since=100.0)  # fmt: skip
    assert list(use.as_dict().items()) == [
        ("samples", 3), ("peak_used", 9), ("avg_used", 4.5), ("peak_pending", 2),
        ("avg_pending", 0.5), ("since", 100.0),
    ]  # fmt: skip
    suggestion = advice.Suggestion("q", 0.3, 0.1, 4, 12.0, 2, 6, 3, 0.75, 0.05, None)
    assert list(suggestion.as_dict()) == [
        "queue", "eviction_ratio", "target_ratio", "evictions", "evicted_gpu_hours",
        "current_guarantee", "suggested_guarantee", "prevented_evictions", "prevented_share",
        "ratio_after", "capped_at", "floor_for_target", "ratio_at_floor",
    ]  # fmt: skip
    assert suggestion.as_dict()["capped_at"] is None and not hasattr(suggestion, "__dict__")


@pytest.mark.parametrize(
    ("change", "line", "queue"),
    [
        (L.Change("a", None, 30, None), L.LineContract("a", 30, 4), L.QueueContract("aq", "a", 8, 2)),
        (L.Change("a", None, None, 6), L.LineContract("a", 20, 6), L.QueueContract("aq", "a", 8, 2)),
        (L.Change("a", "aq", None, 5), L.LineContract("a", 20, 4), L.QueueContract("aq", "a", 8, 5)),
        (L.Change("a", "aq", 12, 3), L.LineContract("a", 20, 4), L.QueueContract("aq", "a", 12, 3)),
        (L.Change("a", "aq", None, None), L.LineContract("a", 20, 4), L.QueueContract("aq", "a", 8, 2)),
    ],
)  # fmt: skip
def test_a_change_replaces_only_what_it_gives_on_its_target(change, line, queue):
    before = L.Contracts(
        (L.LineContract("a", 20, 4), L.LineContract("b", 10, 1)),
        (L.QueueContract("aq", "a", 8, 2), L.QueueContract("bq", "b", None, 1)),
    )
    after = before.with_change(change)
    assert after.lines == (line, before.lines[1])
    assert after.queues == (queue, before.queues[1])
    assert after.with_change(change) == after, "applying it twice changes nothing more"
