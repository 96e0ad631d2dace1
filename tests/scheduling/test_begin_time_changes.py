"""Changing a waiting job's earliest start (``scheduling.begin_time_services``, Slurm's
``scontrol update StartTime=``) through the API, on the small simulated cluster (4 x 8
GPUs): put later it waits with ``BEGIN_TIME`` on an empty cluster; put earlier it starts
then; cleared it queues from the clearing (its wait counts from then, not from its
submission); the owner, their lead and an admin may, others' changes audited; a job that
started, a time that is not one, the same time again are refused and write nothing; a
start put off while a cycle planned it is not launched.
"""

from __future__ import annotations

import pytest

from core import clock
from core.models import AuditRecord
from scheduling.cycle import run as cycle_run
from scheduling.models import Job, JobEvent
from tests.drills import advance, cycle, job, submit, when
from tests.scheduling.test_begin_time import iso, later, roomy_quotas  # noqa: F401 (autouse)
from tests.scheduling.test_job_dependencies import wait_observed

pytestmark = pytest.mark.django_db


def change(client, job_id: int, begin_at, reason: str | None = None):
    body = {"begin_at": begin_at} | ({} if reason is None else {"reason": reason})
    return client.post(f"/api/v1/jobs/{job_id}/begin-time/", body, format="json")


def lines(job_id: int) -> list[str]:
    kinds = JobEvent.objects.filter(job_id=job_id, kind="begin_time")
    return list(kinds.values_list("message", flat=True))


def test_put_off_it_waits_then_cleared_it_starts_its_wait_counted_from_the_clearing(
    api, django_capture_on_commit_callbacks
):
    admin, me = api("admin"), api("researcher")
    mine = submit(me, name="eval", gpus=8, sim_duration_minutes=30)
    begin = later(180)
    response = change(me, mine, iso(begin), "after the data refresh")
    assert response.status_code == 200, response.data
    assert when(response.data["begin_at"]) == begin
    assert lines(mine) == [
        f"earliest start changed by researcher from none to {begin:%Y-%m-%d %H:%M} UTC "
        "(Slurm's --begin); it queues from then: after the data refresh"
    ]
    assert not AuditRecord.objects.filter(action="job.begin_time").exists(), "their own job"
    cycle(admin)
    detail = job(me, mine)
    assert detail["state"] == "pending", "the cluster is empty, yet it waits"
    assert detail["pending_reason"]["code"] == "BEGIN_TIME"
    assert when(detail["estimated_start"]) == begin

    advance(admin, 40 * 60)
    cleared_at = clock.now()
    response = change(me, mine, None)
    assert response.status_code == 200, response.data
    assert response.data["begin_at"] is None
    assert lines(mine)[-1] == (
        f"earliest start cleared by researcher (was {begin:%Y-%m-%d %H:%M} UTC); it queues from now"
    )
    advance(admin, 5 * 60)
    count, total = wait_observed("llm-experiment")
    with django_capture_on_commit_callbacks(execute=True):
        cycle(admin)
    assert job(me, mine)["state"] == "running"
    new_count, new_total = wait_observed("llm-experiment")
    started = Job.objects.get(pk=mine).started_at
    assert new_count == count + 1
    # from the clearing: the 40 minutes it was asked to wait are not counted as waiting
    assert new_total - total == pytest.approx((started - cleared_at).total_seconds(), abs=1)


def test_put_earlier_it_starts_at_the_new_time(api):
    admin, me = api("admin"), api("researcher")
    mine = submit(me, name="tonight", gpus=8, begin_at=iso(later(600)))
    sooner = later(30)
    assert change(me, mine, iso(sooner)).status_code == 200
    cycle(admin)
    detail = job(me, mine)
    assert detail["pending_reason"]["code"] == "BEGIN_TIME"
    assert when(detail["estimated_start"]) == sooner
    advance(admin, 29 * 60)
    cycle(admin)
    assert job(me, mine)["state"] == "pending", "a minute early"
    advance(admin, 2 * 60)
    cycle(admin)
    assert job(me, mine)["state"] == "running"


def test_a_time_already_past_clears_it_as_none_does(api):
    me = api("researcher")
    mine = submit(me, name="t", gpus=8, begin_at=iso(later(60)))
    before = clock.now()
    assert change(me, mine, iso(later(-5))).status_code == 200
    row = Job.objects.get(pk=mine)
    assert row.begin_at is None
    assert before <= row.released_at <= clock.now(), "it queues from the change"
    assert "earliest start cleared by researcher" in lines(mine)[0]


