"""Borrowing that does not thrash (#19, ``scheduling/engine/borrowing.py``).

Scenarios for each rule (lenders' return, cool-down, eviction cap) and a Hypothesis
property: no borrowed start is predicted, by the plan's own runtime prediction and the
lenders' demand forecast, to be reclaimed before it ends; re-derived here by brute force
over every instant where the forecast or the borrowed load changes.
"""

from __future__ import annotations

import dataclasses
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine import check_plan, plan
from scheduling.engine import types as et
from scheduling.engine.accounting import derive_usage
from scheduling.engine.borrowing import HORIZONS_S
from scheduling.engine.policy import job_runtime, running_end

from .helpers import HOUR, NOW, pjob, rack, rjob, run, snap, standard_queues
from .strategies import snapshots

# llm: quota 8, holds it (job 1 on a00) and wants more; search: quota 24, idle (the lender).
RUNNING = [rjob(1, {"a00": range(8)}, tier="core", predicted_end=NOW + 10 * HOUR)]


def scenario(
    pending: list[et.PendingJob],
    peaks: tuple[int, ...] = (),
    queues: list[et.QueueView] | None = None,
    running: list[et.RunningJob] | None = None,
    **policy: object,
) -> et.Snapshot:
    """The rules on, the forecast for every borrower (``borrow_forecast_all``) unless
    ``policy`` says otherwise."""
    policy.setdefault("borrow_forecast_all", True)
    lines = [et.LineView("llm", 8), et.LineView("search", 24)]
    if queues is None:
        queues = standard_queues("llm") + standard_queues("search")
    s = snap(
        rack("a", 4, "r0"),
        pending,
        RUNNING if running is None else running,
        lines=lines,
        queues=queues,
        policy=et.PolicyConfig.preset("full", **policy),  # type: ignore[arg-type]
    )
    return dataclasses.replace(s, demand_peaks=peaks)


def borrowed(result: et.Plan) -> list[int]:
    return [s.job_id for s in result.starts if s.borrowed]


def refused(result: et.Plan, job_id: int) -> str:
    v = result.verdicts[job_id]
    assert v.code == et.Code.QUOTA_EXCEEDED
    return v.details.get("borrow_refused", "")


# -- rule 1: it must end before the lenders return ---------------------------------------
# Entitled demand: llm's 8 all along; search used 16 GPUs at peak in the last 4 h and 24
# in the last 8 h, none in the last 2 h.
PEAKS = (8, 8, 8, 8, 24, 32, 32, 32)


def test_idle_lender_without_history_lends():
    result = run(scenario([pjob(10, 8, predicted_runtime_s=5 * HOUR)]))
    assert borrowed(result) == [10]


def test_a_job_that_ends_before_the_lender_returns_borrows():
    # 1 h: the lender's peak of the last hour is 0; 3 h: 16 + llm's 8 + 8 borrowed = 32 GPUs
    result = run(
        scenario(
            [pjob(10, 8, predicted_runtime_s=HOUR), pjob(11, 8, predicted_runtime_s=3 * HOUR)],
            PEAKS,
        )
    )
    assert borrowed(result) == [10, 11]


def test_a_job_predicted_to_outlive_the_lenders_idle_time_does_not_borrow():
    result = run(scenario([pjob(10, 8, predicted_runtime_s=5 * HOUR)], PEAKS))
    assert borrowed(result) == []
    assert refused(result, 10) == "lenders_return"
    assert "predicted to need their idle GPUs back" in result.verdicts[10].message


def test_borrowers_count_each_other():
    # two 3-h borrowers of 8 GPUs: only one fits beside the lender's 16 GPUs of 4 h ago
    result = run(
        scenario(
            [pjob(10, 8, predicted_runtime_s=3 * HOUR), pjob(11, 8, predicted_runtime_s=3 * HOUR)],
            PEAKS,
        )
    )
    assert borrowed(result) == [10]
    assert refused(result, 11) == "lenders_return"


def test_waiting_lender_work_is_demand_now():
    # search waits for 16 GPUs itself (over what is free after its own start? no: it starts)
    # and a search job of 24 needs every idle GPU: nobody borrows them.
    pending = [pjob(10, 8, predicted_runtime_s=600.0), pjob(20, 24, line="search", tier="core")]
    result = run(scenario(pending))
    assert 20 in {s.job_id for s in result.starts}
    assert borrowed(result) == []


