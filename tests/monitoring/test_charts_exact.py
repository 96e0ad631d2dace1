"""The figure builders (monitoring.charts) at their edges: one sample, zero capacity, ties
at the alert line, unknown reason codes, and downsampling as a property."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitoring import charts
from monitoring.charts import LineRow, NodeRow, QueueEviction

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


# -- downsampling -----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 3000), st.integers(2, 800))
def test_downsampling_keeps_the_ends_and_order_and_at_most_the_asked_points(n, most):
    points = list(range(n))
    out = charts.downsample(points, most)
    assert len(out) == min(n, most)
    assert out == sorted(set(out)), "a subsequence: in order, nothing twice"
    if n:
        assert out[0] == 0 and out[-1] == n - 1


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 3000), st.integers(2, 800))
def test_downsampled_points_are_evenly_spaced_within_one_step(n, most):
    out = charts.downsample(list(range(n)), most)
    if n <= most:
        return
    gaps = [b - a for a, b in zip(out, out[1:], strict=False)]
    step = (n - 1) / (most - 1)
    assert all(abs(g - step) <= 1 for g in gaps)


@pytest.mark.parametrize("most", [0, 1, -5])
def test_a_limit_below_two_points_keeps_everything(most):
    assert charts.downsample([(1, 1), (2, 2), (3, 3)], most) == [(1, 1), (2, 2), (3, 3)]


# -- time series ------------------------------------------------------------------------------


def test_one_utilization_sample_is_its_own_minimum_maximum_and_latest():
    fig = charts.utilization_figure([(at(0), 0.12345)])
    assert fig["data"][0]["y"] == [12.35]
    assert fig["summary"] == "Utilization 12.3% at the latest sample; 12.3–12.3% over 1 samples."
    assert (
        "annotations" in fig["layout"] and fig["layout"]["annotations"][0]["text"] == "target 70%"
    )
    assert fig["layout"]["xaxis"].get("visible") is not False


def test_utilization_times_that_are_not_datetimes_are_written_as_text():
    fig = charts.utilization_figure([("2026-01-05T08:00:00Z", 0.5), (1736064000, 1.0)])
    assert fig["data"][0]["x"] == ["2026-01-05T08:00:00Z", "1736064000"]
    assert fig["data"][0]["y"] == [50.0, 100.0]


def test_an_empty_utilization_chart_keeps_its_axes_settings_but_hides_them():
    layout = charts.utilization_figure([])["layout"]
    assert layout["yaxis"] == {
        "range": [0, 100], "ticksuffix": "%", "title": {"text": "utilization"}, "visible": False,
    }  # fmt: skip
    assert layout["annotations"] == [
        {"xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
         "text": "No samples yet", "font": {"size": 14, "color": charts.GREY}}
    ]  # fmt: skip
    assert layout["shapes"] == [], "no target line across an empty chart"


def test_fragmentation_counts_whole_gpus_and_names_the_peak():
    fig = charts.fragmentation_figure([(at(0), 3.9), (at(1), 0), (at(2), 2)])
    assert fig["data"][0]["y"] == [3, 0, 2]
    assert fig["summary"] == (
        "2 free GPUs are stranded on partly used nodes at the latest sample (peak 3 in the window)."
    )
    one = charts.fragmentation_figure([(at(0), 0)])
    assert one["summary"].startswith("0 free GPUs are stranded") and "(peak 0" in one["summary"]
    assert charts.fragmentation_figure([])["summary"] == "No samples yet."


def test_every_figure_redraws_live_without_losing_the_users_zoom():
    for fig in (charts.utilization_figure([]), charts.fragmentation_figure([]),
                charts.line_usage_figure([]), charts.pending_by_reason_figure({}),
                charts.eviction_ratio_figure([], 0.1)):  # fmt: skip
        layout = fig["layout"]
        assert layout["uirevision"] == layout["title"]["text"]
        assert layout["height"] == 300 and layout["paper_bgcolor"] == "#ffffff"


# -- lines ------------------------------------------------------------------------------------


def test_borrowing_above_use_never_draws_a_negative_bar():
    fig = charts.line_usage_figure([LineRow("x", "X", used=2, borrowed=5, pending_gpus=0,
                                            quota=4, guarantee=0)])  # fmt: skip
    own, borrowed, quota, guarantee, demand = fig["data"]
    assert own["y"] == [0] and borrowed["y"] == [5]
    assert demand["y"] == [2]


def test_line_usage_has_five_named_series_and_leaves_zero_borrowing_unlabelled():
    fig = charts.line_usage_figure([
        LineRow("llm", "LLM", used=10, borrowed=0, pending_gpus=6, quota=12, guarantee=4),
        LineRow("cv", "Vision", used=0, borrowed=0, pending_gpus=0, quota=0, guarantee=0),
    ])  # fmt: skip
    assert [t["name"] for t in fig["data"]] == [
        "used within quota", "borrowed (idle capacity)", "quota", "guarantee", "used + pending",
    ]  # fmt: skip
    by = {t["name"]: t for t in fig["data"]}
    assert by["used within quota"]["text"] == ["10", "0"]
    assert by["borrowed (idle capacity)"]["text"] == ["", ""]
    assert by["used + pending"]["y"] == [16, 0]
    assert {t["marker"]["symbol"] for t in fig["data"] if t["type"] == "scatter"} == {
        "line-ew-open", "diamond", "triangle-up-open",
    }, "markers differ in shape, not only colour"  # fmt: skip
    assert fig["layout"]["barmode"] == "stack"
    assert fig["summary"] == (
        "LLM: 10 used (0 borrowed) of quota 12, guarantee 4, 6 pending; "
        "Vision: 0 used (0 borrowed) of quota 0, guarantee 0, 0 pending"
    )


# -- pending reasons --------------------------------------------------------------------------


def test_unknown_reason_codes_come_last_in_name_order_with_a_lower_case_label():
    fig = charts.pending_by_reason_figure({"ZED": 1, "PRIORITY": 2, "ALPHA_CODE": 4, "NEW": 0})
    (trace,) = fig["data"]
    assert trace["y"] == ["priority (PRIORITY)", "alpha_code (ALPHA_CODE)", "zed (ZED)"]
    assert trace["x"] == [2, 4, 1]
    assert fig["summary"] == "7 jobs pending: 2 priority, 4 alpha_code, 1 zed"


def test_one_pending_job_is_one_job_in_the_caption():
    """With one job waiting the dashboard's caption read "1 jobs pending"."""
    fig = charts.pending_by_reason_figure({"QUOTA_EXCEEDED": 1})
    assert fig["summary"] == "1 job pending: 1 quota full"


