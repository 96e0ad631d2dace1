"""The dashboard's "Waiting jobs by reason over time" figure: pure, no database.

Each rollup sample's pending reasons hold until the next sample (the last one's until now),
stacked per API.md code; the caption gives the window's job-hours per code and the latest
sample's reading, at its time, in the viewer's zone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from monitoring import charts
from monitoring.charts import reason_label
from monitoring.views import chart_zone

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
HOUR = charts.TimeWindow(T0 - timedelta(minutes=20), T0 + timedelta(minutes=40), "last hour")
API_CODES = {
    "NEVER_FITS", "HELD", "QUEUE_TIME_LIMIT", "DEPENDENCY", "BEGIN_TIME", "ARRAY_LIMIT", "QUOTA_EXCEEDED",
    "NODES_UNAVAILABLE", "PRIORITY",
    "PREEMPTING", "TOPOLOGY", "INSUFFICIENT_GPUS", "DEMOTED", "LAUNCH_RETRY",
}  # fmt: skip


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_each_sample_holds_until_the_next_and_the_last_until_now_stacked_as_steps():
    points = [
        (at(0), {"QUOTA_EXCEEDED": 3}),
        (at(10), {"QUOTA_EXCEEDED": 1, "TOPOLOGY": 2}),
        (at(30), {"TOPOLOGY": 4, "QUOTA_EXCEEDED": 0}),
    ]
    fig = charts.waiting_by_reason_figure(points, window=HOUR)
    assert json.loads(json.dumps(fig)) == fig
    # API.md's order (QUOTA_EXCEEDED is checked before TOPOLOGY), only the codes that occur
    assert [t["name"] for t in fig["data"]] == [
        reason_label(c) for c in ("QUOTA_EXCEEDED", "TOPOLOGY")
    ]
    quota, topology = fig["data"]
    # the samples, then the window's end (now) at the last sample's reading
    assert quota["x"] == topology["x"] == [at(m).isoformat() for m in (0, 10, 30, 40)]
    assert quota["y"] == [3, 1, 0, 0]
    assert topology["y"] == [0, 2, 4, 4]
    for trace in fig["data"]:
        assert trace["stackgroup"] == "waiting" and trace["line"]["shape"] == "hv"
        assert trace["mode"] == "lines" and "jobs waiting" in trace["hovertemplate"]
    assert "quota full (QUOTA_EXCEEDED)" in quota["hovertemplate"]
    assert fig["layout"]["xaxis"]["range"] == [HOUR.start.isoformat(), HOUR.end.isoformat()]
    assert fig["layout"]["yaxis"]["title"]["text"] == "waiting jobs"
    assert fig["layout"]["yaxis"]["dtick"] == 1, "a few jobs: whole-job ticks"
    # QUOTA_EXCEEDED: 3 x 600 s + 1 x 1,200 s = 3,000 job-s;
    # TOPOLOGY: 2 x 1,200 s + 4 x 600 s (08:30 to now, 08:40) = 4,800 job-s;
    # 7,800 job-s = 2.1667 job-hours: TOPOLOGY 61.5%, QUOTA_EXCEEDED 38.5%, in the words of
    # the legend (no bare code)
    assert fig["summary"] == (
        "Over the last hour jobs waited 2.2 job-hours: topology (scattered) 61.5%, quota full "
        "38.5%. At the latest sample (08:30 UTC), 4 jobs were waiting: 4 topology (scattered)."
    )


def test_job_hours_read_with_thousands_separators_largest_share_first():
    day = charts.TimeWindow(T0 - timedelta(hours=23), T0 + timedelta(hours=1), "last 24 hours")
    points = [
        (T0 - timedelta(hours=10), {"INSUFFICIENT_GPUS": 50, "PRIORITY": 10}),  # 10 h
        (T0, {"QUOTA_EXCEEDED": 1200, "PRIORITY": 1}),  # 1 h, to now
    ]
    fig = charts.waiting_by_reason_figure(points, window=day)
    # 500 + 100 + 1,200 + 1 = 1,801 job-hours
    assert fig["summary"] == (
        "Over the last 24 hours jobs waited 1,801 job-hours: quota full 66.6%, "
        "not enough GPUs 27.8%, priority 5.6%. At the latest sample (08:00 UTC), 1,201 jobs "
        "were waiting: 1,200 quota full, 1 priority."
    )
    assert [t["name"] for t in fig["data"]] == [
        reason_label(c) for c in ("QUOTA_EXCEEDED", "PRIORITY", "INSUFFICIENT_GPUS")
    ]
    assert "dtick" not in fig["layout"]["yaxis"]
    assert fig["layout"]["yaxis"]["separatethousands"] is True


def test_seeded_demo_history_carries_no_reasons_and_is_left_out_and_said_so():
    points = [
        (at(-20), {}, True),
        (at(-10), {}, True),
        (at(0), {"PRIORITY": 2}, False),
        (at(30), {"PRIORITY": 2}, False),
    ]
    fig = charts.waiting_by_reason_figure(points, window=HOUR)
    (trace,) = fig["data"]
    assert trace["x"] == [at(m).isoformat() for m in (0, 30, 40)]
    assert fig["summary"] == (
        "Over the last hour jobs waited 1.3 job-hours: priority 100.0%. At the latest sample "
        "(08:30 UTC), 2 jobs were waiting: 2 priority. 2 samples of seeded demo history (no "
        "pending reasons) left out."
    )
    only_seeded = charts.waiting_by_reason_figure([(at(0), {}, True)], window=HOUR)
    assert only_seeded["data"] == []
    assert only_seeded["summary"].endswith("1 sample of seeded demo history (no pending reasons) "
                                           "left out.")  # fmt: skip


def test_a_window_without_samples_or_without_waiting_jobs_says_so():
    empty = charts.waiting_by_reason_figure([], window=HOUR)
    assert empty["data"] == []
    assert empty["summary"] == (
        "No samples of waiting jobs in the last hour yet: the metrics rollup writes one a "
        "cluster minute."
    )
    assert empty["layout"]["annotations"][0]["text"] == "No samples yet"
    assert empty["layout"]["xaxis"]["visible"] is False
    quiet = charts.waiting_by_reason_figure([(at(0), {}), (at(5), {"TOPOLOGY": 0})], window=HOUR)
    assert quiet["data"] == []
    assert (
        quiet["summary"] == "No job waited in the last hour (2 samples, the latest at 08:05 UTC)."
    )
    assert quiet["layout"]["annotations"][0]["text"] == "No job waited"


def test_only_codes_the_samples_hold_are_drawn_and_none_is_invented():
    """No NEW, no zero rows, no API code a sample does not name; a code API.md does not
    list is drawn under its own name (grey), never folded into one of API.md's."""
    points = [(at(0), {"DEMOTED": 1, "LAUNCH_RETRY": 0}), (at(10), {"MYSTERY": 2})]
    fig = charts.waiting_by_reason_figure(points)
    assert [t["name"] for t in fig["data"]] == ["demoted (DEMOTED)", "mystery (MYSTERY)"]
    mystery = fig["data"][1]
    assert (mystery["fillcolor"], mystery["fillpattern"]["shape"]) == charts.OTHER_REASON_STYLE
    assert "mystery (MYSTERY)" in mystery["hovertemplate"]
    # without a window the last sample reads at its own time: DEMOTED 1 x 600 s only
    assert fig["summary"] == (
        "Over these samples jobs waited 0.2 job-hours: demoted 100.0%. At the latest sample "
        "(08:10 UTC), 2 jobs were waiting: 2 mystery."
    )
    assert "NEW" not in json.dumps(fig["data"])


