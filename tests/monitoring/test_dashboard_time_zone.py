"""The dashboard in the viewer's zone (one page, one zone): the latest sample's time, the
chart captions, the charts' time axes and their hover read in the zone the viewer's pages
use, on the page and in the JSON its live refresh fetches; a UTC viewer's dashboard is as it
was; the ISO 8601 stamps stay UTC. Found after session 9: a Tokyo admin's dashboard said
"Latest sample at cluster time ... UTC" and "now (03:10 UTC)" under a header clock in JST."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import Client

from core import clock
from core.models import Profile
from monitoring import charts
from monitoring.models import MetricSample
from monitoring.views import build_dashboard, chart_zone
from tests.conftest import DEMO_PASSWORD

TOKYO = ZoneInfo("Asia/Tokyo")
PARIS = ZoneInfo("Europe/Paris")
T0 = datetime(2026, 12, 1, 3, 10, tzinfo=UTC)  # 12:10 JST
NOW = datetime(2026, 12, 1, 3, 40, 7, tzinfo=UTC)  # 12:40:07 JST
WINDOW = charts.TimeWindow(NOW - timedelta(hours=1), NOW, "last hour")


def points(n: int = 3) -> list[tuple[datetime, float]]:
    return [(T0 + timedelta(minutes=5 * i), 0.5) for i in range(n)]


# -- the figure builders ---------------------------------------------------------------------


def test_a_utilization_chart_in_tokyo_reads_jst_on_its_axis_hover_points_and_caption():
    fig = charts.utilization_figure(points(), window=WINDOW, now=(NOW, 0.6), zone=chart_zone(TOKYO))
    axis = fig["layout"]["xaxis"]
    assert axis["title"]["text"] == "cluster time (JST)"
    assert axis["hoverformat"] == "%Y-%m-%d %H:%M JST"
    # Plotly draws a time string at its wall-clock reading: the times are written in JST
    assert axis["range"] == ["2026-12-01T11:40:07+09:00", "2026-12-01T12:40:07+09:00"]
    assert fig["data"][0]["x"] == [
        "2026-12-01T12:10:00+09:00", "2026-12-01T12:15:00+09:00",
        "2026-12-01T12:20:00+09:00", "2026-12-01T12:40:07+09:00",
    ]  # fmt: skip
    assert fig["summary"].startswith("Utilization 60.0% now (12:40 JST); ")
    assert "UTC" not in json.dumps(fig)


def test_the_same_instants_in_tokyo_and_in_utc_are_the_same_instants():
    """Only the wall-clock reading changes: each point is the same moment."""
    utc = charts.utilization_figure(points(), window=WINDOW, now=(NOW, 0.6))
    jst = charts.utilization_figure(points(), window=WINDOW, now=(NOW, 0.6), zone=chart_zone(TOKYO))
    for a, b in zip(utc["data"][0]["x"], jst["data"][0]["x"], strict=True):
        assert datetime.fromisoformat(a) == datetime.fromisoformat(b)
    assert utc["layout"]["xaxis"]["title"]["text"] == "cluster time (UTC)"
    assert utc["summary"].startswith("Utilization 60.0% now (03:40 UTC); ")
    assert chart_zone(UTC) is charts.IN_UTC and chart_zone(ZoneInfo("Etc/UTC")) is charts.IN_UTC


def test_fragmentation_and_idle_charts_read_in_the_viewers_zone_too():
    zone = chart_zone(TOKYO)
    frag = charts.fragmentation_figure([(t, 3) for t, _ in points()], window=WINDOW, zone=zone)
    assert frag["layout"]["xaxis"]["title"]["text"] == "cluster time (JST)"
    assert frag["data"][0]["x"][0] == "2026-12-01T12:10:00+09:00"
    idle = [
        (t, {"as_of": t.timestamp(), "quota": 600.0 * i}, False)
        for i, (t, _) in enumerate(points(3))
    ]
    fig = charts.idle_causes_figure(idle, window=WINDOW, zone=zone)
    assert fig["layout"]["xaxis"]["title"]["text"] == "cluster time (JST)"
    assert fig["layout"]["xaxis"]["hoverformat"].endswith(" JST")
    assert fig["data"][0]["x"] == [
        "2026-12-01T12:10:00+09:00", "2026-12-01T12:15:00+09:00", "2026-12-01T12:20:00+09:00",
    ]  # fmt: skip


def test_a_window_across_a_change_of_daylight_saving_time_names_both():
    """Paris moves from CET to CEST on 2026-03-29 at 01:00 UTC: a week's axis over it
    says both names; each caption time says its own."""
    zone = chart_zone(PARIS)
    end = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)
    week = charts.TimeWindow(end - timedelta(days=7), end, "last 7 days")
    assert charts.zone_words(zone, [week.start, week.end]) == "CET/CEST"
    fig = charts.utilization_figure([(end - timedelta(days=3), 0.5)], window=week,
                                    now=(end, 0.5), zone=zone)  # fmt: skip
    assert fig["layout"]["xaxis"]["title"]["text"] == "cluster time (CET/CEST)"
    assert fig["summary"].startswith("Utilization 50.0% now (14:00 CEST); ")
    assert charts.zone_words(zone, [end]) == "CEST"
    # no window: the first and last points name it
    bare = charts.fragmentation_figure([(end - timedelta(days=6), 1), (end, 2)], zone=zone)
    assert bare["layout"]["xaxis"]["title"]["text"] == "cluster time (CET/CEST)"


# -- the page and its live JSON ----------------------------------------------------------------


def sample(at: datetime) -> MetricSample:
    return MetricSample.objects.create(
        at=at, gpus_total=32, gpus_healthy=32, gpus_allocated=16, utilization=0.5,
        fragmentation_gpus=3, pending_jobs=0,
    )  # fmt: skip


def admin_in(demo, zone: str) -> Client:
    Profile.objects.filter(user=demo["admin"]).update(time_zone=zone)
    client = Client()
    assert client.login(username="admin", password=DEMO_PASSWORD)
    return client


ASOF = re.compile(r'<p class="muted" id="dash-asof"[^>]*>(.*?)</p>', re.S)
CAPTIONS = re.compile(r'<span class="summary-text">([^<]*)</span>')


@pytest.mark.django_db
def test_a_tokyo_admin_reads_the_dashboard_in_jst_on_the_page_and_in_its_live_json(demo):
    sample(NOW - timedelta(minutes=7))  # 03:33:07 UTC = 12:33:07 JST
    client = admin_in(demo, "Asia/Tokyo")
    with clock.pinned(NOW):
        page = client.get("/dashboard/?window=1h")
        data = client.get("/dashboard/data/?window=1h").json()
    assert page.status_code == 200
    html = page.content.decode()
    asof = re.sub(r"\s+", " ", ASOF.search(html).group(1))
    assert "Latest sample at cluster time" in asof and ">2026-12-01 12:33:07 JST</time>" in asof
    assert 'datetime="2026-12-01T03:33:07+00:00"' in asof, "the machine-readable stamp: UTC"
    captions = CAPTIONS.findall(html)
    assert captions and not [c for c in captions if "UTC" in c], captions
    assert any("now (12:40 JST)" in c for c in captions), captions

    # the live refresh's JSON says the same: the time for people in JST, the stamps in UTC
    assert data["as_of"]["sample_text"] == "2026-12-01 12:33:07 JST"
    assert data["as_of"]["sample"] == "2026-12-01T03:33:07+00:00"
    for key in ("utilization", "fragmentation", "idle"):
        axis = data["figures"][key]["layout"]["xaxis"]
        assert axis["title"]["text"] == "cluster time (JST)", key
        assert axis["hoverformat"].endswith(" JST") and axis["range"][1].endswith("+09:00"), key
    assert "% now (12:40 JST); " in data["figures"]["utilization"]["summary"]
    assert "UTC" not in json.dumps(data["figures"])
    embedded = re.search(r'id="dashboard-data"[^>]*>(.*?)</script>', html, re.S).group(1)
    assert json.loads(embedded)["as_of"]["sample_text"] == "2026-12-01 12:33:07 JST"


@pytest.mark.django_db
def test_the_browsers_zone_serves_when_no_zone_was_chosen(demo):
    sample(NOW - timedelta(minutes=7))
    client = admin_in(demo, "")
    client.cookies["tz"] = "Europe%2FParis"
    with clock.pinned(NOW):
        data = client.get("/dashboard/data/?window=1h").json()
    assert data["as_of"]["sample_text"] == "2026-12-01 04:33:07 CET"
    assert data["figures"]["utilization"]["layout"]["xaxis"]["title"]["text"] == (
        "cluster time (CET)"
    )


@pytest.mark.django_db
def test_a_utc_admin_reads_the_dashboard_as_before(demo):
    sample(NOW - timedelta(minutes=7))
    client = admin_in(demo, "")
    with clock.pinned(NOW):
        data = client.get("/dashboard/data/?window=1h").json()
        built = build_dashboard("1h")
    assert data["as_of"]["sample_text"] == "2026-12-01 03:33:07 UTC"
    assert data == json.loads(json.dumps(built, default=str)), "no zone: UTC, as before"
    axis = data["figures"]["utilization"]["layout"]["xaxis"]
    assert axis["title"]["text"] == "cluster time (UTC)" and axis["hoverformat"] == (
        charts.TIME_HOVER
    )
    assert "% now (03:40 UTC); " in data["figures"]["utilization"]["summary"]