def test_a_reclaimed_job_s_own_waiting_is_not_the_lenders_demand():
    """A reclaimed job larger than its line's room borrows on an empty cluster: its own
    demand (its line's room) is not counted again beside the GPUs it borrows. Before,
    it was counted twice and such a job could never borrow again, however idle the
    cluster; it still waits for lenders that do need their GPUs."""
    whole = pjob(10, 32, preemption_count=1, predicted_runtime_s=HOUR)
    alone = run(scenario([whole], running=[]))
    assert borrowed(alone) == [10]
    # its own past waiting is in the recent peaks too (the portal samples it)
    assert borrowed(run(scenario([whole], peaks=(8,) * len(HORIZONS_S), running=[]))) == [10]
    # lenders that needed 24 GPUs within the last horizons are still expected back
    busy = run(scenario([whole], peaks=(24,) * len(HORIZONS_S), running=[]))
    assert borrowed(busy) == [] and refused(busy, 10) == "lenders_return"


def test_by_default_the_forecast_gates_only_jobs_already_preempted():
    fresh = pjob(10, 8, predicted_runtime_s=5 * HOUR)
    again = pjob(11, 8, predicted_runtime_s=5 * HOUR, preemption_count=1)
    result = run(scenario([fresh, again], PEAKS, borrow_forecast_all=False))
    assert borrowed(result) == [10]
    assert refused(result, 11) == "lenders_return"


def test_forecast_off_keeps_the_old_rule():
    result = run(
        scenario([pjob(10, 8, predicted_runtime_s=5 * HOUR)], PEAKS, borrow_forecast=False)
    )
    assert borrowed(result) == [10]


# -- rule 2: cool-down ---------------------------------------------------------------
def test_a_job_preempted_recently_waits_out_its_cooldown():
    recent = pjob(10, 8, predicted_runtime_s=600.0, last_evicted_at=NOW - 600)
    result = run(scenario([recent]))
    assert borrowed(result) == []
    assert refused(result, 10) == "cooldown"
    assert "cool-down" in result.verdicts[10].message
    later = dataclasses.replace(recent, last_evicted_at=NOW - 1801)
    assert borrowed(run(scenario([later]))) == [10]


def test_a_queue_reclaimed_recently_does_not_borrow():
    queues = [
        dataclasses.replace(q, last_reclaim_at=NOW - 300) if q.name == "llm-experiment" else q
        for q in standard_queues("llm") + standard_queues("search")
    ]
    pending = [pjob(10, 8, predicted_runtime_s=600.0), pjob(11, 8, tier="finetune")]
    result = run(scenario(pending, queues=queues))
    assert refused(result, 10) == "queue_cooldown"
    assert borrowed(result) == [11]  # another queue of the line is not cooling down
    relaxed = scenario(pending, queues=queues, borrow_queue_cooldown_s=0)
    assert sorted(borrowed(run(relaxed))) == [10, 11]


# -- rule 3: a queue above its eviction target borrows less ----------------------------
def ratio_queues(ratio: float) -> list[et.QueueView]:
    return [
        dataclasses.replace(q, eviction_ratio=ratio) if q.name == "llm-experiment" else q
        for q in standard_queues("llm") + standard_queues("search")
    ]


def test_eviction_ratio_above_target_caps_borrowed_gpus():
    pending = [pjob(10, 4, predicted_runtime_s=600.0), pjob(11, 4, predicted_runtime_s=600.0)]
    # target 10 %: at 15 % the cap is 8 x (2 - 1.5) = 4 GPUs
    result = run(scenario(pending, queues=ratio_queues(0.15), borrow_cap=True))
    assert borrowed(result) == [10]
    assert refused(result, 11) == "eviction_cap"
    assert "above the 10% target" in result.verdicts[11].message


def test_cap_shrinks_to_zero_at_twice_the_target_and_lifts_below_it():
    pending = [pjob(10, 4, predicted_runtime_s=600.0), pjob(11, 4, predicted_runtime_s=600.0)]
    for ratio, started in ((0.2, []), (0.1, [10, 11])):
        result = run(scenario(pending, queues=ratio_queues(ratio), borrow_cap=True))
        assert borrowed(result) == started


