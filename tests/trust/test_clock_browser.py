"""One clock (#15) in Chromium: the header says the cluster is simulated and how fast, and
its cluster time runs at the simulator's speed, not the wall clock's; the page's scripts
measure relative times from it."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from scheduling.clock import cluster_now, cluster_now_ts
from scheduling.cycle import run_cycle
from scheduling.models import SimulatorState
from tests.browser.conftest import (  # noqa: F401 - the browser fixtures
    browser_type_launch_args,
    in_thread,
    login,
    portal_server,
    screenshot,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def shown_time(page) -> datetime:
    text = page.locator("#cluster-time").inner_text()
    return datetime.strptime(text, "%Y-%m-%d %H:%M UTC").replace(tzinfo=UTC)


def test_the_header_says_simulated_at_60x_and_its_clock_runs_at_that_speed(
    demo,
    page,
    login,  # noqa: F811 - the imported fixture
):
    in_thread(run_cycle)  # the simulator's state exists
    SimulatorState.objects.update(speed=60.0, virtual_now=cluster_now_ts() + 86400,
                                  saved_wall=time.time())  # fmt: skip
    base = login("researcher")
    page.goto(base + "/jobs/")
    expect(page.locator("#sim-badge")).to_have_text("simulated cluster · 60×")
    expect(page.locator("#sim-badge")).to_have_count(1)
    first = shown_time(page)
    assert abs(first - cluster_now()) < timedelta(minutes=2), "cluster time, a day ahead"
    time.sleep(3)  # three wall seconds: three cluster minutes
    page.wait_for_timeout(1100)  # the header ticks every second
    assert shown_time(page) - first >= timedelta(minutes=3)

    script_now = page.evaluate("Dom.clusterNow()") / 1000
    assert abs(script_now - cluster_now_ts()) < 60, "the scripts' clock is the cluster's"
    five_ago = (cluster_now() - timedelta(minutes=5, seconds=30)).isoformat()
    assert page.evaluate("(iso) => Dom.ago(iso)", five_ago) == "5 min ago"
    screenshot(page, "cluster-clock")
