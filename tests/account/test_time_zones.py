"""Display time zones (#18): stored in UTC, shown in the viewer's zone (their choice, else
the browser's cookie, else UTC), named after each time; the API stays UTC."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.template import Context, Template
from django.test import Client
from django.utils import timezone

from core import timezones
from core.models import Profile
from tests.conftest import DEMO_PASSWORD

pytestmark = pytest.mark.django_db

WINTER = datetime(2026, 12, 1, 3, 10, tzinfo=UTC)
SUMMER = datetime(2026, 7, 1, 3, 10, 5, tzinfo=UTC)


def render(template: str, **context) -> str:
    return Template("{% load cluster_time %}" + template).render(Context(context))


def test_filter_renders_in_the_active_zone_and_names_it():
    assert render("{{ t|utc }}", t=WINTER) == "2026-12-01 03:10 UTC"
    with timezone.override("Europe/Paris"):
        assert render("{{ t|utc }}", t=WINTER) == "2026-12-01 04:10 CET"
        assert render('{{ t|utc:"s" }}', t=SUMMER) == "2026-07-01 05:10:05 CEST"
        assert render("{% display_zone %}") == "Europe/Paris"
    with timezone.override("Asia/Tokyo"):
        assert render("{{ t|utc }}", t=WINTER) == "2026-12-01 12:10 JST"
    with timezone.override("Asia/Dubai"):  # no abbreviation in the tz database
        assert render("{{ t|utc }}", t=WINTER) == "2026-12-01 07:10 UTC+04"
    with timezone.override("Europe/London"):  # offset 0 in winter, but not UTC
        assert render("{{ t|utc }}", t=WINTER) == "2026-12-01 03:10 GMT"
    with timezone.override("Etc/UTC"):
        assert render("{{ t|utc }}", t=WINTER) == "2026-12-01 03:10 UTC"
        assert render("{% display_zone %}") == "UTC"


def test_verdict_times_follow_the_viewers_zone_and_the_rest_of_the_text_is_kept():
    """The engine writes a verdict's times in UTC; a page rewrites each one as ``|utc``
    does (session 9: a Tokyo viewer read a verdict in UTC beside times in JST)."""
    text = "If nothing frees up for it by 2026-12-01 03:10 UTC, it may then <preempt>."
    assert render("{{ t|in_zone }}", t=text) == text.replace("<", "&lt;").replace(">", "&gt;")
    with timezone.override("Asia/Tokyo"):
        got = render("{{ t|in_zone }}", t=text)
        assert (
            got
            == "If nothing frees up for it by 2026-12-01 12:10 JST, it may then &lt;preempt&gt;."
        )
    with timezone.override("Europe/Paris"):
        summer = render("{{ t|in_zone }}", t="from 2026-07-01 03:10 UTC to 2026-12-01 03:10 UTC")
        assert summer == "from 2026-07-01 05:10 CEST to 2026-12-01 04:10 CET"
        assert render("{{ t|in_zone }}", t=None) == ""
        assert render("{{ t|in_zone }}", t="8 GPUs at 03:10, no date") == "8 GPUs at 03:10, no date"


def test_the_pages_scripts_get_the_servers_name_for_each_offset_of_the_zone():
    """``<html data-tz-names>``: the browser's Intl says "GMT+9" where the server says
    "JST"; with the server's names ``Dom.when`` writes the same as ``|utc``."""
    from zoneinfo import ZoneInfo

    assert timezones.offset_labels(ZoneInfo("Asia/Tokyo"), 2026) == "540=JST"
    assert timezones.offset_labels(ZoneInfo("Europe/Paris"), 2026) == "60=CET;120=CEST"
    assert timezones.offset_labels(ZoneInfo("Asia/Dubai"), 2026) == "240=UTC+04"
    assert timezones.offset_labels(ZoneInfo("Europe/London"), 2026) == "0=GMT;60=BST"
    assert timezones.offset_labels(UTC, 2026) == ""
    with timezone.override("Asia/Tokyo"):
        assert render("{% display_zone_names %}") == "540=JST"


