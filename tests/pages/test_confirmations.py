"""Confirm what destroys work (#15 item 9): cancelling a running job, draining or
cordoning a node and rejecting a quota request take two steps on the pages.

The first POST answers with what will be lost (GPU-hours since the last checkpoint, the
jobs and GPUs hit) and changes nothing; posting the confirmation's own form (as a
browser without JavaScript does) acts and writes the audit record. A confirmation whose
figures changed meanwhile is shown again instead of acting. The API stays one call.
"""

from __future__ import annotations

from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.test import Client

from core.models import AuditRecord
from quotas.models import BusinessLine, Queue, QuotaRequest
from quotas.services import QuotaRequestInput, create_quota_request
from scheduling.blast import seconds_since_checkpoint
from scheduling.clock import cluster_now
from scheduling.models import Job, Node
from tests.drills import advance, cycle, submit

pytestmark = pytest.mark.django_db


class _Forms(HTMLParser):
    """The fields of each <form> of a page: {form id: (action, {name: value})}."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: dict[str, tuple[str, dict[str, str]]] = {}
        self._current: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self._current = a.get("id", "")
            self.forms[self._current] = (a.get("action", ""), {})
        elif tag == "input" and self._current is not None and a.get("name"):
            self.forms[self._current][1][a["name"]] = a.get("value") or ""

    def handle_endtag(self, tag):
        if tag == "form":
            self._current = None


def confirm_form(response) -> tuple[str, dict[str, str]]:
    parser = _Forms()
    parser.feed(response.content.decode())
    assert "confirm-form" in parser.forms, "no confirmation form on the page"
    return parser.forms["confirm-form"]


def signed_in(demo, username: str) -> Client:
    client = Client()
    client.force_login(demo[username])
    return client


@pytest.fixture
def busy(demo, api):
    """Jobs of 4, 4 and 16 GPUs (on two nodes) on the 4 x 8-GPU test cluster, running for
    90 cluster minutes; one node stays empty."""
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    me = api("researcher")
    ids = [submit(me, name=f"train{i}", queue="llm-core", gpus=4, sim_duration_minutes=6000,
                  checkpoint_interval_minutes=600) for i in range(2)]  # fmt: skip
    ids.append(submit(me, name="wide", queue="llm-core", gpus=16, sim_duration_minutes=6000,
                      checkpoint_interval_minutes=600))  # fmt: skip
    admin = api("admin")
    cycle(admin)
    advance(admin, 90 * 60)
    cycle(admin)
    jobs = list(Job.objects.filter(pk__in=ids).order_by("pk"))
    assert all(j.state == "running" for j in jobs), [(j.pk, j.state) for j in jobs]
    return jobs


def gpu_hours(job: Job) -> float:
    job.refresh_from_db()
    return job.gpus * seconds_since_checkpoint(job.started_at, job.last_checkpoint_at,
                                               cluster_now()) / 3600  # fmt: skip


# -- cancel -----------------------------------------------------------------------------------


def test_cancelling_a_running_job_shows_the_lost_work_then_cancels_on_confirmation(demo, busy):
    job = busy[0]
    lead = signed_in(demo, "lead")  # cancels a member's job: audited
    first = lead.post(f"/jobs/{job.pk}/cancel/")
    assert first.status_code == 200
    body = first.content.decode()
    lost = gpu_hours(job)
    assert lost >= 4 * 1.5 - 0.1, "90 cluster minutes on 4 GPUs"
    assert f"<strong>{lost:.1f} GPU-hours</strong> of work since" in body
    assert "<strong>4 GPUs</strong> are released" in body
    assert f"Cancel job #{job.pk} ({job.name})?" in body
    assert 'name="confirm" value="1"' in body and f'href="/jobs/{job.pk}/"' in body
    job.refresh_from_db()
    assert job.state == "running", "the first step changes nothing"
    assert not AuditRecord.objects.filter(action="job.cancel").exists()

    action, fields = confirm_form(first)
    assert action == f"/jobs/{job.pk}/cancel/" and fields["confirm"] == "1"
    second = lead.post(action, fields)
    assert second.status_code == 302 and second["Location"] == f"/jobs/{job.pk}/"
    job.refresh_from_db()
    assert job.state == "cancelled"
    record = AuditRecord.objects.get(action="job.cancel")
    assert record.actor == demo["lead"] and record.after == {"state": "cancelled"}


def test_a_confirmation_shows_its_times_in_the_viewers_zone(demo, busy):
    """Page walk: a researcher who reads every page in JST pressed Cancel on a running job
    and read the next page in UTC, the header clock included ("since its last checkpoint
    (2026-12-06 18:12 UTC)", "Figures as of ... UTC"): the confirmation answers a POST,
    which the time-zone middleware leaves in UTC for the forms that read a time."""
    from zoneinfo import ZoneInfo

    from core.models import Profile

    tokyo = ZoneInfo("Asia/Tokyo")
    Profile.objects.filter(user=demo["researcher"]).update(time_zone="Asia/Tokyo")
    client = signed_in(demo, "researcher")
    started, saved = busy[0], busy[1]
    saved.last_checkpoint_at = saved.started_at + timedelta(minutes=30)
    saved.save(update_fields=["last_checkpoint_at"])
    for job, words in ((started, "its start, no checkpoint yet"), (saved, "its checkpoint")):
        body = client.post(f"/jobs/{job.pk}/cancel/").content.decode()
        since = job.last_checkpoint_at or job.started_at
        assert f"(since {words}, {since.astimezone(tokyo):%Y-%m-%d %H:%M} JST)" in body
        assert 'data-tz="Asia/Tokyo"' in body
        assert " UTC" not in body.split("<main", 1)[1]


def test_a_pending_job_is_still_cancelled_in_one_step(demo, api):
    job_id = submit(api("researcher"), name="waits", queue="llm-core", gpus=8)  # no cycle yet
    response = signed_in(demo, "researcher").post(f"/jobs/{job_id}/cancel/")
    assert response.status_code == 302
    assert Job.objects.get(pk=job_id).state == "cancelled"


def test_someone_who_may_not_cancel_gets_no_confirmation_but_a_403(demo, busy):
    response = signed_in(demo, "oncall").post(f"/jobs/{busy[0].pk}/cancel/")
    assert response.status_code == 403 and "confirm-form" not in response.content.decode()


def test_the_api_cancels_a_running_job_in_one_call(demo, api, busy):
    response = api("researcher").post(f"/api/v1/jobs/{busy[0].pk}/cancel/")
    assert response.status_code == 200
    assert Job.objects.get(pk=busy[0].pk).state == "cancelled"


# -- drain and cordon -------------------------------------------------------------------------


def node_of(job: Job) -> Node:
    return Node.objects.filter(allocations__job=job).order_by("name").first()


@pytest.mark.parametrize("action", ["drain", "cordon"])
def test_drain_and_cordon_show_the_blast_radius_then_act_on_confirmation(demo, busy, action):
    wide = busy[2]
    node = node_of(wide)
    client = signed_in(demo, "oncall")
    url = f"/oncall/nodes/{node.name}/action/"
    first = client.post(url, {"action": action, "reason": "ECC errors"})
    assert first.status_code == 200
    body = first.content.decode()
    assert f"{action.capitalize()} node {node.name}?" in body
    assert f"#{wide.pk} {wide.name}" in body and "<td>8 / 16</td>" in body, "here / total"
    lost = gpu_hours(wide)
    if action == "drain":
        assert "<strong>1 job</strong> stopped and requeued (llm-core)" in body
        assert "<strong>16 GPUs</strong> stop (8 here, the rest on their other nodes)" in body
        assert f"<strong>{lost:.1f} GPU-hours</strong> of work since their last" in body
    else:
        assert "<strong>0 GPU-hours</strong> are lost now" in body
        assert f"{lost:.1f} GPU-hours since their checkpoints are at risk" in body
        assert "<strong>0 free GPUs</strong>" in body
    assert Node.objects.get(pk=node.pk).state == "ready", "the first step changes nothing"
    assert not AuditRecord.objects.filter(action=f"node.{action}").exists()

    action_url, fields = confirm_form(first)
    assert fields == {"csrfmiddlewaretoken": fields["csrfmiddlewaretoken"], "action": action,
                      "reason": "ECC errors", "confirm": "1", "seen": str(wide.pk)}  # fmt: skip
    second = client.post(action_url, fields)
    assert second.status_code == 302 and second["Location"] == f"/oncall/nodes/{node.name}/"
    assert Node.objects.get(pk=node.pk).state == ("draining" if action == "drain" else "cordoned")
    record = AuditRecord.objects.get(action=f"node.{action}")
    assert record.actor == demo["oncall"] and record.reason == "ECC errors"


def test_an_empty_node_says_nobody_is_hit(demo, busy):
    empty = Node.objects.filter(allocations__isnull=True).order_by("name").first()
    body = (
        signed_in(demo, "oncall")
        .post(f"/oncall/nodes/{empty.name}/action/", {"action": "drain", "reason": "firmware"})
        .content.decode()
    )
    assert "<strong>0 jobs</strong> stopped and requeued (no queue)" in body
    assert 'id="confirm-jobs"' not in body and 'name="seen" value="none"' in body


def test_a_cordon_counts_the_free_gpus_as_the_nodes_page_does(demo, busy):
    """Page walk: a node's page read "6 used, 1 free, ..., 1 serving online inference, of
    8" and its cordon's confirmation "2 free GPUs of r011-n08 stop taking new work": the
    GPUs serving inference (or held by residual processes) are not free."""
    empty = Node.objects.filter(allocations__isnull=True).order_by("name").first()
    empty.inference, empty.inference_gpus, empty.residual_gpus = True, 6, 1
    empty.save(update_fields=["inference", "inference_gpus", "residual_gpus"])
    client = signed_in(demo, "oncall")
    page = client.get(f"/oncall/nodes/{empty.name}/").content.decode()
    assert "0 used, 1 free," in page
    body = client.post(
        f"/oncall/nodes/{empty.name}/action/", {"action": "cordon", "reason": "firmware"}
    ).content.decode()
    assert f"<strong>1 free GPU</strong> of {empty.name} stops taking new work (of 8)" in body


def test_a_drain_that_stops_one_gpu_says_so(demo, api, busy):
    """Page walk: "1 GPUs stop (1 here, the rest on their other nodes)" for a node whose
    only job holds one GPU."""
    one = submit(api("researcher"), name="one", queue="llm-core", gpus=1)
    cycle(api("admin"))
    node = node_of(Job.objects.get(pk=one))
    body = (
        signed_in(demo, "oncall")
        .post(f"/oncall/nodes/{node.name}/action/", {"action": "drain", "reason": "firmware"})
        .content.decode()
    )
    assert "<strong>1 GPU</strong> stops (1 here)" in body


def test_a_confirmation_that_saw_other_jobs_is_shown_again_and_changes_nothing(demo, busy):
    node = node_of(busy[2])
    client = signed_in(demo, "oncall")
    response = client.post(f"/oncall/nodes/{node.name}/action/",
                           {"action": "drain", "reason": "r", "confirm": "1", "seen": "none"})  # fmt: skip
    assert response.status_code == 409
    body = response.content.decode()
    assert "Nothing was done: the jobs it hits changed" in body
    assert f'name="seen" value="{busy[2].pk}"' in body
    assert Node.objects.get(pk=node.pk).state == "ready"
    assert not AuditRecord.objects.filter(action="node.drain").exists()


def test_uncordon_and_clean_act_at_once(demo, busy):
    node = node_of(busy[0])
    client = signed_in(demo, "oncall")
    url = f"/oncall/nodes/{node.name}/action/"
    client.post(url, {"action": "cordon", "reason": "r", "confirm": "1"})
    assert client.post(url, {"action": "uncordon", "reason": "ok"}).status_code == 302
    assert Node.objects.get(pk=node.pk).state == "ready"


def test_an_inapplicable_action_is_refused_without_a_confirmation(demo, busy):
    node = node_of(busy[0])
    Node.objects.filter(pk=node.pk).update(state="draining")
    response = signed_in(demo, "oncall").post(f"/oncall/nodes/{node.name}/action/",
                                              {"action": "cordon", "reason": "r"})  # fmt: skip
    assert response.status_code == 400
    assert "is draining; cannot cordon it" in response.content.decode()


def test_the_api_drains_in_one_call(demo, api, busy):
    node = node_of(busy[0])
    response = api("oncall").post(f"/api/v1/nodes/{node.name}/drain/", {"reason": "r"},
                                  format="json")  # fmt: skip
    assert response.status_code == 200
    assert Node.objects.get(pk=node.pk).state == "draining"


# -- reject -----------------------------------------------------------------------------------


def test_rejecting_a_quota_request_shows_who_keeps_waiting_then_rejects(demo, api):
    BusinessLine.objects.filter(name="llm").update(quota_gpus=16)
    me = api("researcher")
    submit(me, name="runs", queue="llm-core", gpus=16)
    cycle(api("admin"))
    submit(me, name="held", queue="llm-core", gpus=8)
    cycle(api("admin"))
    assert Job.objects.get(name="held").pending_code == "QUOTA_EXCEEDED"
    req = create_quota_request(demo["lead"], QuotaRequestInput(
        business_line="llm", quota_gpus=32, reason="room for the held job"))  # fmt: skip
    BusinessLine.objects.filter(name="llm").update(quota_gpus=1200)  # as a big line's reads
    admin = signed_in(demo, "admin")
    first = admin.post(f"/quotas/requests/{req.pk}/reject/", {"reject-note": "not this month"})
    assert first.status_code == 200
    body = first.content.decode()
    assert f"Reject quota request #{req.pk}?" in body
    # counts as every page writes them: "1,200", "1 waiting job ... is held" (page walk)
    assert "<strong>quota 32 GPUs</strong> for line llm is not granted (it stays 1,200)" in body
    assert "<strong>1 waiting job (8 GPUs)</strong> of line llm is held by its quota" in body
    assert "<strong>1 job (8 GPUs)</strong> waits in line llm in all" in body
    req.refresh_from_db()
    assert req.state == QuotaRequest.State.PENDING
    assert not AuditRecord.objects.filter(action="quota_request.rejected").exists()

    action, fields = confirm_form(first)
    assert fields["reject-note"] == "not this month" and fields["confirm"] == "1"
    second = admin.post(action, fields)
    assert second.status_code == 302
    req.refresh_from_db()
    assert req.state == QuotaRequest.State.REJECTED and req.decision_note == "not this month"
    record = AuditRecord.objects.get(action="quota_request.rejected")
    assert record.actor == demo["admin"]


def test_a_reject_without_a_note_is_refused_before_any_confirmation(demo):
    req = create_quota_request(demo["lead"], QuotaRequestInput(
        business_line="llm", quota_gpus=32, reason="more"))  # fmt: skip
    response = signed_in(demo, "admin").post(f"/quotas/requests/{req.pk}/reject/",
                                             {"reject-note": ""})  # fmt: skip
    assert response.status_code == 400 and "confirm-form" not in response.content.decode()


def test_a_lead_cannot_reach_the_rejection_step(demo):
    req = create_quota_request(demo["lead"], QuotaRequestInput(
        business_line="llm", quota_gpus=32, reason="more"))  # fmt: skip
    response = signed_in(demo, "lead").post(f"/quotas/requests/{req.pk}/reject/",
                                            {"reject-note": "x"})  # fmt: skip
    assert response.status_code == 403


def test_the_api_rejects_in_one_call(demo, api):
    req = create_quota_request(demo["lead"], QuotaRequestInput(
        business_line="llm", quota_gpus=32, reason="more"))  # fmt: skip
    response = api("admin").post(f"/api/v1/quota-requests/{req.pk}/reject/", {"note": "no"},
                                 format="json")  # fmt: skip
    assert response.status_code == 200
    req.refresh_from_db()
    assert req.state == QuotaRequest.State.REJECTED


# -- the figures ------------------------------------------------------------------------------


def test_work_at_risk_counts_from_the_later_of_the_start_and_the_last_checkpoint():
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    hour = timedelta(hours=1)
    assert seconds_since_checkpoint(now - 3 * hour, None, now) == 3 * 3600
    assert seconds_since_checkpoint(now - 3 * hour, now - hour, now) == 3600
    # restarted after its last checkpoint: the restart resumed from it
    assert seconds_since_checkpoint(now - hour, now - 5 * hour, now) == 3600
    assert seconds_since_checkpoint(None, None, now) == 0
    assert seconds_since_checkpoint(now + hour, None, now) == 0, "never negative"


@pytest.mark.parametrize("grace, words", [(300, "5 minutes"), (60, "1 minute"),
                                          (90, "90 seconds"), (30, "30 seconds")])  # fmt: skip
def test_the_grace_is_said_in_words(settings, grace, words):
    from scheduling.blast import grace_text

    settings.PREEMPTION_GRACE_SECONDS = grace
    assert grace_text() == words