def test_every_api_code_keeps_one_style_of_its_own_in_every_window():
    assert set(charts.REASON_STYLE) == API_CODES == set(charts.REASON_ORDER)
    styles = list(charts.REASON_STYLE.values()) + [charts.OTHER_REASON_STYLE]
    assert len(set(styles)) == len(styles), "no two codes look alike"
    one = charts.waiting_by_reason_figure([(at(0), {"TOPOLOGY": 1})], window=HOUR)
    many = charts.waiting_by_reason_figure(
        [(at(0), {c: 1 for c in API_CODES})], window=HOUR
    )  # fmt: skip
    topology = next(t for t in many["data"] if t["name"] == reason_label("TOPOLOGY"))
    assert one["data"][0]["fillcolor"] == topology["fillcolor"] == charts.ORANGE
    assert one["data"][0]["fillpattern"] == topology["fillpattern"]


def test_long_windows_are_downsampled_but_the_job_hours_count_every_sample():
    week = charts.TimeWindow(T0 - timedelta(days=7), T0, "last 7 days")
    points = [
        (T0 - timedelta(minutes=m), {"INSUFFICIENT_GPUS": 1 + (m % 2)})
        for m in range(7 * 24 * 60 - 1, -1, -1)
    ]  # 10,080 samples a minute apart; the last one at now
    fig = charts.waiting_by_reason_figure(points, window=week)
    assert len(fig["data"][0]["x"]) == charts.MAX_POINTS
    # 5,040 minutes with 2 jobs and 5,039 with 1 (the last, at now, lasts 0 s): 15,119 job-min
    assert fig["summary"].startswith(
        "Over the last 7 days jobs waited 252 job-hours: not enough GPUs 100.0%."
    )


def test_in_tokyo_the_axis_the_points_and_the_caption_read_jst():
    tokyo = chart_zone(ZoneInfo("Asia/Tokyo"))
    fig = charts.waiting_by_reason_figure([(at(0), {"PRIORITY": 1})], window=HOUR, zone=tokyo)
    assert fig["layout"]["xaxis"]["title"]["text"] == "cluster time (JST)"
    assert fig["data"][0]["x"] == ["2026-01-05T17:00:00+09:00", "2026-01-05T17:40:00+09:00"]
    assert "At the latest sample (17:00 JST), 1 job was waiting: 1 priority." in fig["summary"]
    assert "UTC" not in json.dumps(fig)


def test_both_reason_charts_give_a_code_the_same_name_colour_and_pattern():
    """The live bars and the chart over time sit side by side: a code reads the same in
    both (label, colour, pattern), and a share too small to print is ``<0.1%``, not 0.0%."""
    counts = {"QUOTA_EXCEEDED": 27, "INSUFFICIENT_GPUS": 18, "PREEMPTING": 1}
    bars = charts.pending_by_reason_figure(counts)["data"][0]
    t0 = datetime(2030, 1, 7, 11, 0, tzinfo=UTC)
    window = charts.TimeWindow(t0, t0 + timedelta(hours=10), "last 10 hours")
    over_time = charts.waiting_by_reason_figure(
        [
            (t0, counts),
            (t0 + timedelta(seconds=1), {"QUOTA_EXCEEDED": 27, "INSUFFICIENT_GPUS": 18}),
        ],
        window=window,
    )
    assert len(bars["y"]) == len(over_time["data"]) == 3
    for i, name in enumerate(bars["y"]):
        trace = next(t for t in over_time["data"] if t["name"] == name)
        assert bars["marker"]["color"][i] == trace["fillcolor"]
        assert bars["marker"]["pattern"]["shape"][i] == trace["fillpattern"]["shape"]
    assert "preempting for it <0.1%" in over_time["summary"], over_time["summary"]