def test_zone_names_are_checked_against_zoneinfo():
    assert timezones.valid_zone("America/New_York") == "America/New_York"
    for bad in ("", "Mars/Olympus", "../../etc/passwd", "UTC\x00", "x" * 100, None, 5):
        assert timezones.valid_zone(bad) is None


def signed_in(username: str, tz_cookie: str | None = None) -> Client:
    client = Client()
    assert client.login(username=username, password=DEMO_PASSWORD)
    if tz_cookie is not None:
        client.cookies["tz"] = tz_cookie
    return client


def job_page_submitted(client: Client, job_id: int) -> str:
    page = client.get(f"/jobs/{job_id}/").content.decode()
    return re.search(r'data-field="submitted_at">([^<]+)<', page).group(1)


def submit(api) -> dict:
    queues = api("researcher").get("/api/v1/queues/?business_line__name=llm").json()["results"]
    response = api("researcher").post(
        "/api/v1/jobs/", {"name": "tz", "queue": queues[0]["name"], "gpus": 1}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def test_pages_follow_cookie_then_profile_and_the_api_stays_utc(demo, api):
    job = submit(api)
    stored = datetime.fromisoformat(job["submitted_at"].replace("Z", "+00:00"))
    tokyo = stored.astimezone(timezones.zoneinfo.ZoneInfo("Asia/Tokyo"))

    assert job_page_submitted(signed_in("researcher"), job["id"]).endswith(" UTC")
    browser = signed_in("researcher", "Asia/Tokyo")
    assert job_page_submitted(browser, job["id"]) == f"{tokyo:%Y-%m-%d %H:%M} JST"
    page = browser.get("/").content.decode()
    assert 'data-tz="Asia/Tokyo"' in page and "shown in Asia/Tokyo" in page
    # as tz.js writes it (URL-encoded)
    assert job_page_submitted(signed_in("researcher", "Asia%2FTokyo"), job["id"]).endswith(" JST")
    # a bogus cookie is ignored
    assert job_page_submitted(signed_in("researcher", "Nowhere/Land"), job["id"]).endswith(" UTC")
    # the API is UTC whatever the cookie says
    detail = browser.get(f"/api/v1/jobs/{job['id']}/").json()
    assert detail["submitted_at"].endswith("Z")

    # the user's choice wins over the browser's
    saved = browser.post("/account/", {"time_zone": "America/New_York"})
    assert saved.status_code == 302
    assert Profile.objects.get(user=demo["researcher"]).time_zone == "America/New_York"
    shown = job_page_submitted(browser, job["id"])
    ny = stored.astimezone(timezones.zoneinfo.ZoneInfo("America/New_York"))
    assert shown == f"{ny:%Y-%m-%d %H:%M} {ny.tzname()}"
    # back to the browser's
    assert browser.post("/account/", {"time_zone": ""}).status_code == 302
    assert job_page_submitted(browser, job["id"]).endswith(" JST")


def test_account_page_refuses_unknown_zones(demo):
    client = signed_in("researcher", "Europe/Paris")
    page = client.get("/account/")
    assert page.status_code == 200
    assert "My browser&#x27;s zone (now: Europe/Paris)" in page.content.decode()
    for bad in ("Mars/Olympus", "x" * 200, "UTC; drop"):
        response = client.post("/account/", {"time_zone": bad})
        assert response.status_code == 400, bad
    assert Profile.objects.get(user=demo["researcher"]).time_zone == ""
    assert Client().get("/account/").status_code == 302


def test_static_script_sets_the_cookie_from_intl():
    from pathlib import Path

    script = Path("static/js/tz.js").read_text()
    assert "Intl.DateTimeFormat().resolvedOptions().timeZone" in script
    assert "tz=" in script