def test_cap_counts_borrowed_work_already_running():
    running = [*RUNNING, rjob(2, {"a01": range(4)}, predicted_end=NOW + HOUR)]  # borrowed
    pending = [pjob(10, 4, predicted_runtime_s=600.0)]
    result = run(scenario(pending, queues=ratio_queues(0.15), running=running, borrow_cap=True))
    assert refused(result, 10) == "eviction_cap"


def test_cap_off_lets_a_queue_above_target_borrow():
    # off by default since session 15 (docs/replay.md): the same plan with and without
    pending = [pjob(10, 4, predicted_runtime_s=600.0), pjob(11, 4, predicted_runtime_s=600.0)]
    for knobs in ({}, {"borrow_cap": False}):
        result = run(scenario(pending, queues=ratio_queues(0.2), **knobs))
        assert borrowed(result) == [10, 11]


def test_above_target_the_forecast_gates_every_borrower_of_the_queue():
    # the forecast only for jobs already preempted, and for a queue above its target
    fresh = [pjob(10, 8, predicted_runtime_s=5 * HOUR)]
    knobs = dict(borrow_forecast_all=False, borrow_cap=False, borrow_forecast_over_target=True)
    below = run(scenario(fresh, PEAKS, queues=ratio_queues(0.05), **knobs))
    assert borrowed(below) == [10]
    above = run(scenario(fresh, PEAKS, queues=ratio_queues(0.15), **knobs))
    assert borrowed(above) == []
    assert refused(above, 10) == "lenders_return"
    short = [pjob(10, 8, predicted_runtime_s=HOUR)]  # ends before the lender returns
    assert borrowed(run(scenario(short, PEAKS, queues=ratio_queues(0.15), **knobs))) == [10]


def test_queue_cooldown_can_apply_only_above_target():
    def queues(ratio: float) -> list[et.QueueView]:
        return [
            dataclasses.replace(q, last_reclaim_at=NOW - 300, eviction_ratio=ratio)
            if q.name == "llm-experiment"
            else q
            for q in standard_queues("llm") + standard_queues("search")
        ]

    pending = [pjob(10, 8, predicted_runtime_s=600.0)]
    knobs = dict(borrow_cap=False, borrow_queue_cooldown_over_target=True)
    assert borrowed(run(scenario(pending, queues=queues(0.05), **knobs))) == [10]
    above = run(scenario(pending, queues=queues(0.15), **knobs))
    assert refused(above, 10) == "queue_cooldown"


# -- check_plan enforces the rules -----------------------------------------------------
def test_check_plan_reports_a_borrower_in_cooldown_or_outliving_the_lender():
    s = scenario([pjob(10, 8, predicted_runtime_s=5 * HOUR, last_evicted_at=NOW - 60)], PEAKS)
    bad = et.Plan(
        starts=(et.Start(10, (et.Slot("a01", tuple(range(8))),), borrowed=True),),
        preemptions=(),
        reservations=(),
        verdicts={},
        now=NOW,
    )
    errors = check_plan(s, bad)
    assert any("cool-down" in e for e in errors)
    assert any("predicted to be reclaimed" in e for e in errors)


# -- the promise, checked by brute force ----------------------------------------------
@st.composite
def borrowing_snapshots(draw) -> et.Snapshot:
    s = draw(snapshots())
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    peaks, level = [], rng.randint(0, 24)
    for _ in HORIZONS_S:
        level += rng.choice([0, 0, 1, 4, 8, 16])
        peaks.append(level)
    queues = [
        dataclasses.replace(
            q,
            eviction_ratio=rng.choice([None, 0.0, 0.05, 0.12, 0.18, 0.3]),
            last_reclaim_at=rng.choice([None, None, NOW - 100, NOW - 5000]),
        )
        for q in s.queues
    ]
    pending = [
        dataclasses.replace(
            j,
            last_evicted_at=rng.choice([None, None, NOW - 60, NOW - 4000]),
            line=j.line,
        )
        for j in s.pending
    ]
    policy = dataclasses.replace(
        s.policy,
        borrowing=True,
        borrow_forecast_all=rng.random() < 0.7,
        borrow_cooldown_s=rng.choice([0.0, 1800.0]),
        borrow_queue_cooldown_s=rng.choice([0.0, 600.0, 1800.0]),
        borrow_eviction_target=rng.choice([0.0, 0.1]),
        borrow_cap=rng.random() < 0.7,
        borrow_forecast_over_target=rng.random() < 0.5,
        borrow_queue_cooldown_over_target=rng.random() < 0.5,
    )
    return dataclasses.replace(
        s,
        queues=tuple(queues),
        pending=tuple(pending),
        policy=policy,
        demand_peaks=tuple(peaks) if rng.random() < 0.8 else (),
    )


