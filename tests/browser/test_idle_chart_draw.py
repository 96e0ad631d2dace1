"""The dashboard's "Why GPUs are idle while jobs wait" chart in Chromium (#19): drawn from
what real cycles and rollups counted on the seeded 4-node cluster, with readable numbers
(whole GPUs with thousands separators, hh:mm cluster-time ticks) and a caption that says
the same as the chart."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import draw_dashboard, in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HH_MM = re.compile(r"^\d\d:\d\d$")
WHOLE_GPUS = re.compile(r"^\d{1,3}(,\d{3})*$")


def waiting_over_quota(users: dict) -> None:
    """A job over its queue's quota that may not borrow waits for 15 cluster minutes next to
    a cordoned node: four cycles 5 minutes apart, a rollup sample after each."""
    from monitoring.rollup import rollup
    from scheduling.cycle import run_cycle
    from scheduling.models import Node
    from scheduling.nodes.services import cordon_node
    from scheduling.services import JobRequest, submit_job
    from scheduling.sim_services import advance_clock

    run_cycle()
    cordon_node(users["oncall"], Node.objects.order_by("name").first().name, "disk check")
    submit_job(users["researcher"],
               JobRequest(name="ft", queue="llm-finetune", gpus=8, preemptible=False))  # fmt: skip
    for step in range(4):
        if step:
            advance_clock(users["admin"], 300)
        run_cycle()
        rollup()


def test_the_idle_chart_draws_causes_with_readable_numbers(demo, page, login):
    in_thread(waiting_over_quota, demo)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    base = login("admin")
    draw_dashboard(page, f"{base}/dashboard/?window=1h")
    chart = page.locator("#chart-idle")
    expect(chart.locator(".main-svg").first).to_be_attached()
    assert chart.locator(".gtitle").text_content() == (
        "Why GPUs are idle while jobs wait (mean idle GPUs by cause)"
    )
    legend = chart.locator(".legendtext").all_text_contents()
    assert legend == [
        "over quota, may not borrow", "nodes out of service", "more idle than jobs ask for",
    ]  # fmt: skip
    y_ticks = chart.locator(".ytick text").all_text_contents()
    assert len(y_ticks) >= 3 and all(WHOLE_GPUS.match(t) for t in y_ticks), y_ticks
    x_ticks = chart.locator(".xtick text").all_text_contents()
    assert x_ticks and all(HH_MM.match(t) for t in x_ticks), x_ticks
    # 8 + 8 + 16 GPUs for 15 minutes: 32 on average, 8 GPU-hours, 24 on healthy nodes
    caption = page.locator("#summary-idle .summary-text").text_content()
    assert caption == (
        "While jobs waited in the last hour, 32 GPUs sat idle on average, 24 of them on "
        "healthy nodes (8 GPU-hours): more idle than jobs ask for 50%, over quota, may not borrow "
        "25%, nodes out of service 25%."
    )
    assert errors == []
