"""Quota accounting (Q4, Q5, Q7) called directly: who is borrowed, what counts
against a quota, and what each queue / line may lose to preemption."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from scheduling.engine import plan
from scheduling.engine.accounting import derive_usage, preemption_budgets, snapshot_usage
from scheduling.engine.types import LineView, Mark, QueueView, Tier

from .helpers import HOUR, NOW, node, pjob, rjob, snap, standard_queues
from .sim import Stepper
from .strategies import snapshots


def job(id: int, gpus: int, **kw):
    kw.setdefault("queue", "q")
    return rjob(id, {"n": range(gpus)}, **kw)


def usage(running, queue_quota=None, line_quota=None):
    queues = {"q": QueueView("q", "llm", Tier.EXPERIMENT, queue_quota)}
    return derive_usage(running, queues, {"llm": LineView("llm", line_quota)})


BORROWING = [
    (
        "no quota, nothing borrowed (whatever the flag says)",
        [job(1, 8), job(2, 8, borrowed=True)],
        (None, None),
        set(),
        16,
    ),
    (
        "preemptible work above the quota is borrowed, newest first",
        [job(1, 4, started_at=0), job(2, 4, started_at=10), job(3, 4, started_at=5)],
        (8, None),
        {2},
        8,
    ),
    (
        "entitled work stacks first, then unflagged work, then work flagged borrowed",
        [
            job(1, 4, preemptible=False, started_at=30),
            job(2, 4, started_at=20),
            job(3, 4, started_at=10, borrowed=True),
        ],
        (8, None),
        {3},
        8,
    ),
    (
        "non-preemptible work over quota is never borrowed but pushes others out",
        [job(1, 12, preemptible=False), job(2, 4)],
        (8, None),
        {2},
        12,
    ),
    (
        "borrowed at the line level is borrowed",
        [job(1, 8, started_at=0), job(2, 8, queue="other", started_at=1)],
        (None, 8),
        {2},
        8,
    ),
]


@pytest.mark.parametrize(
    "running, quotas, borrowed, within", [b[1:] for b in BORROWING], ids=[b[0] for b in BORROWING]
)
def test_borrowed_work_is_re_derived_from_the_quotas(running, quotas, borrowed, within):
    u = usage(running, *quotas)
    assert u.borrowed_ids == borrowed
    assert u.nb_queue.get("q", 0) == within  # what counts against q's quota
    assert u.held_queue["q"] == sum(r.gpus for r in running if r.queue == "q")
    assert u.nb_line == {"llm": sum(r.gpus for r in running if r.id not in borrowed)}


def test_active_use_leaves_out_work_already_preempting():
    running = [job(1, 8), job(2, 4, state="preempting", preempted_for=9)]
    u = usage(running)
    assert u.active_queue == {"q": 8} and u.active_line == {"llm": 8}
    assert u.held_queue == {"q": 12} and u.held_line == {"llm": 12}


def test_snapshot_usage_is_derive_usage_over_the_snapshot():
    running = [rjob(1, {"n": range(8)}, started_at=0), rjob(2, {"m": range(8)}, started_at=1)]
    s = snap([node("n"), node("m")], running=running, lines=[LineView("llm", 8)])
    assert snapshot_usage(s).borrowed_ids == {2}
    assert snapshot_usage(s) == derive_usage(
        s.running, {q.name: q for q in s.queues}, {line.name: line for line in s.lines}
    )


def test_preemption_budgets_are_active_use_above_the_guarantee():
    running = [job(1, 8), job(2, 4), job(3, 2, queue="llm-experiment")]
    queues = {"q": QueueView("q", "llm", Tier.EXPERIMENT, guarantee_gpus=8)}
    u = derive_usage(running, queues, {"llm": LineView("llm", None, 20)})
    bq, bl = preemption_budgets(u, queues, {"llm": LineView("llm", None, 20)})
    # q: 12 active, 8 guaranteed; llm-experiment is unknown (no guarantee); llm: 14 < 20
    assert bq == {"q": 4, "llm-experiment": 2}
    assert bl == {"llm": 0}


def test_a_flagged_run_is_not_borrowed_when_newer_work_covers_what_is_over_the_quota():
    """Quota 8, 12 GPUs used: job 3 (6 GPUs, unflagged) crosses the quota and covers the 4
    over it, so job 2, flagged borrowed when it started and older than job 3, is within the
    quota once the flags settle (unsettled, it stacked on top and was borrowed too)."""
    running = [
        job(1, 4, preemptible=False, started_at=0),
        job(2, 2, started_at=5, borrowed=True),
        job(3, 6, started_at=10),
    ]
    u = usage(running, 8)
    assert u.borrowed_ids == {3}
    assert u.nb_queue["q"] == 6


@settings(max_examples=300, deadline=None)
@given(snapshots())
def test_the_flags_settle(s):
    """With each running job flagged exactly when the accounting counts it borrowed (what
    the plan writes back, ``Plan.marks``), the accounting counts the same jobs: the flags
    the loop writes are stable, and the next plan writes none."""
    borrowed = snapshot_usage(s).borrowed_ids
    flagged = [dataclasses.replace(r, borrowed=r.id in borrowed) for r in s.running]
    again = dataclasses.replace(s, running=tuple(flagged))
    assert snapshot_usage(again).borrowed_ids == borrowed
    assert plan(again, NOW).marks == ()


def test_the_plan_writes_back_the_flags_the_accounting_no_longer_agrees_with():
    """A run flagged borrowed whose queue is within its quota loses the flag; when a quota
    falls below its queue's use, the newest run is flagged; the plan after writes none."""
    lines = [LineView("llm", None)]
    st_ = Stepper(
        [node("a"), node("b")], lines, standard_queues("llm", experiment=8, core=4), now=NOW
    )
    st_.place(pjob(1, 4), {"a": range(4)}, 10 * HOUR, NOW - 2 * HOUR, borrowed=True)
    st_.place(pjob(2, 4), {"a": range(4, 8)}, 10 * HOUR, NOW - HOUR)
    st_.place(pjob(3, 2, "core", preemptible=True), {"b": range(2)}, 10 * HOUR, NOW - 3 * HOUR)
    st_.place(pjob(4, 2, "core", preemptible=True), {"b": range(2, 4)}, 10 * HOUR, NOW - HOUR)
    st_.queues = tuple(standard_queues("llm", experiment=8, core=2))  # core's quota cut to 2
    first = st_.step()
    assert first.marks == (Mark(1, False), Mark(4, True))
    assert not st_.running[1].borrowed and st_.running[4].borrowed
    assert st_.step(60).marks == ()