def _peak(peaks: tuple[int, ...], dt: float) -> int:
    """The forecast for an instant ``dt`` after now: the peak over the smallest horizon
    that reaches past ``dt`` (the last one beyond it)."""
    for i, h in enumerate(HORIZONS_S):
        if dt < h:
            return peaks[i] if i < len(peaks) else 0
    return peaks[-1] if peaks else 0


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(borrowing_snapshots())
def test_no_borrower_is_predicted_to_be_reclaimed_before_it_ends(s: et.Snapshot):
    result = plan(s, NOW)
    assert check_plan(s, result) == []
    policy = s.policy
    pending = {j.id: j for j in s.pending}
    queues = {q.name: q for q in s.queues}
    lines = {line.name: line for line in s.lines}
    usage = derive_usage(s.running, queues, lines)
    capacity = sum(n.gpus_total for n in s.nodes if n.state == et.READY)
    demand_now: dict[str, int] = dict(usage.nb_line)
    for j in s.pending:
        demand_now[j.line] = demand_now.get(j.line, 0) + j.gpus
    gone = {p.victim_id: p.grace_deadline for p in result.preemptions}
    gone.update({m.job_id: m.grace_deadline for m in result.migrations})
    load = [
        (gone.get(r.id, running_end(r, NOW, policy)), r.gpus)
        for r in s.running
        if r.id in usage.borrowed_ids
    ]

    now_total = 0
    for name, d in demand_now.items():
        quota = lines[name].quota_gpus if name in lines else None
        now_total += d if quota is None else min(d, quota)

    def entitled(dt: float) -> int:
        return max(now_total, _peak(s.demand_peaks, dt))

    for start in result.starts:
        if not start.borrowed:
            continue
        job = pending[start.job_id]
        assert job.preemptible
        if policy.borrow_cooldown_s:
            assert (
                job.last_evicted_at is None or NOW - job.last_evicted_at >= policy.borrow_cooldown_s
            )
        q = queues[job.queue]
        target = policy.borrow_eviction_target
        over = target > 0 and q.eviction_ratio is not None and q.eviction_ratio > target
        if policy.borrow_queue_cooldown_s and (
            over or not policy.borrow_queue_cooldown_over_target
        ):
            since = NOW - q.last_reclaim_at if q.last_reclaim_at is not None else None
            assert since is None or since >= policy.borrow_queue_cooldown_s
        end = NOW + job_runtime(job, policy)
        gated = policy.borrow_forecast_all or job.preemption_count
        if not (gated or (over and policy.borrow_forecast_over_target)):
            load.append((end, job.gpus))  # a first borrow is not forecast by default
            continue
        # the job's own waiting is not the lenders' demand: once it borrows, its GPUs are
        # borrowed load (its line's term with it, less without it)
        d, quota = demand_now[job.line], lines[job.line].quota_gpus
        own = job.gpus if quota is None else min(d, quota) - min(d - job.gpus, quota)
        instants = {NOW, *(NOW + h for h in HORIZONS_S), *(t for t, _ in load)}
        for t in sorted(x for x in instants if NOW <= x < end):
            running_borrowed = sum(g for e, g in load if e > t)
            lenders = entitled(t - NOW) - own
            assert lenders + running_borrowed + job.gpus <= capacity, (job.id, t)
        load.append((end, job.gpus))


def test_the_rules_apply_only_to_borrowers():
    # an entitled job is never refused for a lender's forecast, a cool-down or a cap
    mine = pjob(10, 8, line="search", predicted_runtime_s=50 * HOUR, last_evicted_at=NOW - 1)
    result = run(scenario([mine], PEAKS, queues=ratio_queues(0.5)))
    assert 10 not in result.verdicts
    assert [(s.job_id, s.borrowed) for s in result.starts] == [(10, False)]
