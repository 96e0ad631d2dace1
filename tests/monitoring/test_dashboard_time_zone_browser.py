"""The dashboard of an admin in Tokyo, in Chromium: one page, one zone. On a cluster with
rollup samples (real cycles and rollups on the simulator, whose clock stands still in the
web server), the page says no "UTC" anywhere a person reads it (text, captions, the charts'
axes), the latest sample's time is the cluster clock in JST (the rollup samples at cluster
now), and so it stays after the live refresh a cycle and a rollup trigger."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from core.models import Profile
from tests.browser.conftest import (  # noqa: F401
    browser_type_launch_args,
    draw_dashboard,
    in_thread,
    login,
    portal_server,
    wait_in_page,
)
from tests.browser.trust_checks import readable

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TOKYO = ZoneInfo("Asia/Tokyo")
CHARTS_TEXT = (
    "Array.from(document.querySelectorAll('svg text')).map((t) => t.textContent).join('\\n')"
)


def jst(at: datetime, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    return f"{at.astimezone(TOKYO).strftime(fmt)} JST"


def cycles_and_samples(users: dict, steps: int) -> datetime:
    """``steps`` rounds of five cluster minutes: a cycle, then a rollup sample; returns the
    cluster clock after the last (the time of the latest sample)."""
    from monitoring.models import MetricSample
    from monitoring.rollup import rollup
    from scheduling.clock import cluster_now
    from scheduling.cycle import run_cycle
    from scheduling.services import JobRequest, submit_job
    from scheduling.sim_services import advance_clock

    submit_job(users["researcher"], JobRequest(name="tz", queue="llm-finetune", gpus=8))
    for _ in range(steps):
        advance_clock(users["admin"], 300)
        run_cycle()
        rollup()
    now = cluster_now()
    assert MetricSample.objects.order_by("-at", "-id").first().at == now
    return now


def read(page, where: str) -> tuple[str, str]:
    """The visible text (checked by ``readable``) and the charts' text."""
    text = readable(page, where)
    return text, page.evaluate(CHARTS_TEXT)


def test_a_tokyo_admin_reads_the_dashboard_in_jst_on_load_and_after_the_live_refresh(
    demo,
    browser,
    login,  # noqa: F811
):
    cluster_now = in_thread(cycles_and_samples, demo, 3)
    Profile.objects.filter(user=demo["admin"]).update(time_zone="Asia/Tokyo")
    context = browser.new_context(timezone_id="Asia/Tokyo")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        base = login("admin", page)
        draw_dashboard(page, f"{base}/dashboard/?window=1h")

        text, charts = read(page, "the dashboard in Tokyo")
        assert "UTC" not in text and "UTC" not in charts, [
            line for line in (text + "\n" + charts).splitlines() if "UTC" in line
        ]
        # the latest sample was taken at the cluster clock: the same instant, in JST
        assert page.locator("#dash-asof time").inner_text() == jst(cluster_now)
        assert page.locator("#cluster-time").inner_text() == jst(cluster_now, "%Y-%m-%d %H:%M")
        caption = page.locator("#summary-utilization .summary-text").inner_text()
        assert f"now ({jst(cluster_now, '%H:%M')})" in caption, caption
        for key in ("utilization", "fragmentation"):  # (no job waited: the idle chart is empty)
            title = page.locator(f"#chart-{key} .g-xtitle").text_content()
            assert title == "cluster time (JST)", (key, title)
        # the axis reads the cluster clock in JST: its last tick is at most 10 minutes before
        # (or a minute after: the window ends when the page asked, a moment later, and at
        # 22:09:59.7 a tick of 22:10 is in it; a run at that instant failed, session 33)
        ticks = page.locator("#chart-utilization .xtick text").all_text_contents()
        last = datetime.strptime(ticks[-1], "%H:%M").time()
        local = cluster_now.astimezone(TOKYO)
        minutes = (local.hour * 60 + local.minute - last.hour * 60 - last.minute) % 1440
        minutes = minutes - 1440 if minutes >= 720 else minutes  # signed, across midnight
        assert -1 <= minutes <= 10, (ticks, local)

        # a cycle and a rollup: the page refetches its snapshot and redraws (marked stale
        # first, so what is read below is the refresh's)
        page.evaluate(
            """document.querySelectorAll('#dash-asof, .summary-text')
                 .forEach((el) => { el.textContent = 'stale'; })"""
        )
        later = in_thread(cycles_and_samples, demo, 1)
        assert later > cluster_now
        wait_in_page(
            page,
            "(() => { const t = document.querySelector('#dash-asof time');"
            f" return t !== null && t.textContent === {json.dumps(jst(later))}; }})()",
            timeout=30_000,
        )
        assert page.locator(".summary-text", has_text="stale").count() == 0
        text, charts = read(page, "the dashboard in Tokyo after the live refresh")
        assert "UTC" not in text and "UTC" not in charts, [
            line for line in (text + "\n" + charts).splitlines() if "UTC" in line
        ]
        caption = page.locator("#summary-utilization .summary-text").inner_text()
        assert f"now ({jst(later, '%H:%M')})" in caption, caption
        assert page.locator("#chart-utilization .g-xtitle").text_content() == "cluster time (JST)"
        assert errors == []
    finally:
        context.close()
