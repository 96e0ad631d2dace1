"""An overdue job that starts by a quota swap holds a reservation (#19,
``QuotaSwap.overdue_first``).

A job that may not borrow and whose line is at quota, held by the line's own preemptible
work, starts by a quota swap, but only in the borrowing pass, on GPUs nobody else took.
On ITP a 64-GPU gang waited 14 days so: small jobs took every node that freed. With
``hold_quota_when_overdue`` an overdue one swaps in the first pass: it is a job within
quota waiting for nodes, holds a reservation that later work only backfills around, and
swaps when it starts, under the displaced queues' rules. It evicts no one.
"""

from __future__ import annotations

import dataclasses
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine import check_plan, plan
from scheduling.engine import types as et
from scheduling.engine.policy import swaps_before_evicting

from .helpers import HOUR, NOW, code, pjob, rack, rjob, run, snap, standard_queues
from .strategies import build_snapshot

DAY = 24 * HOUR
# llm: quota 8, held by its own preemptible experiment on a00. search: quota 24, holds 20:
# a01 and a02 until NOW + 10 h, half of a03 until NOW + 2 h. No whole node is free, and
# a03 is the first to be.
EXPERIMENT = rjob(1, {"a00": range(8)}, predicted_end=NOW + 6 * HOUR)
SEARCH = [
    rjob(2, {"a01": range(8)}, tier="core", line="search", predicted_end=NOW + 10 * HOUR),
    rjob(3, {"a02": range(8)}, tier="core", line="search", predicted_end=NOW + 10 * HOUR),
    rjob(4, {"a03": range(4)}, tier="core", line="search", predicted_end=NOW + 2 * HOUR),
]
# Job 10: llm's non-preemptible finetune job, 8 GPUs, waiting four days (the bound: 3).
OVERDUE = pjob(
    10, 8, tier="finetune", preemptible=False, submitted_at=NOW - 4 * DAY,
    predicted_runtime_s=4 * HOUR,
)  # fmt: skip
# Job 11: search's finetune job, submitted later: it would take a03's free half past NOW + 2 h.
LATER = pjob(11, 4, tier="finetune", line="search", predicted_runtime_s=5 * HOUR)


def scenario(
    pending: list[et.PendingJob],
    running: list[et.RunningJob] | None = None,
    nodes: list[et.NodeView] | None = None,
    **policy: object,
) -> et.Snapshot:
    knobs: dict[str, object] = dict(
        starvation_bound_s=3 * DAY, hold_quota_when_overdue=True, borrow_forecast=False
    )
    knobs.update(policy)
    return snap(
        nodes or rack("a", 4, "r0"),
        pending,
        [EXPERIMENT, *SEARCH] if running is None else running,
        lines=[et.LineView("llm", 8), et.LineView("search", 24)],
        queues=standard_queues("llm") + standard_queues("search"),
        policy=et.PolicyConfig.preset("full", **knobs),  # type: ignore[arg-type]
    )


def started_ids(result: et.Plan) -> list[int]:
    return [s.job_id for s in result.starts]


def test_without_the_hold_it_waits_for_quota_and_later_work_takes_the_gpus():
    result = run(scenario([OVERDUE, LATER], hold_quota_when_overdue=False))
    assert code(result, 10) == "QUOTA_EXCEEDED"
    assert started_ids(result) == [11]


def test_an_overdue_swapper_holds_a_reservation_later_work_cannot_take():
    result = run(scenario([OVERDUE, LATER]))
    v = result.verdicts[10]
    assert v.code in ("TOPOLOGY", "INSUFFICIENT_GPUS", "PRIORITY"), v
    assert v.estimated_start == NOW + 2 * HOUR  # when a03 is whole again
    assert "over its quota, but that does not hold it" in v.message  # what the job reads
    assert started_ids(result) == []  # job 11 would still run then
    assert result.preemptions == ()  # it evicts no one