def test_the_lead_and_an_admin_may_audited_others_may_not(api):
    me, lead, admin = api("researcher"), api("lead"), api("admin")
    mine = submit(me, name="t", gpus=8)
    begin = later(120)
    assert change(lead, mine, iso(begin), "the line's demo runs first").status_code == 200
    record = AuditRecord.objects.get(action="job.begin_time")
    assert (record.before, record.after, record.reason) == (
        {"begin_at": None}, {"begin_at": begin.isoformat()}, "the line's demo runs first",
    )  # fmt: skip
    assert change(admin, mine, "").status_code == 200
    assert AuditRecord.objects.filter(action="job.begin_time").count() == 2
    assert change(api("researcher2"), mine, iso(later(30))).status_code == 404
    assert Job.objects.get(pk=mine).begin_at is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("2026-12-08T09:00:00", "say the zone"),
        ("tomorrow", "not a time"),
        ("2026-02-30T09:00:00Z", "no such date or time"),
        (5, "not a time"),
        ("9999-12-31T23:59:59+00:00", "at most 366 days ahead"),
        ("２０２６-12-08T09:00:00Z", "not a time"),
        ("x" * 65, "no more than 64 characters"),
    ],
)
def test_bad_times_are_refused_and_write_nothing(api, value, words):
    me = api("researcher")
    begin = later(60)
    mine = submit(me, name="t", gpus=8, begin_at=iso(begin))
    response = change(me, mine, value)
    assert response.status_code == 400 and words in str(response.data), response.data
    assert Job.objects.get(pk=mine).begin_at == begin
    assert lines(mine) == []


def test_no_change_is_refused_and_so_is_a_missing_time(api):
    me = api("researcher")
    begin = later(60)
    mine = submit(me, name="t", gpus=8, begin_at=iso(begin))
    same = change(me, mine, iso(begin))
    assert same.status_code == 400 and "its earliest start is already" in str(same.data)
    free = submit(me, name="free", gpus=8)
    none = change(me, free, None)
    assert none.status_code == 400
    assert "it has no earliest start: it already queues" in str(none.data)
    missing = me.post(f"/api/v1/jobs/{free}/begin-time/", {}, format="json")
    assert missing.status_code == 400 and "begin_at" in missing.data["errors"]
    for reason in ("two\nlines", "x" * 301, "rtl \u202e trick"):
        assert change(me, free, iso(later(60)), reason).status_code == 400, reason
    assert lines(mine) == lines(free) == []
    assert Job.objects.get(pk=free).begin_at is None


def test_a_job_that_started_or_ended_is_refused(api):
    admin, me = api("admin"), api("researcher")
    mine = submit(me, name="t", gpus=8, sim_duration_minutes=60)
    cycle(admin)
    assert job(me, mine)["state"] == "running"
    response = change(me, mine, iso(later(60)))
    assert response.status_code == 409, response.data
    assert "it has started: only a waiting job's earliest start can change" in str(response.data)
    assert me.post(f"/api/v1/jobs/{mine}/cancel/").status_code == 200
    assert change(me, mine, iso(later(60))).status_code == 409
    assert Job.objects.get(pk=mine).begin_at is None


def test_a_start_put_off_while_the_cycle_planned_it_is_not_launched(api, monkeypatch):
    """The cycle read the job as free to start and planned it; the owner's change commits
    before the launch locks the row: the launch sees it and leaves the job waiting."""
    admin, me = api("admin"), api("researcher")
    mine = submit(me, name="t", gpus=8)
    launch = cycle_run.start_all
    begin = later(60)

    def put_off_then_launch(cycle_, starts, swaps=()):
        assert [s.job_id for s in starts] == [mine], "planned to start"
        Job.objects.filter(pk=mine).update(begin_at=begin)  # the owner's change
        return launch(cycle_, starts, swaps)

    monkeypatch.setattr(cycle_run, "start_all", put_off_then_launch)
    cycle(admin)
    assert job(me, mine)["state"] == "pending", "started although put off"
    monkeypatch.setattr(cycle_run, "start_all", launch)
    cycle(admin)
    assert job(me, mine)["pending_reason"]["code"] == "BEGIN_TIME"
