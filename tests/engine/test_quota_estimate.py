"""A job waiting for its quota is estimated to start after the jobs ahead of it that wait
for the same room (session 33).

On the full demo the 2,356th job waiting for line search-rec's room read "#2,356 in line ·
starts ~09:35", five minutes off: the estimate was when the line's running work would
release what *this* job lacks, as if no job were ahead of it. Now the room goes to the
jobs given QUOTA_EXCEEDED before it in the plan first (``QuotaRoom.reason``); the
plan's decisions are the same (the plan corpus's starts, stops, reservations and codes
did not change), only the estimates and their words.

Since session 36 each job ahead gives its room back after its predicted runtime
(``quota_turns.first_fit``): before, they kept it for ever, so a job behind more GPUs than the
line's running work holds read "no estimate" (two thirds of the quota waits on the demo).
"""

from __future__ import annotations

from scheduling.engine import types as et
from scheduling.engine.explain import iso, when

from .helpers import HOUR, NOW, pjob, rack, rjob, run, snap, standard_queues

# llm (quota 12) holds 12: three 4-GPU core runs ending at +1 h, +2 h and +3 h. search is
# idle. Jobs 10-12 of llm, not preemptible (so they may not borrow), 4 GPUs each.
RUNNING = [
    rjob(i, {"a00": range(4 * (i - 1), 4 * i)} if i < 3 else {"a01": range(4)}, tier="core",
         preemptible=False, predicted_end=NOW + i * HOUR)
    for i in (1, 2, 3)
]  # fmt: skip
WAITING = [
    pjob(10 + i, 4, tier="finetune", preemptible=False, predicted_runtime_s=HOUR) for i in range(3)
]


def plan_for(pending: list[et.PendingJob]) -> et.Plan:
    return run(
        snap(
            rack("a", 4, "r0"),
            pending,
            RUNNING,
            lines=[et.LineView("llm", 12), et.LineView("search", 16)],
            queues=standard_queues("llm") + standard_queues("search"),
            policy=et.PolicyConfig.preset("full", swap_quota=False),
        )
    )


def test_each_job_waits_for_the_room_after_the_jobs_ahead_of_it():
    result = plan_for(WAITING)
    assert result.starts == ()
    verdicts = [result.verdicts[j.id] for j in WAITING]
    assert [v.code for v in verdicts] == ["QUOTA_EXCEEDED"] * 3
    # job 10 takes the room run 1 frees at +1 h and, running its hour, gives it back at
    # +2 h, when run 2 ends too: jobs 11 and 12 both start then
    assert [v.estimated_start for v in verdicts] == [NOW + HOUR, NOW + 2 * HOUR, NOW + 2 * HOUR]
    assert [v.details.get("waiting_ahead_gpus") for v in verdicts] == [None, 4, 8]
    assert verdicts[2].details["quota_room_at"] == iso(NOW + 2 * HOUR)
    # with jobs ahead, the remedy says when its turn comes, not a count of GPUs (first fit
    # may start it before some of them)
    assert verdicts[2].remedy.startswith(
        f"Starts when line llm's room comes round to it (predicted by {when(NOW + 2 * HOUR)}; "
        "the jobs ahead of it wait for 8 GPUs of it), or after a quota increase."
    )
    assert verdicts[0].remedy.startswith("Starts once 4 GPUs of line llm are released (")


def test_the_room_goes_round_behind_more_than_the_running_work_releases():
    """Four jobs of 4 GPUs wait behind 12 GPUs of running work: the fourth starts when the
    jobs ahead give their room back (before session 36: no estimate)."""
    fourth = pjob(13, 4, tier="finetune", preemptible=False, predicted_runtime_s=HOUR)
    v = plan_for([*WAITING, fourth]).verdicts[13]
    assert v.code == "QUOTA_EXCEEDED"
    assert v.estimated_start == NOW + 3 * HOUR  # run 3 ends, jobs 11 and 12 give theirs back
    assert "no_estimate_reason" not in v.details
    assert v.details["waiting_ahead_gpus"] == 12


def test_a_long_job_ahead_keeps_its_room_for_its_whole_run():
    """The turns follow each job's predicted runtime: a job ahead that runs 10 hours holds
    its room that long."""
    long_first = [
        pjob(10, 4, tier="finetune", preemptible=False, predicted_runtime_s=10 * HOUR),
        *WAITING[1:],
        pjob(13, 4, tier="finetune", preemptible=False, predicted_runtime_s=HOUR),
    ]
    verdicts = plan_for(long_first).verdicts
    # 10 at +1 h (until +11 h), 11 at +2 h (until +3 h), 12 at +3 h, 13 when 11 gives back
    assert [verdicts[i].estimated_start for i in (10, 11, 12, 13)] == [
        NOW + HOUR, NOW + 2 * HOUR, NOW + 3 * HOUR, NOW + 3 * HOUR
    ]  # fmt: skip


def test_a_job_larger_than_the_quota_has_no_estimate_and_holds_no_turn():
    huge = pjob(9, 16, tier="finetune", preemptible=False, predicted_runtime_s=HOUR)
    verdicts = plan_for([huge, *WAITING]).verdicts
    assert verdicts[9].estimated_start is None
    assert verdicts[9].details["no_estimate_reason"] == "it is larger than the whole line quota"
    assert [verdicts[j.id].estimated_start for j in WAITING] == [
        NOW + HOUR, NOW + 2 * HOUR, NOW + 2 * HOUR
    ]  # fmt: skip
