"""The Django admin goes through the audit trail and leaves history and live state alone
(#16 finding 8): role changes, user changes and password resets are audited; contract
history, quota requests, running jobs and alerts cannot be added, edited or deleted here."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client

from core.admin import AuditedAdmin, ReadOnlyAdmin
from core.models import AuditRecord, Profile, Role
from quotas.models import BusinessLine, QuotaChange
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from scheduling.sim_services import run_cycle_now

pytestmark = pytest.mark.django_db


@pytest.fixture
def site_admin(signed_in) -> Client:
    return signed_in("admin")


def assert_not_deletable(client: Client, admin_path: str, obj) -> None:
    """Neither the delete page nor the list's bulk action deletes ``obj``."""
    url = f"/admin/{admin_path}/"
    assert client.post(f"{url}{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    bulk = {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"}
    assert client.post(url, bulk).status_code in (200, 302)
    assert type(obj).objects.filter(pk=obj.pk).exists()


def records(action: str) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(action=action).order_by("id"))


def test_every_registered_model_admin_is_audited_or_read_only():
    loose = [
        f"{model._meta.label}: {type(model_admin).__name__}"
        for model, model_admin in admin.site._registry.items()
        if not isinstance(model_admin, AuditedAdmin | ReadOnlyAdmin)
    ]
    assert loose == []


def test_changing_a_role_is_audited_with_before_and_after(site_admin, demo):
    profile = Profile.objects.get(user=demo["researcher"])
    response = site_admin.post(
        f"/admin/portal/profile/{profile.pk}/change/",
        {"user": demo["researcher"].pk, "role": Role.ADMIN},
    )
    assert response.status_code == 302
    [entry] = records("admin.change")
    assert entry.actor == demo["admin"] and entry.target_type == "portal.profile"
    assert entry.before == {"role": "researcher"} and entry.after == {"role": "admin"}
    assert entry.source_ip == "127.0.0.1"


def test_a_password_reset_is_audited_without_the_password(site_admin, demo):
    user = demo["researcher2"]
    response = site_admin.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"password1": "Another-secret-42", "password2": "Another-secret-42",
         "usable_password": "true"},
    )  # fmt: skip
    assert response.status_code == 302
    [entry] = records("admin.change")
    assert entry.reason == "password changed" and entry.target_id == str(user.pk)
    assert "password" not in entry.before and "password" not in entry.after


def test_adding_and_deleting_a_membership_is_audited(site_admin, demo):
    line = BusinessLine.objects.first()
    added = site_admin.post(
        "/admin/portal/linemembership/add/",
        {"user": demo["researcher2"].pk, "business_line": line.pk, "is_lead": "on"},
    )
    assert added.status_code == 302
    [entry] = records("admin.add")
    assert entry.after["is_lead"] is True and entry.after["business_line"] == line.pk
    membership_id = entry.target_id
    deleted = site_admin.post(
        f"/admin/portal/linemembership/{membership_id}/delete/", {"post": "yes"}
    )
    assert deleted.status_code == 302
    [gone] = records("admin.delete")
    assert gone.target_id == membership_id and gone.before["user"] == demo["researcher2"].pk


def test_contract_history_cannot_be_added_edited_or_deleted(site_admin, demo):
    change = QuotaChange.objects.create(
        business_line=BusinessLine.objects.first(), reason="seed", quota_after=10,
        guarantee_before=0, guarantee_after=0,
    )  # fmt: skip
    assert site_admin.get("/admin/quotas/quotachange/add/").status_code == 403
    assert_not_deletable(site_admin, "quotas/quotachange", change)


def test_a_running_job_cannot_be_deleted_from_the_admin(site_admin, demo):
    job = submit_job(demo["researcher"], JobRequest(name="runs", queue="llm-experiment", gpus=1))
    run_cycle_now(demo["admin"])
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING
    assert_not_deletable(site_admin, "scheduling/job", job)


@pytest.mark.parametrize(
    "path",
    ["/admin/quotas/quotarequest/add/", "/admin/monitoring/alert/add/",
     "/admin/scheduling/job/add/", "/admin/portal/auditrecord/add/",
     "/admin/scheduling/node/add/", "/admin/authtoken/tokenproxy/add/"],
)  # fmt: skip
def test_rows_only_services_write_cannot_be_added(site_admin, path):
    # a token too: minted for another user, it would act (and be audited) as them
    assert site_admin.get(path).status_code == 403


def test_lines_and_queues_are_never_deleted_here(site_admin):
    assert_not_deletable(site_admin, "quotas/businessline", BusinessLine.objects.first())


