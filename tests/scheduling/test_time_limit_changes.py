"""Changing a job's time limit (``scheduling.time_limit_services``, Slurm's ``scontrol update
TimeLimit=``) through the API, on the small simulated cluster: the owner, their team lead
or an admin may lower it; only an admin may raise it (audited, on the timeline); a run
lowered below what it has lasted stops at the next cycle and fails on its limit; a limit
raised after the loop read the old one is not stopped on it; refusals write nothing.
"""

from __future__ import annotations

import pytest

from core.models import AuditRecord
from scheduling.cycle import stops
from scheduling.models import Job, JobEvent
from tests.drills import advance, cycle, job, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def change(client, job_id: int, minutes, reason: str | None = None):
    body = {"time_limit_minutes": minutes} | ({} if reason is None else {"reason": reason})
    return client.post(f"/api/v1/jobs/{job_id}/time-limit/", body, format="json")


def lines(job_id: int) -> list[str]:
    return list(
        JobEvent.objects.filter(job_id=job_id, kind="time_limit").values_list("message", flat=True)
    )


def test_the_owner_lowers_a_limit_and_may_not_raise_it(api):
    me = api("researcher")
    mine = submit(me, name="t", gpus=8, time_limit_minutes=240)
    response = change(me, mine, 120, "the eval only needs two hours")
    assert response.status_code == 200, response.data
    assert response.data["time_limit_minutes"] == 120
    assert lines(mine) == [
        "time limit changed by researcher from 4 h a run to 2 h a run: the eval only needs two "
        "hours"
    ]
    assert not AuditRecord.objects.filter(action="job.time_limit").exists(), "their own job"
    refused = change(me, mine, 180)
    assert refused.status_code == 403
    assert "only a cluster admin may raise a time limit" in str(refused.data)
    assert Job.objects.get(pk=mine).time_limit_minutes == 120, "nothing written"
    free = submit(me, name="free", gpus=8)
    assert change(me, free, 600).status_code == 200, "giving one to a job without lowers it"


def test_an_admin_raises_it_audited_and_the_lead_lowers_it(api):
    me, lead, admin = api("researcher"), api("lead"), api("admin")
    mine = submit(me, name="t", gpus=8, time_limit_minutes=60)
    response = change(admin, mine, 600, "the loss is still falling")
    assert response.status_code == 200, response.data
    record = AuditRecord.objects.get(action="job.time_limit")
    assert (record.before, record.after, record.reason) == (
        {"time_limit_minutes": 60}, {"time_limit_minutes": 600}, "the loss is still falling",
    )  # fmt: skip
    assert change(lead, mine, 300).status_code == 200
    assert lines(mine)[-1] == "time limit changed by lead from 10 h a run to 5 h a run"
    assert change(api("researcher2"), mine, 30).status_code == 404, "not theirs to see"


@pytest.mark.parametrize(
    ("minutes", "status", "words"),
    [
        (0, 400, "greater than or equal to 1"),
        (129601, 400, "less than or equal to 129600"),
        ("2:00:00", 400, "valid integer"),
        (True, 400, "valid integer"),
        (240, 400, "the time limit is already 4 h"),
    ],
)
def test_bad_changes_are_refused_and_write_nothing(api, minutes, status, words):
    me = api("researcher")
    mine = submit(me, name="t", gpus=8, time_limit_minutes=240)
    response = change(me, mine, minutes)
    assert response.status_code == status and words in str(response.data), response.data
    assert Job.objects.get(pk=mine).time_limit_minutes == 240
    assert lines(mine) == []


def test_a_reason_must_be_one_clean_line(api):
    me = api("researcher")
    mine = submit(me, name="t", gpus=8, time_limit_minutes=240)
    for reason in ("two\nlines", "x" * 301, "rtl \u202e trick"):
        assert change(me, mine, 60, reason).status_code == 400, reason
    assert Job.objects.get(pk=mine).time_limit_minutes == 240


def test_a_queue_s_max_binds_all_but_admins(api):
    from quotas.models import Queue

    me, admin = api("researcher"), api("admin")
    mine = submit(me, name="t", gpus=8)
    Queue.objects.filter(name="llm-experiment").update(max_time_limit_minutes=600)
    refused = change(me, mine, 700)
    assert refused.status_code == 403 and "lets a run last at most 10 h" in str(refused.data)
    assert change(admin, mine, 700).status_code == 200


def test_an_ended_job_is_refused(api):
    admin, me = api("admin"), api("researcher")
    mine = submit(me, name="t", gpus=8, time_limit_minutes=240)
    assert me.post(f"/api/v1/jobs/{mine}/cancel/").status_code == 200
    response = change(me, mine, 60)
    assert response.status_code == 409 and "job is already cancelled" in str(response.data)
    cycle(admin)


def test_lowered_below_what_it_has_run_it_stops_at_the_next_cycle_and_fails(api):
    admin, me = api("admin"), api("researcher")
    mine = submit(me, name="t", gpus=8, sim_duration_minutes=600, time_limit_minutes=600,
                  checkpoint_path="nfs://ckpt/t", checkpoint_interval_minutes=10)  # fmt: skip
    cycle(admin)
    advance(admin, 45 * 60)
    cycle(admin)
    assert job(me, mine)["state"] == "running"
    assert change(me, mine, 30).status_code == 200
    assert "; this run is asked to stop at " in lines(mine)[-1]
    cycle(admin)
    assert job(me, mine)["state"] == "preempting"
    stopping = change(admin, mine, 900)
    assert stopping.status_code == 409, "already being stopped at its limit"
    assert "its run is already being stopped at its time limit" in str(stopping.data)
    for _ in range(8):
        advance(admin, 60)
        cycle(admin)
    detail = job(me, mine)
    assert detail["state"] == "failed"
    assert "of the 30 min a run may last" in detail["failure_reason"]


def test_a_limit_raised_after_the_loop_read_it_is_not_stopped_on(api, monkeypatch):
    """The stop phase reads the runs at their limit, then locks them: an admin's raise that
    commits in between is seen under the lock, and the run keeps running."""
    admin, me = api("admin"), api("researcher")
    mine = submit(me, name="t", gpus=8, sim_duration_minutes=600, time_limit_minutes=30)
    cycle(admin)
    advance(admin, 31 * 60)
    read = stops.runs_at_time_limit

    def read_then_raise(now: float) -> list[int]:
        found = read(now)
        assert found == [mine]
        Job.objects.filter(pk=mine).update(time_limit_minutes=120)  # the admin's raise
        return found

    monkeypatch.setattr(stops, "runs_at_time_limit", read_then_raise)
    cycle(admin)
    assert job(me, mine)["state"] == "running", "stopped on the old limit"
