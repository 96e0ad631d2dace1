"""The dashboard's partial Plotly bundle (static/vendor/plotly-partial.min.js): it registers
every trace type the figure builders use, is the build its recipe pins, carries its
licence, and is loaded without blocking the page."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings

from monitoring import charts

ROOT = Path(settings.BASE_DIR)
VENDOR = ROOT / "static" / "vendor"
RECIPE = ROOT / "scripts" / "plotly-bundle"
BUNDLE = VENDOR / "plotly-partial.min.js"
T = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def registered_traces() -> set[str]:
    """The traces entry.js registers, plus scatter, which plotly.js's core always has."""
    entry = (RECIPE / "entry.js").read_text()
    return {"scatter", *re.findall(r"require\('plotly\.js/lib/(\w+)'\)", entry)} - {"core"}


def every_figure() -> list[dict]:
    window = charts.TimeWindow(T, T, "last hour")
    return [
        charts.utilization_figure([(T, 0.5, True), (T, 0.6)], window=window, now=(T, 0.7)),
        charts.fragmentation_figure([(T, 3, True), (T, 4)], window=window),
        charts.line_usage_figure([charts.LineRow("llm", "LLM", 10, 2, 4, 20, 8)]),
        charts.pending_by_reason_figure({"PRIORITY": 2}),
        charts.eviction_ratio_figure([charts.QueueEviction("q", "llm", 0.3, 4)], 0.15),
    ]


def test_the_bundle_registers_every_trace_type_the_dashboard_draws():
    used = {trace["type"] for fig in every_figure() for trace in fig["data"]}
    assert used == {"scatter", "bar"}
    assert used <= registered_traces()
    assert "require('plotly.js/lib/index" not in (RECIPE / "entry.js").read_text(), "partial"


def test_the_bundle_is_the_pinned_build_with_its_version_checksum_and_licence():
    head = BUNDLE.read_text(encoding="utf-8")[:400]
    pinned = json.loads((RECIPE / "package.json").read_text())["dependencies"]["plotly.js"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", pinned), "an exact version, not a range"
    assert f"partial bundle: scatter, bar) v{pinned}" in head
    assert "Licensed under the MIT license" in head
    lock = json.loads((RECIPE / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/plotly.js"]["version"] == pinned
    readme = (VENDOR / "README.md").read_text()
    digest = hashlib.sha256(BUNDLE.read_bytes()).hexdigest()
    assert f"sha256 of `plotly-partial.min.js`: `{digest}`" in readme
    assert pinned in readme and "scripts/plotly-bundle/build.sh" in readme
    licence = (VENDOR / "plotly.LICENSE.txt").read_text()
    assert "MIT" in licence and "Plotly" in licence


def test_the_bundle_is_a_fraction_of_the_full_plotly():
    size = BUNDLE.stat().st_size
    assert 500_000 < size < 1_200_000, size  # the full plotly.min.js 4.1.1: 4,815,814 bytes
    assert not (VENDOR / "plotly.min.js").exists(), "the full bundle is no longer served"


def test_the_dashboard_defers_its_scripts_and_embeds_its_data():
    template = (ROOT / "templates" / "monitoring" / "dashboard.html").read_text()
    scripts = re.findall(r"<script\b[^>]*>", template)
    assert scripts == [
        """<script defer src="{% static 'vendor/plotly-partial.min.js' %}">""",
        """<script defer src="{% static 'js/pages/dashboard.js' %}">""",
    ]
    assert 'json_script:"dashboard-data"' in template, "the figures come with the page"