def test_work_predicted_to_end_before_the_reservation_still_starts():
    short = dataclasses.replace(LATER, predicted_runtime_s=HOUR)
    result = run(scenario([OVERDUE, short]))
    assert started_ids(result) == [11]
    assert result.verdicts[10].estimated_start == NOW + 2 * HOUR


def test_a_job_not_yet_overdue_waits_for_quota_as_before():
    fresh = dataclasses.replace(OVERDUE, submitted_at=NOW - DAY)
    result = run(scenario([fresh, LATER]))
    assert code(result, 10) == "QUOTA_EXCEEDED"
    assert started_ids(result) == [11]


def test_when_the_nodes_free_it_starts_and_its_lines_work_becomes_borrowed():
    result = run(scenario([OVERDUE, LATER], running=[EXPERIMENT, *SEARCH[:2]]))  # a03 free
    assert {s.job_id: s.borrowed for s in result.starts}[10] is False
    assert result.swaps == (et.Swap(10, (1,)),)


def test_the_displaced_queues_rules_still_hold_it():
    # the experiment has run three days since its checkpoint: a reclaim would count more
    # GPU time than a swap may put at risk, so no swap, and no reservation either
    old = dataclasses.replace(EXPERIMENT, started_at=NOW - 3 * DAY, last_checkpoint_at=None)
    result = run(scenario([OVERDUE, LATER], running=[old, *SEARCH]))
    assert code(result, 10) == "QUOTA_EXCEEDED"
    assert started_ids(result) == [11]


def test_it_reclaims_no_borrowed_work_for_its_nodes():
    # other's borrowed experiment fills a03: a job within quota could reclaim it, the
    # overdue swapper (within quota only by the swap) waits for its reservation instead
    borrowed = rjob(5, {"a03": range(4, 8)}, line="other", borrowed=True)
    nodes = rack("a", 4, "r0")
    s = snap(
        nodes,
        [OVERDUE],
        [EXPERIMENT, *SEARCH, borrowed],
        lines=[et.LineView("llm", 8), et.LineView("search", 24), et.LineView("other", 0)],
        queues=standard_queues("llm") + standard_queues("search") + standard_queues("other"),
        policy=et.PolicyConfig.preset(
            "full", starvation_bound_s=3 * DAY, hold_quota_when_overdue=True,
            borrow_forecast=False,
        ),
    )  # fmt: skip
    result = run(s)
    assert result.preemptions == ()
    assert result.verdicts[10].estimated_start == NOW + 2 * HOUR


def cover_scenario(**policy: object) -> et.Snapshot:
    """llm: quota 10, its preemptible experiment holds 4 (half of a00). Job 10 is 2 short:
    the swap covers it, and a later 4-GPU job of llm that cannot be displaced, fitting in
    the room that is left, would take the cover away (4 + 8 > 10)."""
    half = rjob(1, {"a00": range(4)}, predicted_end=NOW + 6 * HOUR)
    knobs: dict[str, object] = dict(
        starvation_bound_s=3 * DAY, hold_quota_when_overdue=True, borrow_forecast=False
    )
    knobs.update(policy)
    later_np = pjob(12, 4, tier="finetune", preemptible=False, predicted_runtime_s=5 * HOUR)
    later_p = pjob(13, 4, tier="finetune", predicted_runtime_s=5 * HOUR)
    return snap(
        rack("a", 4, "r0"),
        [OVERDUE, later_np, later_p],
        [half, *SEARCH],
        lines=[et.LineView("llm", 10), et.LineView("search", 24)],
        queues=standard_queues("llm") + standard_queues("search"),
        policy=et.PolicyConfig.preset("full", **knobs),  # type: ignore[arg-type]
    )


def test_its_swaps_cover_is_held_against_later_work_that_cannot_be_displaced():
    s = cover_scenario()
    result = run(dataclasses.replace(s, pending=s.pending[:2]))
    assert result.verdicts[10].estimated_start == NOW + 2 * HOUR
    held = result.verdicts[12]
    assert held.code == "PRIORITY" and held.details["quota_held_for"] == 10
    assert started_ids(result) == []


