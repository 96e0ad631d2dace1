"""The time-zone helpers the dashboard and the quota mail use (``core.timezones``): one
shape of a time for people (``written``, what ``|utc`` renders), the zone a name stands for,
the zone a viewer's request reads in and the zone a mail's recipient chose; and the quota
approval mail, which gives the start of a later change in the requester's zone."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core import mail
from django.template import Context, Template
from django.test import RequestFactory
from django.utils import timezone

from core import timezones
from core.models import Profile
from quotas import services
from tests.quotas.conftest import HOUR, NOW, ask

pytestmark = pytest.mark.usefixtures("celery_eager")  # quota mail is sent in the test

WINTER = datetime(2026, 12, 1, 3, 10, 5, tzinfo=UTC)
SUMMER = datetime(2026, 7, 1, 3, 10, tzinfo=UTC)
TOKYO = ZoneInfo("Asia/Tokyo")


# -- written: the one shape of a time for people ---------------------------------------------


@pytest.mark.parametrize(
    ("zone", "moment", "seconds", "expected"),
    [
        (UTC, WINTER, False, "2026-12-01 03:10 UTC"),
        (UTC, WINTER, True, "2026-12-01 03:10:05 UTC"),
        (ZoneInfo("Etc/UTC"), WINTER, True, "2026-12-01 03:10:05 UTC"),
        (TOKYO, WINTER, True, "2026-12-01 12:10:05 JST"),
        (TOKYO, datetime(2026, 12, 1, 20, 0, tzinfo=UTC), False, "2026-12-02 05:00 JST"),
        (ZoneInfo("Europe/Paris"), SUMMER, False, "2026-07-01 05:10 CEST"),
        (ZoneInfo("Europe/Paris"), WINTER, False, "2026-12-01 04:10 CET"),
        (ZoneInfo("Asia/Dubai"), WINTER, False, "2026-12-01 07:10 UTC+04"),
        (ZoneInfo("Europe/London"), WINTER, False, "2026-12-01 03:10 GMT"),
    ],
)
def test_written_gives_the_time_in_the_zone_named(zone, moment, seconds, expected):
    assert timezones.written(moment, zone, seconds=seconds) == expected


@pytest.mark.parametrize(
    ("zone", "moment", "expected"),
    [
        (ZoneInfo("America/New_York"), datetime(1, 1, 1, 2, 0, tzinfo=UTC), "0001-01-01 02:00 UTC"),
        (TOKYO, datetime(9999, 12, 31, 20, 0, tzinfo=UTC), "9999-12-31 20:00 UTC"),
    ],
)
def test_a_time_its_zone_cannot_hold_is_written_in_utc(zone, moment, expected):
    # a quota request stored with a year-1 start made its pages a 500 west of UTC
    assert timezones.written(moment, zone) == expected


def test_written_is_what_the_pages_filter_renders():
    """``|utc`` and ``written`` are one function: a page and a mail never differ."""
    for name in ("UTC", "Asia/Tokyo", "Europe/Paris", "America/New_York"):
        with timezone.override(ZoneInfo(name)):
            zone = timezone.get_current_timezone()
            rendered = Template('{% load cluster_time %}{{ t|utc }}|{{ t|utc:"s" }}').render(
                Context({"t": WINTER})
            )
            assert rendered == (
                f"{timezones.written(WINTER, zone)}|{timezones.written(WINTER, zone, seconds=True)}"
            ), name


# -- the zone a name, a request, a recipient stands for ---------------------------------------


def test_zone_named_is_utc_itself_for_utc_and_for_anything_unknown():
    for name in ("UTC", "Etc/UTC", "Zulu", "", None, "Mars/Olympus", "../../etc/passwd"):
        assert timezones.zone_named(name) is UTC, name
    assert timezones.zone_named("Asia/Tokyo") == TOKYO


@pytest.mark.django_db
def test_the_zone_of_a_mails_recipient_is_the_one_they_chose_else_utc(demo):
    lead = demo["lead"]
    assert timezones.chosen_zone(lead) is None
    assert timezones.zone_of_recipient(lead) is UTC
    Profile.objects.filter(user=lead).update(time_zone="Asia/Tokyo")
    lead.profile.refresh_from_db()
    assert timezones.chosen_zone(lead) == "Asia/Tokyo"
    assert timezones.zone_of_recipient(lead) == TOKYO
    Profile.objects.filter(user=lead).update(time_zone="Mars/Olympus")  # not a zone: UTC
    lead.profile.refresh_from_db()
    assert timezones.zone_of_recipient(lead) is UTC
    assert timezones.chosen_zone(AnonymousUser()) is None and timezones.chosen_zone(None) is None


@pytest.mark.django_db
def test_a_user_without_a_profile_reads_utc(django_user_model):
    nobody = django_user_model.objects.create_user("noprofile", "n@example.org")
    assert timezones.chosen_zone(nobody) is None
    assert timezones.zone_of_recipient(nobody) is UTC


@pytest.mark.django_db
def test_the_viewer_zone_is_the_one_the_middleware_chose_else_as_it_would(demo):
    request = RequestFactory().get("/dashboard/")
    request.user = demo["admin"]
    request.display_zone = "Asia/Tokyo"
    assert timezones.viewer_zone(request) == TOKYO
    request.display_zone = "UTC"
    assert timezones.viewer_zone(request) is UTC
    fresh = RequestFactory().get("/dashboard/", HTTP_COOKIE="tz=Europe%2FParis")
    fresh.user = demo["admin"]
    assert timezones.viewer_zone(fresh) == ZoneInfo("Europe/Paris")
    Profile.objects.filter(user=demo["admin"]).update(time_zone="Asia/Tokyo")
    fresh.user = type(demo["admin"]).objects.get(pk=demo["admin"].pk)
    assert timezones.viewer_zone(fresh) == TOKYO, "the profile wins over the browser"


# -- the quota approval mail -------------------------------------------------------------------


def approval_mail(demo, django_capture_on_commit_callbacks) -> str:
    """The lead asks for a change that starts in a day; the admin approves it now."""
    req = ask(demo["lead"], quota_gpus=20, guarantee_gpus=6, starts_at=NOW + 24 * HOUR)
    with django_capture_on_commit_callbacks(execute=True):
        services.approve_quota_request(demo["admin"], req.pk, now=NOW)
    sent = [m for m in mail.outbox if "approved" in m.subject]
    assert [m.to for m in sent] == [["lead@example.org"]]
    return sent[0].body


@pytest.mark.django_db
def test_the_approval_mail_gives_the_start_in_the_requesters_zone(
    demo, django_capture_on_commit_callbacks
):
    """A lead in Tokyo read "it takes effect at 2026-03-03 09:00 UTC" while every page
    they open says JST."""
    Profile.objects.filter(user=demo["lead"]).update(time_zone="Asia/Tokyo")
    body = approval_mail(demo, django_capture_on_commit_callbacks)
    assert "; it takes effect at 2026-03-03 18:00 JST." in body, body
    assert "UTC" not in body


@pytest.mark.django_db
def test_the_approval_mail_of_a_requester_without_a_zone_is_in_utc_as_before(
    demo, django_capture_on_commit_callbacks
):
    body = approval_mail(demo, django_capture_on_commit_callbacks)
    assert "; it takes effect at 2026-03-03 09:00 UTC." in body, body
