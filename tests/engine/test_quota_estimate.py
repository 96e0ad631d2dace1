"""A job waiting for its quota is estimated to start after the jobs ahead of it that wait
for the same room (session 33).

On the full demo the 2,356th job waiting for line search-rec's room read "#2,356 in line ·
starts ~09:35", five minutes off: the estimate was when the line's running work would
release what *this* job lacks, as if no job were ahead of it. Now the room goes to the
jobs given QUOTA_EXCEEDED before it in the plan first (``QuotaRoom.reason``); the
plan's decisions are the same (the plan corpus's starts, stops, reservations and codes
did not change), only the estimates and their words.
"""

from __future__ import annotations

from scheduling.engine import types as et
from scheduling.engine.explain import iso

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
    assert [v.estimated_start for v in verdicts] == [NOW + HOUR, NOW + 2 * HOUR, NOW + 3 * HOUR]
    assert [v.details.get("waiting_ahead_gpus") for v in verdicts] == [None, 4, 8]
    assert verdicts[2].details["quota_room_at"] == iso(NOW + 3 * HOUR)
    assert verdicts[2].remedy.startswith(
        "Starts once 12 GPUs of line llm are released (8 of them for the jobs ahead of it) "
    )
    assert verdicts[0].remedy.startswith("Starts once 4 GPUs of line llm are released (")


def test_with_more_waiting_than_the_running_work_releases_there_is_no_estimate():
    fourth = pjob(13, 4, tier="finetune", preemptible=False, predicted_runtime_s=HOUR)
    v = plan_for([*WAITING, fourth]).verdicts[13]
    assert v.estimated_start is None
    assert v.details["no_estimate_reason"] == (
        "no running work of line llm is predicted to release enough GPUs for it and the jobs "
        "ahead of it"
    )
