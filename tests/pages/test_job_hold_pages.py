"""Holds on the job page: the hold and release buttons (POST forms with CSRF) shown only to
whoever may use them; a pending job is held in one step, a running one suspended after a
confirmation (what it keeps or loses); the hold is shown with who, when and why; an admin
hold offers no release to its owner."""

from __future__ import annotations

import pytest

from core.models import AuditRecord
from scheduling.models import Job, JobEvent
from tests.drills import cycle, make_quotas_roomy, submit
from tests.pages.test_confirmations import confirm_form, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def page(client, job_id: int) -> str:
    response = client.get(f"/jobs/{job_id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_owner_holds_a_pending_job_in_one_step_and_releases_it(demo, api):
    job_id = submit(api("researcher"), name="waits", gpus=8)
    me = signed_in(demo, "researcher")
    body = page(me, job_id)
    assert 'id="hold-form"' in body and "Hold this job" in body
    assert 'name="csrfmiddlewaretoken"' in body
    assert 'id="release-form"' not in body

    response = me.post(f"/jobs/{job_id}/hold/", {"reason": "new data next week"})
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job_id}/"
    job = Job.objects.get(pk=job_id)
    assert (job.hold_kind, job.hold_reason, job.held_by.username) == (
        "user", "new data next week", "researcher",
    )  # fmt: skip
    body = page(me, job_id)
    assert 'id="hold-form" hidden' in body and 'id="release-form"' in body
    assert "Held by researcher since" in body and "new data next week" in body
    assert "held by researcher: new data next week" in body, "on the timeline"

    assert me.post(f"/jobs/{job_id}/release/").status_code == 302
    assert Job.objects.get(pk=job_id).held_at is None
    assert list(JobEvent.objects.filter(job_id=job_id).values_list("kind", flat=True)) == [
        "submitted", "held", "released",
    ]  # fmt: skip


def test_suspending_a_running_job_asks_first(demo, api):
    job_id = submit(api("researcher"), name="train", gpus=8)
    cycle(api("admin"))
    lead = signed_in(demo, "lead")
    assert "Suspend this job" in page(lead, job_id)
    first = lead.post(f"/jobs/{job_id}/hold/", {"reason": "line budget"})
    assert first.status_code == 200
    body = first.content.decode()
    assert f"Suspend job #{job_id} (train)" in body
    assert "restarts from the beginning" in body, "no checkpoint path: said so"
    assert Job.objects.get(pk=job_id).held_at is None, "the first step changes nothing"
    action, fields = confirm_form(first)
    assert fields["confirm"] == "1" and fields["reason"] == "line budget"
    second = lead.post(action, fields)
    assert second.status_code == 302
    job = Job.objects.get(pk=job_id)
    assert job.held_at is not None and job.state == "running"
    assert AuditRecord.objects.get(action="job.hold").actor == demo["lead"]
    assert "Being suspended" in page(lead, job_id)


def test_no_buttons_for_those_who_may_not_and_the_server_refuses_them(demo, api):
    job_id = submit(api("researcher"), name="waits", gpus=8)
    oncall = signed_in(demo, "oncall")
    body = page(oncall, job_id)
    assert 'id="hold-form"' not in body and 'id="release-form"' not in body
    assert oncall.post(f"/jobs/{job_id}/hold/").status_code == 403
    assert signed_in(demo, "researcher2").post(f"/jobs/{job_id}/hold/").status_code == 404
    assert Job.objects.get(pk=job_id).held_at is None

    admin = signed_in(demo, "admin")
    assert admin.post(f"/jobs/{job_id}/hold/", {"reason": "audit"}).status_code == 302
    me = signed_in(demo, "researcher")
    body = page(me, job_id)
    assert "only a cluster admin may release it" in body
    assert 'id="release-form"' not in body
    assert me.post(f"/jobs/{job_id}/release/").status_code == 403
    assert Job.objects.get(pk=job_id).held_at is not None


def test_an_admin_makes_the_owners_hold_an_admin_hold_on_the_page(demo, api):
    """Seen before: only the API and gpuctl could. The owner's hold shows the admin a form
    (reason required) that makes it an admin hold; its owner then may not release it, and
    the change is on the timeline and in the audit trail. Nobody else is offered it."""
    job_id = submit(api("researcher"), name="waits", gpus=8)
    me = signed_in(demo, "researcher")
    assert me.post(f"/jobs/{job_id}/hold/", {"reason": "new data"}).status_code == 302
    assert 'id="admin-hold-form"' not in page(me, job_id), "not for the owner"
    assert 'id="admin-hold-form"' not in page(signed_in(demo, "lead"), job_id)
    admin = signed_in(demo, "admin")
    body = page(admin, job_id)
    assert 'id="admin-hold-form"' in body and "Make it an admin hold" in body
    # a reason is required: refused, nothing changes
    refused = admin.post(f"/jobs/{job_id}/hold/", {"reason": ""}, follow=True)
    assert "Not held:" in refused.content.decode()
    assert Job.objects.get(pk=job_id).hold_kind == "user"
    assert admin.post(f"/jobs/{job_id}/hold/", {"reason": "quota audit"}).status_code == 302
    job = Job.objects.get(pk=job_id)
    assert (job.hold_kind, job.held_by.username, job.hold_reason) == (
        "admin",
        "admin",
        "quota audit",
    )
    assert 'id="admin-hold-form"' not in page(admin, job_id), "already an admin hold"
    body = page(me, job_id)
    assert "only a cluster admin may release it" in body and 'id="release-form"' not in body
    assert (
        JobEvent.objects.filter(job_id=job_id)
        .last()
        .message.startswith("admin hold by admin: quota audit, over the hold it had")
    )
    assert AuditRecord.objects.filter(action="job.hold", actor=demo["admin"]).count() == 1


def test_a_bad_reason_is_refused_on_the_page_and_nothing_changes(demo, api):
    job_id = submit(api("researcher"), name="waits", gpus=8)
    me = signed_in(demo, "researcher")
    response = me.post(f"/jobs/{job_id}/hold/", {"reason": "x\u202eevil"}, follow=True)
    assert "Not held: Invisible formatting characters" in response.content.decode()
    assert Job.objects.get(pk=job_id).held_at is None


def test_the_job_list_filters_held_jobs(demo, api):
    held = submit(api("researcher"), name="held-one", gpus=8)
    submit(api("researcher"), name="free-one", gpus=8)
    me = signed_in(demo, "researcher")
    assert me.post(f"/jobs/{held}/hold/").status_code == 302
    only_held = me.get("/jobs/?held=1").content.decode()
    assert "held-one" in only_held and "free-one" not in only_held
    not_held = me.get("/jobs/?held=0").content.decode()
    assert "free-one" in not_held and "held-one" not in not_held
    assert me.get("/jobs/?held=maybe").status_code == 400
