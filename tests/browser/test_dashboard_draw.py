"""The dashboard in Chromium (#15 items 4 and 11): every window (1 h, 24 h, 7 d) draws all five
charts from the embedded data with the partial Plotly bundle, nothing blocks the first
paint, the time axis reads hh:mm (or dates over a week), seeded demo history is drawn
apart, the card and the caption say the same, and the page marks when its last chart is
drawn (what `manage.py bench_browser` times)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from core import clock
from demo.history import seed_history
from monitoring.models import MetricSample
from tests.browser.conftest import draw_dashboard, in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHARTS = ("utilization", "lines", "pending", "eviction", "fragmentation")
HH_MM = re.compile(r"^\d\d:\d\d$")
DATE = re.compile(r"^[A-Z][a-z]{2} \d\d$")


def history() -> None:
    """A week of seeded history ending 20 cluster minutes ago, then measured samples."""
    now = clock.now()
    seed_history(now - timedelta(minutes=20), 32)
    MetricSample.objects.bulk_create(
        MetricSample(at=now - timedelta(minutes=m), gpus_total=32, gpus_healthy=32,
                     gpus_allocated=24, utilization=0.75, fragmentation_gpus=2, pending_jobs=0)
        for m in (15, 10, 5)
    )  # fmt: skip


def x_ticks(page, key: str) -> list[str]:
    return page.locator(f"#chart-{key} .xtick text").all_text_contents()


@pytest.mark.parametrize(("window", "tick"), [("1h", HH_MM), ("24h", HH_MM), ("7d", DATE)])
def test_every_window_draws_every_chart_with_readable_ticks(demo, page, login, window, tick):
    in_thread(history)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    base = login("admin")
    drawn = draw_dashboard(page, f"{base}/dashboard/?window={window}")
    assert drawn > 0
    assert page.evaluate("performance.getEntriesByName('charts-drawn').length") == 1
    for key in CHARTS:
        expect(page.locator(f"#chart-{key} .main-svg").first).to_be_attached()
    for key in ("utilization", "fragmentation"):
        ticks = x_ticks(page, key)
        assert len(ticks) >= 3 and all(tick.match(t) for t in ticks), (window, key, ticks)
        legend = page.locator(f"#chart-{key} .legendtext").all_text_contents()
        assert "seeded demo history" in legend
    card = page.locator("#tile-utilization").text_content()
    caption = page.locator("#summary-utilization .summary-text").text_content()
    assert caption.startswith(f"Utilization {card} now (")
    assert errors == []


def test_the_partial_bundle_loads_without_blocking_and_draws_scatter_and_bar(demo, page, login):
    base = login("admin")
    draw_dashboard(page, f"{base}/dashboard/")
    assert page.evaluate("Object.keys(Plotly.PlotSchema.get().traces).sort()") == [
        "bar", "scatter",
    ]  # fmt: skip
    scripts = page.evaluate(
        """performance.getEntriesByType('resource')
           .filter(r => r.initiatorType === 'script')
           .map(r => [r.name.split('/').pop(), r.renderBlockingStatus])"""
    )
    names = {name for name, _ in scripts}
    assert {"plotly-partial.min.js", "dashboard.js"} <= names and "plotly.min.js" not in names
    assert [s for s in scripts if s[1] == "blocking"] == []
    # the figures came with the page: no request for them before the charts were drawn
    fetched = page.evaluate(
        "performance.getEntriesByType('resource').filter(r => r.name.includes('/dashboard/data/'))"
        ".length"
    )
    assert fetched == 0


def test_the_charts_fit_a_phone(demo, page, login):
    in_thread(history)
    base = login("admin")
    page.set_viewport_size({"width": 390, "height": 844})
    draw_dashboard(page, f"{base}/dashboard/?window=1h")
    for key in CHARTS:
        box = page.locator(f"#chart-{key} .main-svg").first.bounding_box()
        assert box is not None and box["width"] <= 390, key
    assert all(HH_MM.match(t) for t in x_ticks(page, "utilization"))
