"""The dashboard's "Why GPUs are idle while jobs wait" figure (#19): pure, no database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from monitoring import charts
from monitoring.idle import CAUSE_LABELS, CAUSES

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


def sample(minutes: int, **totals: float) -> tuple[datetime, dict]:
    """A rollup sample ``minutes`` after T0 whose totals run to the plan 1 minute earlier."""
    as_of = (T0 + timedelta(minutes=minutes - 1)).timestamp()
    return (T0 + timedelta(minutes=minutes), {**totals, "as_of": as_of})


def test_each_interval_is_its_mean_idle_gpus_per_cause_stacked_as_steps():
    points = [
        sample(0, quota=0, reservation=0),
        sample(10, quota=600 * 120, reservation=600 * 8),  # 120 and 8 GPUs for 10 min
        sample(20, quota=600 * 120 + 600 * 40, reservation=600 * 8, unavailable=600 * 16),
    ]
    fig = charts.idle_causes_figure(points)
    assert json.loads(json.dumps(fig)) == fig
    by_name = {t["name"]: t for t in fig["data"]}
    assert list(by_name) == [CAUSE_LABELS[c] for c in ("quota", "reservation", "unavailable")]
    quota = by_name[CAUSE_LABELS["quota"]]
    # steps start at each interval's first plan; the last value repeats at the last one
    assert quota["x"] == [(T0 + timedelta(minutes=m)).isoformat() for m in (-1, 9, 19)]
    assert quota["y"] == [120.0, 40.0, 40.0]
    assert by_name[CAUSE_LABELS["unavailable"]]["y"] == [0.0, 16.0, 16.0]
    for trace in fig["data"]:
        assert trace["stackgroup"] == "idle" and trace["line"]["shape"] == "hv"
        assert "GPUs idle" in trace["hovertemplate"]
    styles = {(t["fillcolor"], t["fillpattern"]["shape"]) for t in fig["data"]}
    assert len(styles) == len(fig["data"]), "no two causes look alike"
    assert fig["summary"] == (
        # 110,400 GPU-seconds over 20 minutes; 9,600 of them on the node out of service
        "While jobs waited in these samples, 92 GPUs sat idle on average, 84 of them on "
        "healthy nodes (31 GPU-hours): over quota, may not borrow 87%, nodes out of service "
        "9%, held for a reservation 4%."
    )


def test_the_caption_names_the_window_and_reads_thousands():
    points = [sample(0), sample(60, insufficient=3600 * 2500.0)]
    window = charts.TimeWindow(T0 - timedelta(hours=23), T0 + timedelta(hours=1), "last 24 hours")
    fig = charts.idle_causes_figure(points, window=window)
    assert fig["summary"].startswith(
        "While jobs waited in the last 24 hours, 2,500 GPUs sat idle on average, 2,500 of them "
        "on healthy nodes (2,500 GPU-hours)"
    )
    assert fig["layout"]["xaxis"]["range"] == [window.start.isoformat(), window.end.isoformat()]
    assert fig["layout"]["xaxis"]["title"]["text"] == "cluster time (UTC)"
    assert fig["layout"]["yaxis"]["separatethousands"] is True


def test_without_two_measured_samples_it_says_why_and_seeded_history_is_left_out():
    seeded = (T0, {}, True)
    for points in ([], [sample(0, quota=5)], [seeded, sample(5)], [(T0, {}), (T0, {})]):
        fig = charts.idle_causes_figure(points)
        assert fig["summary"].startswith("No idle-GPU figures yet"), points
        assert fig["layout"]["annotations"][0]["text"] == "No figures yet"
    quiet = charts.idle_causes_figure([sample(0), sample(5)])
    assert quiet["summary"] == "No GPU sat idle while jobs waited in these samples."


def test_every_cause_has_a_label_and_a_style():
    assert set(charts.CAUSE_STYLE) == set(CAUSES) == set(CAUSE_LABELS)
    assert len(set(charts.CAUSE_STYLE.values())) == len(CAUSES)