def test_counts_from_a_thousand_read_with_separators_in_every_caption_and_label():
    """The demo's dashboard read "2943 jobs pending" in one caption and "2,943 jobs were
    waiting" in the next, and "9369 / 9792" in a tile: one way to write a count."""
    fig = charts.pending_by_reason_figure(
        {"INSUFFICIENT_GPUS": 2403, "TOPOLOGY": 514, "DEMOTED": 26}
    )
    assert fig["summary"] == (
        "2,943 jobs pending: 514 topology (scattered), 2,403 not enough GPUs, 26 demoted"
    )
    assert fig["data"][0]["text"] == ["514", "2,403", "26"]  # API.md's order
    fig = charts.line_usage_figure([
        LineRow("search", "Search", used=4186, borrowed=1200, pending_gpus=21575, quota=4500,
                guarantee=1800),
    ])  # fmt: skip
    assert fig["summary"] == (
        "Search: 4,186 used (1,200 borrowed) of quota 4,500, guarantee 1,800, 21,575 pending"
    )
    assert [t["text"] for t in fig["data"][:2]] == [["2,986"], ["1,200"]]
    assert all(":," in t["hovertemplate"] for t in fig["data"])
    assert charts.num(10000) == "10,000" and charts.num(7) == "7"


def test_every_reason_code_has_a_label_and_new_is_not_an_engine_code():
    assert set(charts.REASON_ORDER) | {"NEW"} == set(charts.REASON_LABELS)
    assert "NEW" not in charts.REASON_ORDER
    assert charts.REASON_ORDER[-1] == "LAUNCH_RETRY"


def test_counts_given_as_booleans_or_floats_are_drawn_as_whole_numbers():
    fig = charts.pending_by_reason_figure({"PRIORITY": True, "DEMOTED": 3.0})
    assert (
        fig["data"][0]["x"] == [1, 3] and fig["summary"] == "4 jobs pending: 1 priority, 3 demoted"
    )


# -- eviction ratio ---------------------------------------------------------------------------


def test_a_queue_exactly_at_the_alert_line_is_not_over_it():
    fig = charts.eviction_ratio_figure([QueueEviction("q", "l", 0.15, 3)], threshold=0.15)
    trace = fig["data"][0]
    assert trace["text"] == ["15.0%"] and trace["marker"]["pattern"]["shape"] == [""]
    assert trace["marker"]["color"] == [charts.BLUE]
    assert fig["summary"] == (
        "Every queue is under the 15% alert line, last 24 h (highest: q 15.0%)."
    )


