"""The account page's "Mail about your jobs": off by default, opt in and out, the address
named, a bad or forged POST refused with nothing written, nobody else's choice touched."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from scheduling.job_mail import newest_event_id
from scheduling.models import JobEvent, JobMailPreference
from scheduling.services import JobRequest, submit_job

pytestmark = pytest.mark.django_db


def signed_in(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def chosen(user) -> list[str]:
    pref = JobMailPreference.objects.filter(user=user).first()
    return [] if pref is None else pref.kinds


def checked(page) -> list[str]:
    return re.findall(r'<input type="checkbox" name="kinds" value="(\w+)"[^>]*checked', page)


def test_off_by_default_and_the_page_names_the_address(demo):
    page = signed_in(demo["researcher"]).get("/account/").content.decode()
    assert "Mail about your jobs" in page and "researcher@example.org" in page
    assert checked(page) == []
    for kind in ("started", "succeeded", "failed", "preempted", "cancelled"):
        assert f'value="{kind}"' in page
    assert not JobMailPreference.objects.exists()


def test_opt_in_and_out_round_trip_sets_the_watermark_and_leaves_others_alone(demo):
    me, other = demo["researcher"], demo["researcher2"]
    submit_job(me, JobRequest(name="before", queue="llm-experiment", gpus=1))
    JobMailPreference.objects.create(user=other, kinds=["failed"], last_event_id=0)
    client = signed_in(me)

    saved = client.post(
        "/account/", {"form": "job-mail", "kinds": ["succeeded", "preempted"]}, follow=True
    )
    assert saved.redirect_chain == [("/account/", 302)]
    page = saved.content.decode()
    assert "Job mail to researcher@example.org: succeeded; preempted, requeued or moved." in page
    assert checked(page) == ["succeeded", "preempted"]
    pref = JobMailPreference.objects.get(user=me)
    assert pref.kinds == ["succeeded", "preempted"]
    assert pref.last_event_id == newest_event_id() == JobEvent.objects.latest("pk").pk

    off = client.post("/account/", {"form": "job-mail"}, follow=True)
    assert "No more mail about your jobs." in off.content.decode()
    assert chosen(me) == []
    assert checked(off.content.decode()) == []
    other_pref = JobMailPreference.objects.get(user=other)
    assert (other_pref.kinds, other_pref.last_event_id) == (["failed"], 0)


@pytest.mark.parametrize(
    "kinds", [["exploded"], ["succeeded", "everything"], ["succeeded'; DROP TABLE x"]]
)
def test_an_unknown_kind_is_a_form_error_and_nothing_is_stored(demo, kinds):
    me = demo["researcher"]
    JobMailPreference.objects.create(user=me, kinds=["failed"], last_event_id=7)
    response = signed_in(me).post("/account/", {"form": "job-mail", "kinds": kinds})
    assert response.status_code == 400
    assert "is not one of the available choices" in response.content.decode()
    pref = JobMailPreference.objects.get(user=me)
    assert (pref.kinds, pref.last_event_id) == (["failed"], 7)


def test_a_post_from_another_site_is_refused(demo):
    me = demo["researcher"]
    forged = signed_in(me, enforce_csrf_checks=True).post(
        "/account/", {"form": "job-mail", "kinds": ["started"]}
    )
    assert forged.status_code == 403
    assert not JobMailPreference.objects.exists()


def test_without_an_address_the_form_is_disabled_and_a_post_is_refused(demo):
    me = demo["researcher"]
    type(me).objects.filter(pk=me.pk).update(email="")
    client = signed_in(me)
    page = client.get("/account/").content.decode()
    assert "Your account has no email address" in page
    assert re.search(r"<fieldset disabled>\s*<legend>Mail me when a job of mine", page)
    response = client.post("/account/", {"form": "job-mail", "kinds": ["started"]})
    assert response.status_code == 400
    assert "your account has no email address to mail to" in response.content.decode()
    assert not JobMailPreference.objects.exists()


def test_the_zone_form_still_saves_alone(demo):
    me = demo["researcher"]
    response = signed_in(me).post("/account/", {"time_zone": "Asia/Tokyo"})
    assert response.status_code == 302
    assert me.profile.__class__.objects.get(user=me).time_zone == "Asia/Tokyo"
    assert not JobMailPreference.objects.exists()
