"""Pure figure builders: rows in, Plotly figure dicts (and rack-map cells) out; no database."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from monitoring import charts
from monitoring.charts import LineRow, NodeRow, QueueEviction

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_every_figure_is_plain_json_with_data_layout_and_a_text_summary():
    figures = [
        charts.utilization_figure([(at(0), 0.5)]),
        charts.fragmentation_figure([(at(0), 3)]),
        charts.line_usage_figure([LineRow("llm", "LLM", 10, 2, 4, 20, 8)]),
        charts.pending_by_reason_figure({"PRIORITY": 2}),
        charts.eviction_ratio_figure([QueueEviction("q", "llm", 0.1, 2)], 0.15),
    ]
    for fig in figures:
        assert set(fig) == {"data", "layout", "summary"}
        assert json.loads(json.dumps(fig)) == fig, "embeddable with json_script as is"
        assert fig["summary"] and fig["layout"]["title"]["text"]


def test_utilization_over_time_plots_percentages_against_the_target_line():
    fig = charts.utilization_figure([(at(0), 0.5), (at(1), 0.755), (at(2), 0.9)])
    (trace,) = fig["data"]
    assert trace["x"] == [at(0).isoformat(), at(1).isoformat(), at(2).isoformat()]
    assert trace["y"] == [50.0, 75.5, 90.0]
    assert fig["layout"]["yaxis"]["range"] == [0, 100]
    assert fig["layout"]["shapes"][0]["y0"] == 70.0
    assert fig["summary"] == "Utilization 90.0% at the latest sample; 50.0–90.0% over 3 samples."


def test_the_utilization_caption_counts_its_samples_with_separators():
    """Page walk: the 7-day window read "over the last 7 days: 2010 samples and now. 1,754
    of the samples are seeded demo history": one caption, two ways of writing a count."""
    points = [(at(i), 0.5) for i in range(2010)]
    live = charts.utilization_figure(points, now=(at(2010), 0.5))
    assert "over 2,010 samples and now." in live["summary"]
    assert "over 2,010 samples." in charts.utilization_figure(points)["summary"]


def test_empty_series_say_so_instead_of_drawing_nothing_silently():
    assert "No samples yet" in charts.utilization_figure([])["summary"]
    assert charts.utilization_figure([])["data"][0]["x"] == []
    assert "No samples yet" in charts.fragmentation_figure([])["summary"]
    assert charts.pending_by_reason_figure({})["summary"] == "No job is waiting."
    assert "No eviction figures yet" in charts.eviction_ratio_figure([], 0.15)["summary"]
    assert charts.line_usage_figure([])["summary"] == "No business lines."


def test_empty_charts_say_why_in_their_middle():
    for fig in (charts.utilization_figure([]), charts.pending_by_reason_figure({"PRIORITY": 0}),
                charts.eviction_ratio_figure([], 0.15), charts.fragmentation_figure([])):  # fmt: skip
        assert fig["layout"]["xaxis"]["visible"] is False
        assert fig["layout"]["annotations"][0]["text"].startswith("No ")
        assert fig["layout"]["shapes"] == []


def test_long_series_are_downsampled_keeping_the_first_and_last_points():
    points = [(at(i), i / 20_000) for i in range(20_160)]  # 14 days of minutes
    fig = charts.utilization_figure(points)
    xs = fig["data"][0]["x"]
    assert len(xs) == charts.MAX_POINTS
    assert xs[0] == at(0).isoformat() and xs[-1] == at(20_159).isoformat()
    assert "over 20,160 samples" in fig["summary"]
    assert charts.downsample([(1, 1), (2, 2)], 10) == [(1, 1), (2, 2)]
    assert charts.downsample(list(range(10)), 4) == [0, 3, 6, 9]


def test_fragmentation_is_a_step_line_of_stranded_gpus():
    fig = charts.fragmentation_figure([(at(0), 5), (at(1), 12), (at(2), 7)])
    assert fig["data"][0]["y"] == [5, 12, 7]
    assert fig["data"][0]["line"]["shape"] == "hv"
    assert fig["summary"].startswith("7 free GPUs are stranded") and "peak 12" in fig["summary"]


def test_line_usage_stacks_own_and_borrowed_gpus_with_quota_and_guarantee_markers():
    lines = [
        LineRow("llm", "Large language models", used=500, borrowed=60, pending_gpus=40,
                quota=450, guarantee=180),
        LineRow("search-rec", "Search", used=100, borrowed=0, pending_gpus=0, quota=250,
                guarantee=100),
    ]  # fmt: skip
    fig = charts.line_usage_figure(lines)
    traces = {t["name"]: t for t in fig["data"]}
    assert fig["layout"]["barmode"] == "stack"
    assert traces["used within quota"]["y"] == [440, 100]
    assert traces["borrowed (idle capacity)"]["y"] == [60, 0]
    assert traces["borrowed (idle capacity)"]["marker"]["pattern"]["shape"] == "/"
    assert traces["quota"]["y"] == [450, 250] and traces["guarantee"]["y"] == [180, 100]
    assert traces["used + pending"]["y"] == [540, 100]
    # told apart by shape, not only colour
    symbols = {traces[n]["marker"]["symbol"] for n in ("quota", "guarantee", "used + pending")}
    assert len(symbols) == 3
    assert traces["used within quota"]["x"] == ["Large language models", "Search"]
    assert "Large language models: 500 used (60 borrowed) of quota 450" in fig["summary"]


