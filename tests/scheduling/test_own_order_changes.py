"""Putting a waiting job first among its owner's waiting jobs (``own_order_services``,
Slurm's ``scontrol top``) through the API, on the small simulated cluster (4 x 8 GPUs, kept
full): the job takes the first of its owner's places in the queue at the next cycle and
starts first when room frees; a colleague's job keeps its place; the lead and an admin may
(audited), others may not; a job that started, or already put first the latest, is
refused and nothing is written."""

from __future__ import annotations

import pytest

from core.models import AuditRecord
from scheduling.models import Job, JobEvent
from tests.drills import cycle, job, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def top(client, job_id: int):
    return client.post(f"/api/v1/jobs/{job_id}/top/")


def positions(client, ids: list[int]) -> list[int]:
    return [job(client, i)["queue_position"] for i in ids]


def full_cluster(admin) -> int:
    """A 32-GPU job of the admin's holding the whole cluster for 10 hours."""
    big = submit(admin, name="big", gpus=32, queue="llm-core", sim_duration_minutes=600)
    cycle(admin)
    return big


def test_the_job_put_first_takes_its_owner_s_first_place_and_nobody_else_moves(api):
    admin, me, lead = api("admin"), api("researcher"), api("lead")
    full_cluster(admin)
    a = submit(me, name="a")
    colleague = submit(lead, name="lead-job")
    b, c = submit(me, name="b"), submit(me, name="c")
    cycle(admin)
    before = positions(me, [a, colleague, b, c])
    assert sorted(before) == before, before
    response = top(me, c)
    assert response.status_code == 200, response.data
    assert response.data["first_among_own_at"] is not None
    (line,) = JobEvent.objects.filter(job_id=c, kind="top").values_list("message", flat=True)
    assert line == (
        "put first among researcher's waiting jobs of llm, tier experiment, by researcher "
        "(Slurm's scontrol top): it takes the first of their places in the queue; nobody "
        "else's job moves"
    )
    assert not AuditRecord.objects.filter(action="job.top").exists(), "their own job"
    cycle(admin)
    # c takes a's place, a b's, b c's; the colleague's stays
    pa, pcol, pb, pc = positions(me, [a, colleague, b, c])
    assert pc == before[0] and pcol == before[1] and (pa, pb) == (before[2], before[3])


def test_the_job_put_first_starts_first_when_room_frees(api):
    admin, me = api("admin"), api("researcher")
    big = full_cluster(admin)
    jobs = [submit(me, name=f"j{i}", gpus=32) for i in range(3)]
    assert top(me, jobs[2]).status_code == 200
    assert admin.post(f"/api/v1/jobs/{big}/cancel/").status_code == 200
    cycle(admin)  # the big run freed
    cycle(admin)
    states = [Job.objects.get(pk=j).state for j in jobs]
    assert states == ["pending", "pending", "running"], states


def test_the_lead_and_an_admin_may_audited_others_may_not(api):
    admin, me, lead = api("admin"), api("researcher"), api("lead")
    first, second = submit(me, name="a"), submit(me, name="b")
    assert top(lead, second).status_code == 200
    record = AuditRecord.objects.get(action="job.top")
    assert record.before == {"first_among_own_at": None}
    assert top(api("researcher2"), first).status_code == 404
    assert top(api("oncall"), first).status_code == 403
    assert top(admin, first).status_code == 200
    assert AuditRecord.objects.filter(action="job.top").count() == 2
    assert (
        Job.objects.get(pk=first).first_among_own_at > Job.objects.get(pk=second).first_among_own_at
    )


def test_refusals_write_nothing(api):
    admin, me = api("admin"), api("researcher")
    mine, other = submit(me, name="a"), submit(me, name="b")
    assert top(me, mine).status_code == 200
    again = top(me, mine)
    assert again.status_code == 400, again.data
    assert again.data["errors"] == {
        "first_among_own_at": ["it is already the one put first of those jobs"]
    }
    assert top(me, other).status_code == 200
    assert top(me, mine).status_code == 200, "put first again after another"
    cycle(admin)  # the cluster is empty: both run
    started = top(me, mine)
    assert started.status_code == 409
    assert "it has started: only a waiting job can be put first" in str(started.data)
    assert JobEvent.objects.filter(kind="top").count() == 3