@pytest.mark.parametrize(
    "ratios,threshold,top",
    [
        ([], 0.15, 22.5),  # the alert line and half again above it
        ([0.05], 0.2, 30.0),
        ([0.5], 0.2, 60.0),  # the highest bar and a fifth above it
        ([0.1, 0.9], 0.1, 108.0),
    ],
)
def test_the_y_axis_always_shows_the_alert_line_and_the_highest_bar(ratios, threshold, top):
    queues = [QueueEviction(f"q{i}", "l", r, 1) for i, r in enumerate(ratios)]
    fig = charts.eviction_ratio_figure(queues, threshold)
    assert fig["layout"]["yaxis"]["range"] == [0, pytest.approx(top)]


def test_several_queues_over_the_line_are_all_named_in_display_order():
    rows = [("b-exp", "b", 0.4, 9), ("a-exp", "a", 0.25, 4), ("a-core", "a", 0.01, 1)]
    fig = charts.eviction_ratio_figure([QueueEviction(*r) for r in rows], threshold=0.2)
    assert fig["data"][0]["x"] == ["a-core", "a-exp", "b-exp"]
    assert fig["summary"] == (
        "2 queues above the 20% alert line, last 24 h: a-exp 25.0% (4 evictions), b-exp 40.0% (9 evictions)"
    )


def test_an_eviction_chart_without_queues_says_when_figures_come():
    fig = charts.eviction_ratio_figure([], 0.15)
    assert fig["summary"] == (
        "No eviction figures yet: the metrics rollup computes them once a minute."
    )
    assert fig["data"][0]["x"] == [] and fig["layout"]["annotations"][0]["text"] == (
        "No eviction figures yet"
    )


# -- rack map ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "state,health,used,total,residual,status",
    [
        ("ready", "ok", 0, 8, 0, "idle"),
        ("ready", "ok", 9, 8, 0, "full"),  # more in use than it has: still full, not partial
        ("ready", "ok", -1, 8, 0, "idle"),
        ("ready", "ok", 0, 0, 0, "idle"),  # a node without GPUs
        ("ready", "ok", 8, 8, 2, "residual"),
        ("cordoned", "ok", 0, 8, 3, "cordoned"),  # out of the pool beats residual processes
        ("draining", "rdma_degraded", 0, 8, 0, "unhealthy"),  # broken beats drained
        ("unhealthy", "ok", 0, 8, 0, "unhealthy"),
        ("down", "ok", 0, 8, 0, "down"),
        ("ready", "down", 4, 8, 1, "down"),  # down beats everything
        ("ready", "gpu_failure", 4, 8, 1, "unhealthy"),
    ],
)
def test_what_stops_scheduling_wins_over_how_full_a_node_is(
    state, health, used, total, residual, status
):
    assert charts.node_status(state, health, used, total, residual) == status


def test_a_node_without_gpus_reads_as_idle_with_zero_of_zero():
    cell = charts.node_cell(NodeRow("n", "r", "ready", "ok", 0, 0, 0))
    assert (cell.status, cell.glyph, cell.label) == ("idle", "0", "n: ready, idle, 0/0 GPUs used")


def test_a_down_node_does_not_spell_out_its_health_but_a_degraded_one_does():
    down = charts.node_cell(NodeRow("n", "r", "ready", "down", 8, 0, 0))
    assert down.label == "n: down, 0/8 GPUs used"
    ok_but_unhealthy = charts.node_cell(NodeRow("n", "r", "unhealthy", "ok", 8, 0, 0))
    assert ok_but_unhealthy.label == "n: unhealthy, 0/8 GPUs used"


def test_racks_are_sorted_by_name_and_a_rack_with_all_nodes_in_the_pool_says_only_its_size():
    rows = [NodeRow(f"r1-n{i}", "r1", "ready", "ok", 8, 0, i) for i in range(3)]
    rows += [NodeRow("r0-n0", "r0", "down", "down", 8, 0, 0),
             NodeRow("r0-n1", "r0", "draining", "ok", 8, 0, 8)]  # fmt: skip
    racks, counts = charts.build_rack_map(rows)
    assert [(r.name, r.summary) for r in racks] == [
        ("r0", "2 nodes, 2 out of the pool"),
        ("r1", "3 nodes"),
    ]
    assert counts == {
        "idle": 1, "partial": 2, "full": 0, "residual": 0, "cordoned": 0, "draining": 1,
        "unhealthy": 0, "down": 1,
    }  # fmt: skip
    assert list(counts) == [key for key, _, _ in charts.LEGEND], "counts follow the legend order"