def test_pending_by_reason_follows_the_api_order_and_drops_zeros():
    fig = charts.pending_by_reason_figure(
        {"INSUFFICIENT_GPUS": 3, "QUOTA_EXCEEDED": 10, "PRIORITY": 0, "NEW": 2, "TOPOLOGY": 1}
    )
    (trace,) = fig["data"]
    assert trace["orientation"] == "h"
    assert trace["y"] == [
        "quota full (QUOTA_EXCEEDED)",
        "topology (scattered) (TOPOLOGY)",
        "not enough GPUs (INSUFFICIENT_GPUS)",
        "not yet seen by a cycle (NEW)",
    ]
    assert trace["x"] == [10, 1, 3, 2] and trace["text"] == ["10", "1", "3", "2"]
    # the caption words each reason as the bars' labels do, without their codes
    assert fig["summary"] == (
        "16 jobs pending: 10 quota full, 1 topology (scattered), 3 not enough GPUs, "
        "2 not yet seen by a cycle"
    )


def test_launch_retries_come_after_the_engine_codes_and_before_new():
    fig = charts.pending_by_reason_figure({"NEW": 1, "LAUNCH_RETRY": 2, "DEMOTED": 3})
    assert fig["data"][0]["y"] == [
        "demoted (DEMOTED)",
        "launch failed, retrying (LAUNCH_RETRY)",
        "not yet seen by a cycle (NEW)",
    ]


def test_eviction_ratio_marks_queues_over_the_alert_line_by_text_and_pattern_too():
    queues = [
        QueueEviction("llm-experiment", "llm", 0.32, 7),
        QueueEviction("llm-core", "llm", 0.02, 1),
        QueueEviction("mm-experiment", "multimodal", 0.0, 0),
    ]
    fig = charts.eviction_ratio_figure(queues, threshold=0.15)
    (trace,) = fig["data"]
    assert trace["x"] == ["llm-core", "llm-experiment", "mm-experiment"]  # by line, then name
    assert trace["y"] == [2.0, 32.0, 0.0]
    assert trace["text"] == ["2.0%", "32.0% ▲", "0.0%"]
    assert trace["marker"]["pattern"]["shape"] == ["", "x", ""]
    assert trace["marker"]["color"][0] != trace["marker"]["color"][1]
    assert trace["customdata"] == [1, 7, 0]
    assert fig["layout"]["shapes"][0]["y0"] == 15.0
    assert fig["layout"]["annotations"][0]["text"] == "alert above 15%"
    assert fig["layout"]["yaxis"]["range"][1] >= 32.0
    assert (
        fig["summary"]
        == "1 queue above the 15% alert line, last 24 h: llm-experiment 32.0% (7 evictions)"
    )
    calm = charts.eviction_ratio_figure(queues[1:], threshold=0.15)
    assert calm["summary"] == (
        "Every queue is under the 15% alert line, last 24 h (highest: llm-core 2.0%)."
    )


def test_the_eviction_caption_names_the_window_it_was_given():
    """#15: the eviction ratio's window is said on every surface, the dashboard caption too
    (not only in the chart's title): '0.3%' alone does not say over how long."""
    queues = [QueueEviction("llm-experiment", "llm", 0.32, 7), QueueEviction("c", "llm", 0.0, 0)]
    for shown in (queues, queues[1:]):
        fig = charts.eviction_ratio_figure(shown, threshold=0.15, window="last 72 h")
        assert "last 72 h" in fig["layout"]["title"]["text"]
        assert "alert line, last 72 h" in fig["summary"], fig["summary"]


@pytest.mark.parametrize(
    ("state", "health", "used", "residual", "status", "glyph", "label"),
    [
        ("ready", "ok", 0, 0, "idle", "0", "r003-n07: ready, idle, 0/8 GPUs used"),
        ("ready", "ok", 3, 0, "partial", "3", "r003-n07: ready, partly used, 3/8 GPUs used"),
        ("ready", "ok", 8, 0, "full", "8", "r003-n07: ready, full, 8/8 GPUs used"),
        ("ready", "ok", 2, 1, "residual", "R",
         "r003-n07: ready, GPUs held by residual processes, 2/8 GPUs used, 1 held by residual processes"),
        ("cordoned", "ok", 3, 0, "cordoned", "C", "r003-n07: cordoned, 3/8 GPUs used"),
        ("draining", "ok", 8, 0, "draining", "D", "r003-n07: draining, 8/8 GPUs used"),
        ("unhealthy", "gpu_failure", 0, 0, "unhealthy", "U",
         "r003-n07: unhealthy (GPU failure), 0/8 GPUs used"),
        ("ready", "rdma_degraded", 4, 0, "unhealthy", "U",
         "r003-n07: unhealthy (RDMA degraded), 4/8 GPUs used"),
        ("down", "down", 0, 0, "down", "X", "r003-n07: down, 0/8 GPUs used"),
        ("cordoned", "down", 0, 0, "down", "X", "r003-n07: down, 0/8 GPUs used"),
    ],
)  # fmt: skip
def test_each_node_cell_has_a_status_a_glyph_and_a_sentence(
    state, health, used, residual, status, glyph, label
):
    cell = charts.node_cell(NodeRow("r003-n07", "r003", state, health, 8, residual, used))
    assert (cell.status, cell.glyph, cell.label) == (status, glyph, label)


