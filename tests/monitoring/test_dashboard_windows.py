"""The dashboard's time windows (#15 item 4): each of 1 h, 24 h and 7 d has samples to draw on
an axis that spans the window (so ticks read hh:mm or dates, never fractions of a second),
the top card and the caption give the same reading, and the rollup samples once per
cluster minute, so the simulator at 60x gives the last hour twelve points, not one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from core import clock
from monitoring import charts
from monitoring.models import MetricSample
from monitoring.rollup import BEAT_SECONDS, SAMPLE_EVERY, rollup_if_due, sample_due
from monitoring.tasks import metrics_rollup
from monitoring.views import WINDOWS, build_dashboard
from tests.drills import advance

pytestmark = pytest.mark.django_db


def sample(at: datetime, utilization: float = 0.5, *, seeded: bool = False) -> MetricSample:
    return MetricSample.objects.create(
        at=at, gpus_total=32, gpus_healthy=32, gpus_allocated=round(32 * utilization),
        utilization=utilization, fragmentation_gpus=3, pending_jobs=0, seeded=seeded,
    )  # fmt: skip


def parse(x: str) -> datetime:
    return datetime.fromisoformat(x)


# -- the axis spans the window -------------------------------------------------------------


@pytest.mark.parametrize("window", list(WINDOWS))
def test_each_window_draws_on_an_axis_spanning_the_window_even_with_one_sample(demo, window):
    """The old dashboard let Plotly range the axis around its points: one sample gave an axis
    a few milliseconds wide, ticked "09:22:35.8445"."""
    sample(clock.now() - timedelta(minutes=2), 0.4)
    data = build_dashboard(window)
    for key in ("utilization", "fragmentation"):
        axis = data["figures"][key]["layout"]["xaxis"]
        start, end = (parse(x) for x in axis["range"])
        assert end - start == WINDOWS[window][1]
        assert axis["type"] == "date" and axis["tickformatstops"] == charts.TIME_TICKS
        assert axis.get("visible", True) is True
        assert "UTC" in axis["title"]["text"] and "UTC" in axis["hoverformat"]


def test_tick_labels_are_hours_and_minutes_within_a_day_and_dates_beyond():
    stops = {tuple(s["dtickrange"]): s["value"] for s in charts.TIME_TICKS}
    ten_minutes, three_hours, one_day = 600_000, 3 * 3_600_000, 86_400_000

    def label_for(dtick: int) -> str:  # Plotly: the first stop whose range holds dtick
        for (lo, hi), value in stops.items():
            if (lo is None or lo <= dtick) and (hi is None or dtick <= hi):
                return value
        raise AssertionError(dtick)

    assert label_for(ten_minutes) == label_for(three_hours) == "%H:%M"
    assert label_for(one_day) == label_for(2 * one_day) == "%b %d"
    assert label_for(5_000) == "%H:%M:%S", "seconds only when someone zooms that far in"


# -- the top card and the caption are one reading ------------------------------------------


def test_the_utilization_card_and_the_caption_give_the_same_reading(demo):
    """The card read the cluster live while the caption read the latest sample (82.7% vs
    84.2%): now the live reading is the series' last point and the caption's number."""
    sample(clock.now() - timedelta(minutes=1), 0.842)  # what the old caption showed
    data = build_dashboard("1h")
    card = data["tiles"]["utilization"]
    caption = data["figures"]["utilization"]["summary"]
    assert card == "0.0%" and caption.startswith(f"Utilization {card} now (")
    trace = data["figures"]["utilization"]["data"][0]
    assert trace["y"][-1] == 0.0 and trace["y"][0] == 84.2, "samples first, then now"
    assert "84.2%" not in caption.split(";")[0]


# -- enough samples in every window --------------------------------------------------------


def test_a_fresh_live_demo_draws_every_window_from_its_seeded_history(db, monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-123")
    call_command("seed_demo", nodes=16, nodes_per_rack=8, uniform=True, stdout=None)
    for window, (label, _span) in WINDOWS.items():
        fig = build_dashboard(window)["figures"]["utilization"]
        measured, seeded = fig["data"]
        assert seeded["name"] == charts.SEEDED_NAME
        assert len(seeded["x"]) >= 12, (window, len(seeded["x"]))
        assert seeded["line"]["dash"] == "dot" and seeded["line"]["color"] == charts.GREY
        assert f"over the {label}:" in fig["summary"] and "seeded demo history" in fig["summary"]
        assert fig["layout"]["showlegend"] is True
        assert len(measured["x"]) == 1, "only the live reading is measured so far"


def test_long_windows_are_downsampled_and_their_range_is_over_every_sample(demo):
    now = clock.now()
    MetricSample.objects.bulk_create(
        MetricSample(at=now - timedelta(minutes=5 * i), gpus_total=32, gpus_healthy=32,
                     gpus_allocated=16, utilization=0.95 if i == 999 else 0.5,
                     fragmentation_gpus=1, pending_jobs=0)
        for i in range(2000)
    )  # fmt: skip
    fig = build_dashboard("7d")["figures"]["utilization"]
    assert len(fig["data"][0]["x"]) <= charts.MAX_POINTS + 1
    # a peak at one sample may fall between the drawn points, never out of the caption
    assert "0.0–95.0%" in fig["summary"] and "2,000 samples" in fig["summary"]


# -- the rollup's cadence --------------------------------------------------------------------


def test_a_sample_is_due_once_a_cluster_minute_has_passed(demo):
    now = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    assert sample_due(now), "no sample yet"
    sample(now)
    assert not sample_due(now + timedelta(seconds=30))
    assert not sample_due(now + SAMPLE_EVERY - timedelta(seconds=BEAT_SECONDS))
    # a beat that comes a moment early writes now rather than one beat (5 s) late
    assert sample_due(now + SAMPLE_EVERY - timedelta(seconds=1))
    assert sample_due(now + SAMPLE_EVERY)


def test_on_the_simulator_at_60x_every_beat_writes_a_sample(api):
    """A beat every 5 wall seconds is 5 simulated minutes at 60x: each writes a sample, so
    an hour of cluster time holds twelve of them (one a wall minute gave one)."""
    admin = api("admin")
    advance(admin, 60)  # the simulator's clock starts
    first = rollup_if_due()
    assert first is not None
    assert rollup_if_due() is None, "the clock stands still (SIMULATOR_SPEED=0): not due"
    for _ in range(11):
        advance(admin, 300)  # what 5 wall seconds are at 60x
        assert metrics_rollup()["id"] is not None
    hour = MetricSample.objects.filter(at__gt=clock.now() - timedelta(hours=1))
    assert hour.count() == 12
    assert metrics_rollup() == {"id": None, "skipped": "not due"}


def test_the_fragmentation_card_caption_and_last_point_are_the_latest_sample(demo):
    """On a paused clock two rollups write samples at one instant: the latest is the one
    written last, for the card, the caption and the chart alike."""
    at = clock.now() - timedelta(minutes=1)
    for gpus in (4, 8):
        MetricSample.objects.create(at=at, gpus_total=32, gpus_healthy=32, gpus_allocated=16,
                                    utilization=0.5, fragmentation_gpus=gpus, pending_jobs=0)  # fmt: skip
    data = build_dashboard("1h")
    fig = data["figures"]["fragmentation"]
    assert data["tiles"]["fragmentation"] == "8" and fig["data"][0]["y"][-1] == 8
    assert fig["summary"].startswith("8 free GPUs are stranded on partly used nodes at the latest")