def test_a_non_admin_cannot_use_the_admin(demo):
    client = Client()
    client.force_login(demo["oncall"])
    response = client.get("/admin/portal/profile/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_quota_policy_s_defragmentation_knob_is_bounded_and_audited(site_admin, demo):
    """``defragment_nodes`` (#19): more than 8 nodes a cycle is a form error that saves
    nothing; 2 is saved with an audit record of the change."""
    from django.forms.models import model_to_dict

    from quotas.models import MAX_DEFRAGMENT_NODES, QuotaPolicy

    policy = QuotaPolicy.load()
    url = f"/admin/quotas/quotapolicy/{policy.pk}/change/"
    form = {k: v for k, v in model_to_dict(policy).items() if k not in ("id", "singleton")}
    for bad in (MAX_DEFRAGMENT_NODES + 1, -1, "two"):
        response = site_admin.post(url, {**form, "defragment_nodes": bad})
        assert response.status_code == 200 and b"errornote" in response.content, bad
    assert QuotaPolicy.load().defragment_nodes == 0 and not records("admin.change")
    assert site_admin.post(url, {**form, "defragment_nodes": 2}).status_code == 302
    assert QuotaPolicy.load().defragment_nodes == 2
    [entry] = records("admin.change")
    assert entry.target_type == "quotas.quotapolicy"
    assert entry.before == {"defragment_nodes": 0} and entry.after == {"defragment_nodes": 2}


def test_the_quota_policy_s_starvation_bound_is_bounded_and_audited(site_admin, demo):
    """``starvation_bound_hours`` (#19): more than 90 days, a negative or a word is a form
    error that saves nothing; 72 hours is saved with an audit record; 0 turns it off."""
    from django.forms.models import model_to_dict

    from quotas.models import (
        DEFAULT_STARVATION_BOUND_HOURS,
        MAX_STARVATION_BOUND_HOURS,
        QuotaPolicy,
    )

    policy = QuotaPolicy.load()
    url = f"/admin/quotas/quotapolicy/{policy.pk}/change/"
    form = {k: v for k, v in model_to_dict(policy).items() if k not in ("id", "singleton")}
    for bad in (MAX_STARVATION_BOUND_HOURS + 1, -1, "week", "1e9"):
        response = site_admin.post(url, {**form, "starvation_bound_hours": bad})
        assert response.status_code == 200 and b"errornote" in response.content, bad
    assert QuotaPolicy.load().starvation_bound_hours == DEFAULT_STARVATION_BOUND_HOURS
    assert not records("admin.change")
    assert site_admin.post(url, {**form, "starvation_bound_hours": 72}).status_code == 302
    assert QuotaPolicy.load().starvation_bound_hours == 72
    [entry] = records("admin.change")
    assert entry.before == {"starvation_bound_hours": DEFAULT_STARVATION_BOUND_HOURS}
    assert entry.after == {"starvation_bound_hours": 72}
    assert site_admin.post(url, {**form, "starvation_bound_hours": 0}).status_code == 302
    assert QuotaPolicy.load().starvation_bound_hours == 0


def test_the_quota_policy_s_usage_days_stay_within_the_samples_kept(site_admin, demo, api):
    """``usage_days`` is the period of a line's "Recent use" and of its usage CSV link:
    0 (the link was a 400) or more days than the samples are kept (the page said "last 60
    days" over 30 days of samples) is a form error that saves nothing; 30 is saved, audited,
    and the line page's CSV link answers."""
    import re

    from django.forms.models import model_to_dict

    from quotas.models import USAGE_RETENTION_DAYS, QuotaPolicy

    policy = QuotaPolicy.load()
    url = f"/admin/quotas/quotapolicy/{policy.pk}/change/"
    form = {k: v for k, v in model_to_dict(policy).items() if k not in ("id", "singleton")}
    for bad in (0, USAGE_RETENTION_DAYS + 1, 91, -1):
        response = site_admin.post(url, {**form, "usage_days": bad})
        assert response.status_code == 200 and b"errornote" in response.content, bad
    assert QuotaPolicy.load().usage_days == 7 and not records("admin.change")
    assert site_admin.post(url, {**form, "usage_days": USAGE_RETENTION_DAYS}).status_code == 302
    [entry] = records("admin.change")
    assert entry.after == {"usage_days": USAGE_RETENTION_DAYS}
    page = site_admin.get("/quotas/lines/llm/").content.decode()
    assert f"Recent use (last {USAGE_RETENTION_DAYS} days)" in page
    link = re.search(r'<a href="([^"]+)" id="usage-csv"', page).group(1)
    assert site_admin.get(link).status_code == 200