@pytest.mark.parametrize(
    ("used", "inference", "status", "glyph", "label"),
    [
        (1, 7, "full", "8", "r011-n29: ready, full, 1/8 GPUs used, 7 serving inference"),
        (0, 3, "partial", "3", "r011-n29: ready, partly used, 0/8 GPUs used, 3 serving inference"),
        (2, 3, "partial", "5", "r011-n29: ready, partly used, 2/8 GPUs used, 3 serving inference"),
        (0, 0, "idle", "0", "r011-n29: ready, idle, 0/8 GPUs used"),
    ],
)  # fmt: skip
def test_a_shared_nodes_cell_counts_the_gpus_serving_inference(
    used, inference, status, glyph, label
):
    """Found on the busy demo: a shared node with 7 GPUs serving inference and 1 running a
    job read "ready, partly used, 1/8 GPUs used" on the rack map and node page, while its
    GPUs line said 0 free."""
    cell = charts.node_cell(NodeRow("r011-n29", "r011", "ready", "ok", 8, 0, used, inference))
    assert (cell.status, cell.glyph, cell.label) == (status, glyph, label)


def test_colour_is_never_the_only_signal_every_status_has_its_own_glyph():
    glyphs = {}
    for key, glyph, words in charts.LEGEND:
        assert words
        glyphs[key] = glyph
    assert set(glyphs) == set(charts.STATUS_WORDS), "the legend explains every status"
    letters = [glyphs[k] for k in ("residual", "cordoned", "draining", "unhealthy", "down")]
    assert len(set(letters)) == len(letters) and all(g.isalpha() for g in letters)
    # ready nodes show their GPUs in use as a digit instead of a letter
    assert all(glyphs[k][0].isdigit() for k in ("idle", "partial", "full"))


def test_the_rack_map_groups_cells_by_rack_and_counts_statuses():
    rows = [
        NodeRow("r001-n00", "r001", "ready", "ok", 8, 0, 8),
        NodeRow("r000-n01", "r000", "cordoned", "ok", 8, 0, 0),
        NodeRow("r000-n00", "r000", "ready", "ok", 8, 0, 2),
        NodeRow("r001-n01", "r001", "unhealthy", "gpu_failure", 8, 0, 0),
    ]
    racks, counts = charts.build_rack_map(rows)
    assert [r.name for r in racks] == ["r000", "r001"]
    assert [c.name for c in racks[0].cells] == ["r000-n01", "r000-n00"], "row order kept"
    assert racks[0].summary == "2 nodes, 1 out of the pool"
    assert racks[1].summary == "2 nodes, 1 out of the pool"
    assert counts["full"] == 1 and counts["partial"] == 1 and counts["cordoned"] == 1
    assert counts["unhealthy"] == 1 and counts["idle"] == 0 and sum(counts.values()) == 4
    assert charts.build_rack_map([]) == ([], {k: 0 for k, _, _ in charts.LEGEND})


def test_the_rack_map_at_full_scale_is_cheap():

    rows = [
        NodeRow(f"r{i // 32:03d}-n{i % 32:02d}", f"r{i // 32:03d}", "ready", "ok", 8, 0, i % 9)
        for i in range(1250)
    ]
    racks, counts = charts.build_rack_map(rows)
    assert len(racks) == 40 and sum(len(r.cells) for r in racks) == 1250


def test_cells_are_written_as_escaped_links_with_glyph_title_and_label():
    cells = [charts.node_cell(NodeRow("r000-n00", "r000", "cordoned", "ok", 8, 0, 3)),
             charts.node_cell(NodeRow('x"><script>', "r000", "ready", "ok", 8, 0, 0))]  # fmt: skip
    html = charts.cells_html(cells, "/oncall/nodes/")
    assert html.startswith(
        '<a class="n k-cordoned" href="/oncall/nodes/r000-n00/" data-n="r000-n00" '
        'title="r000-n00: cordoned, 3/8 GPUs used" aria-label="r000-n00: cordoned, 3/8 GPUs used">'
        "C</a>"
    )
    assert "<script>" not in html and "&lt;script&gt;" in html and "x&quot;&gt;" in html