def test_work_a_swap_could_displace_is_not_held_and_leaves_the_cover():
    result = run(cover_scenario())
    assert {s.job_id: s.borrowed for s in result.starts} == {13: False}
    assert result.verdicts[10].estimated_start == NOW + 2 * HOUR  # still covered


def test_without_the_hold_later_work_takes_the_cover():
    result = run(cover_scenario(hold_quota_when_overdue=False))
    assert {s.job_id: s.borrowed for s in result.starts} == {12: False, 13: True}
    assert code(result, 10) == "QUOTA_EXCEEDED"


def overdue_state(seed: int, n_nodes: int, n_running: int, n_pending: int) -> et.Snapshot:
    """A random state where swaps are likely: each line at (or a few GPUs below) its quota,
    most waiting jobs not preemptible, every one overdue; the risk cap on or off."""
    rng = random.Random(seed)
    policy = et.PolicyConfig.preset(
        "full", starvation_bound_s=60.0, hold_quota_when_overdue=True,
        borrow_forecast=rng.random() < 0.5, swap_risk_cap_gpu_h=rng.choice([0.0, 16.0]),
    )  # fmt: skip
    s = build_snapshot(rng, n_nodes, n_running, n_pending, rng.randint(1, 3), policy)
    held: dict[str, int] = {}
    for r in s.running:
        if not r.borrowed:
            held[r.line] = held.get(r.line, 0) + r.gpus
    return dataclasses.replace(
        s,
        lines=tuple(
            dataclasses.replace(x, quota_gpus=held.get(x.name, 0) + rng.randint(0, 4))
            for x in s.lines
        ),
        queues=tuple(dataclasses.replace(q, quota_gpus=None) for q in s.queues),
        pending=tuple(
            dataclasses.replace(j, submitted_at=NOW - DAY, preemptible=rng.random() < 0.3)
            for j in s.pending
        ),
    )


def overdue_only(s: et.Snapshot) -> set[int]:
    """The waiting jobs that may swap only as overdue jobs: not those that swap instead of
    evicting (``swaps_before_evicting``: a queue that may preempt, urgent's or a random
    state's own)."""
    queues = {q.name: q for q in s.queues}
    return {j.id for j in s.pending if not swaps_before_evicting(j, queues.get(j.queue), s.policy)}


def swappers_evict_no_one(s: et.Snapshot, result: et.Plan) -> None:
    """A job that swaps only because it is overdue stopped no one for itself."""
    only = overdue_only(s)
    swapped = {sw.job_id for sw in result.swaps}
    for p in result.preemptions:
        assert not (p.for_job_id in swapped and p.for_job_id in only), p


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(1, 8), st.integers(0, 10), st.integers(0, 12))
def test_overdue_swappers_keep_every_rule_and_evict_no_one(
    seed: int, n_nodes: int, n_running: int, n_pending: int
) -> None:
    """Whatever the state, the plan keeps every invariant (``check_plan`` re-derives each
    swap under the displaced queues' rules) and no swapper below ``urgent`` evicts."""
    s = overdue_state(seed, n_nodes, n_running, n_pending)
    result = plan(s, NOW)
    assert check_plan(s, result) == []
    swappers_evict_no_one(s, result)


def test_the_random_states_do_swap():
    """The property above is not vacuous: jobs that may swap only as overdue jobs wait as
    swappers in the first pass (their verdict says the quota does not hold them) and
    start by swaps."""
    swaps = waiting = 0
    for seed in range(200):
        s = overdue_state(seed, 1 + seed % 8, seed % 11, 1 + seed % 12)
        result = plan(s, NOW)
        assert check_plan(s, result) == []
        swappers_evict_no_one(s, result)
        only = overdue_only(s)
        swaps += sum(1 for sw in result.swaps if sw.job_id in only)
        waiting += sum(
            1
            for jid, v in result.verdicts.items()
            if jid in only and "over its quota, but that does not hold it" in v.message
        )
    assert swaps >= 1 and waiting >= 5
