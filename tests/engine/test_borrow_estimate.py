"""A job waiting for quota room that may borrow is told when it is predicted to find idle
capacity to borrow, when that comes before its own room (session 37, V1).

Before, it was told its room's turn, the latest it waits, and "It may start sooner on
borrowed idle capacity": on the ITP replay those jobs started hours before the time shown.
Now it takes its turn in the line of GPUs the running work releases, after the jobs
within quota that wait for them (the plan's borrowing pass comes after theirs), and not
before its cool-downs end (``line_estimate``, ``QuotaRoom.finish``). No decision changes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scheduling.engine import types as et
from scheduling.engine.borrowing import BORROW_REFUSED, HORIZONS_S
from scheduling.engine.explain import iso, when
from scheduling.engine.line_estimate import BORROWING, ESTIMATE_BASIS

from .helpers import HOUR, NOW, node, pjob, rjob, run, snap, standard_queues

# Two 8-GPU nodes. Line llm (quota 8) holds a00 until +3 h: its own room comes then.
# Line search (quota 16) holds a01 until +1 h: then its 8 GPUs idle, to be borrowed.
NODES = [node("a00"), node("a01")]
LLM_RUN = rjob(1, {"a00": range(8)}, tier="core", preemptible=False, predicted_end=NOW + 3 * HOUR)
SEARCH_RUN = rjob(
    2, {"a01": range(8)}, tier="core", line="search", preemptible=False,
    predicted_end=NOW + HOUR,
)  # fmt: skip
# llm's preemptible job of 4 GPUs for half an hour: over llm's quota, it may borrow
BORROWER = pjob(10, 4, predicted_runtime_s=HOUR / 2)


def snapshot_for(
    pending: list[et.PendingJob],
    running: tuple[et.RunningJob, ...] = (LLM_RUN, SEARCH_RUN),
    last_reclaim_at: float | None = None,
    **policy: float,
) -> et.Snapshot:
    queues = [
        et.QueueView(q.name, q.line, q.tier, q.quota_gpus, last_reclaim_at=last_reclaim_at)
        if q.name == "llm-experiment" else q
        for q in standard_queues("llm") + standard_queues("search")
    ]  # fmt: skip
    return snap(
        NODES,
        pending,
        running,
        lines=[et.LineView("llm", 8), et.LineView("search", 16)],
        queues=queues,
        policy=et.PolicyConfig.preset("full", swap_quota=False, **policy),
    )


def plan_for(pending: list[et.PendingJob], **kw: Any) -> et.Plan:
    return run(snapshot_for(pending, **kw))


def test_a_borrower_is_told_when_idle_capacity_frees_for_it_before_its_room():
    result = plan_for([BORROWER])
    v = result.verdicts[10]
    assert result.starts == ()
    assert v.code == "QUOTA_EXCEEDED"
    assert v.estimated_start == NOW + HOUR  # search's run ends: its GPUs idle
    assert v.details[ESTIMATE_BASIS] == BORROWING
    assert v.details["quota_room_at"] == iso(NOW + 3 * HOUR)  # its own room, later
    assert v.remedy == (
        f"Predicted to start by {when(NOW + HOUR)} on borrowed idle capacity; otherwise it "
        "starts once 4 GPUs of line llm are released, or after a quota increase."
    )
    assert "no_estimate_reason" not in v.details


def test_the_jobs_within_quota_waiting_for_the_gpus_go_first():
    """search's 6-GPU job within its quota waits for a01 too: it takes 6 of its GPUs at +1 h
    for its hour, and the borrower's turn comes when it ends, still before llm's room.
    (Without reservations: the line's estimates place no job on reserved nodes. Preemptible,
    as the borrower: a line is per class of nodes, and only preemptible work may share
    nodes with online inference.)"""
    within = pjob(20, 6, tier="core", line="search", preemptible=True, predicted_runtime_s=HOUR)
    result = plan_for([within, BORROWER], max_reservations=0)
    assert result.verdicts[20].estimated_start == NOW + HOUR  # its turn in the line
    v = result.verdicts[10]
    assert v.estimated_start == NOW + 2 * HOUR
    assert v.details[ESTIMATE_BASIS] == BORROWING


def test_the_room_that_comes_first_stays_the_estimate():
    """When the GPUs to borrow come no sooner than the job's room, the room is the estimate,
    told as before (with the hint that borrowing may come sooner)."""
    within = pjob(
        20, 8, tier="core", line="search", preemptible=False, predicted_runtime_s=3 * HOUR
    )
    v = plan_for([within, BORROWER]).verdicts[10]
    assert v.estimated_start == NOW + 3 * HOUR
    assert ESTIMATE_BASIS not in v.details
    assert v.remedy.startswith(
        f"Starts once 4 GPUs of line llm are released (predicted by {when(NOW + 3 * HOUR)})"
    )
    assert v.remedy.endswith("It may start sooner on borrowed idle capacity.")


def test_not_before_its_cool_down_ends():
    """A job preempted 10 minutes ago may borrow again only when its cool-down (2 h here)
    ends: its turn to borrow is not before then, though a01 idles from +1 h."""
    evicted = pjob(10, 4, predicted_runtime_s=HOUR / 2, last_evicted_at=NOW - 600)
    v = plan_for([evicted], borrow_cooldown_s=2 * HOUR).verdicts[10]
    assert v.estimated_start == NOW - 600 + 2 * HOUR
    assert v.details[ESTIMATE_BASIS] == BORROWING


def test_refused_for_a_cool_down_while_gpus_idle_it_borrows_when_the_cool_down_ends():
    """a01 idles now, but the job's queue had work preempted a minute ago: the queue's
    cool-down refuses it, and its message says when it may borrow again. That time is now
    its estimate (before session 37: its room, at +3 h, so the verdict named two times)."""
    v = plan_for([BORROWER], running=(LLM_RUN,), last_reclaim_at=NOW - 60).verdicts[10]
    until = NOW - 60 + et.PolicyConfig.preset("full").borrow_queue_cooldown_s
    assert v.code == "QUOTA_EXCEEDED" and v.details[BORROW_REFUSED] == "queue_cooldown"
    assert v.estimated_start == until
    assert f"again from {when(until)} (cool-down)" in v.message
    assert v.details[ESTIMATE_BASIS] == BORROWING


def test_a_job_the_lenders_forecast_refuses_keeps_its_room():
    """a01 idles, but the lenders needed 16 GPUs within every recent horizon: a job already
    preempted once, to run 10 h, is refused by the lenders' forecast and told its room, as
    before (when the forecast will allow it is not foreseen)."""
    long = pjob(10, 4, predicted_runtime_s=10 * HOUR, preemption_count=1)
    s = snapshot_for([long], running=(LLM_RUN,))
    v = run(dataclasses.replace(s, demand_peaks=(16,) * len(HORIZONS_S))).verdicts[10]
    assert v.details[BORROW_REFUSED] == "lenders_return"
    assert v.estimated_start == NOW + 3 * HOUR
    assert ESTIMATE_BASIS not in v.details


def test_a_non_preemptible_job_is_not_told_it_borrows():
    job = pjob(10, 4, tier="finetune", preemptible=False, predicted_runtime_s=HOUR / 2)
    v = plan_for([job]).verdicts[10]
    assert v.estimated_start == NOW + 3 * HOUR
    assert ESTIMATE_BASIS not in v.details


def test_with_two_cool_downs_the_one_that_ends_last_is_named_and_is_the_estimate():
    """The job was preempted 20 minutes ago (its own cool-down ends in 10) and its queue
    had work preempted a minute ago (ends in 29): the verdict names the queue's, the later,
    and that is when it is estimated to borrow; one time on the page."""
    job = pjob(10, 4, predicted_runtime_s=HOUR / 2, last_evicted_at=NOW - 1200)
    v = plan_for([job], running=(LLM_RUN,), last_reclaim_at=NOW - 60).verdicts[10]
    until = NOW - 60 + et.PolicyConfig.preset("full").borrow_queue_cooldown_s
    assert v.details[BORROW_REFUSED] == "queue_cooldown"
    assert v.estimated_start == until
    assert f"again from {when(until)} (cool-down)" in v.message
    # its own cool-down, ending later than its queue's, is the one named
    v = plan_for(
        [pjob(10, 4, predicted_runtime_s=HOUR / 2, last_evicted_at=NOW - 60)],
        running=(LLM_RUN,),
        last_reclaim_at=NOW - 1200,
    ).verdicts[10]
    assert v.details[BORROW_REFUSED] == "cooldown"
    assert v.estimated_start == NOW - 60 + et.PolicyConfig.preset("full").borrow_cooldown_s
