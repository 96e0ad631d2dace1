"""The dashboard's "Waiting jobs by reason over time" chart in Chromium: drawn from what real
cycles and rollups recorded on the seeded 4-node cluster, its legend the codes the samples
hold, its caption's job-hours the samples' own (each sample's jobs times the time to the
next, the last one to now) and its latest reading the live "jobs pending" tile's."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from playwright.sync_api import expect

from monitoring.charts import reason_label, reason_words
from tests.browser.conftest import draw_dashboard, in_thread, wait_in_page

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HH_MM = re.compile(r"^\d\d:\d\d$")
WHOLE = re.compile(r"^\d{1,3}(,\d{3})*$")
CAPTION = re.compile(
    r"^Over the last hour jobs waited (?P<hours>[\d,.]+) job-hours: (?P<shares>[^.]+\.\d%"
    r"(?:, [^.]+\.\d%)*)\. At the latest sample \((?P<at>\d\d:\d\d) UTC\), (?P<now>\d+) jobs? "
    r"(?:was|were) waiting: (?P<codes>.+)\.$"
)


def jobs_wait(users: dict) -> tuple[list[tuple[datetime, dict]], datetime]:
    """Jobs wait for 20 cluster minutes on the 4 x 8-GPU cluster, two nodes cordoned: two
    8-GPU jobs run (one per line, within quota) on the other two, two non-preemptible 8-GPU
    jobs wait over llm-finetune's quota (QUOTA_EXCEEDED), a 4-GPU llm-core job within quota
    waits for free GPUs (INSUFFICIENT_GPUS); a third over-quota job joins at 10 minutes.
    Five cycles 5 minutes apart, a rollup after each (the chart counts whatever codes the
    cycles gave). Returns the rollup samples (time, pending_by_reason) and now."""
    from monitoring.rollup import rollup
    from scheduling.cycle import run_cycle
    from scheduling.models import Node
    from scheduling.nodes.services import cordon_node
    from scheduling.services import JobRequest, submit_job
    from scheduling.sim_services import advance_clock

    run_cycle()
    for node in Node.objects.order_by("name")[:2]:
        cordon_node(users["oncall"], node.name, "disk check")
    submit_job(users["researcher"], JobRequest(name="core", queue="llm-core", gpus=8))
    submit_job(users["researcher2"], JobRequest(name="rec", queue="search-rec-core", gpus=8))
    run_cycle()
    for i in range(2):
        submit_job(users["researcher"], JobRequest(name=f"ft{i}", queue="llm-finetune", gpus=8,
                                                   preemptible=False))  # fmt: skip
    submit_job(users["researcher"], JobRequest(name="small", queue="llm-core", gpus=4))
    for step in range(5):
        if step:
            advance_clock(users["admin"], 300)
        if step == 2:
            submit_job(users["researcher"], JobRequest(name="ft-late", queue="llm-finetune",
                                                       gpus=8, preemptible=False))  # fmt: skip
        run_cycle()
        rollup()
    return recorded()


def recorded() -> tuple[list[tuple[datetime, dict]], datetime]:
    """The rollup samples (time, pending_by_reason), oldest first, and now."""
    from core import clock
    from monitoring.models import MetricSample

    samples = list(MetricSample.objects.order_by("at", "id").values_list("at", "pending_by_reason"))
    return samples, clock.now()


def five_minutes_later(users: dict) -> tuple[list[tuple[datetime, dict]], datetime]:
    """Five cluster minutes on, a cycle (the page's live refetch) and a rollup sample."""
    from monitoring.rollup import rollup
    from scheduling.cycle import run_cycle
    from scheduling.sim_services import advance_clock

    advance_clock(users["admin"], 300)
    rollup()
    run_cycle()
    return recorded()


def job_hours(samples: list[tuple[datetime, dict]], now: datetime) -> dict[str, float]:
    """Job-hours per code, counted here from the samples (not by the chart's code)."""
    hours: dict[str, float] = {}
    ends = [at for at, _ in samples[1:]] + [now]
    for (at, reasons), end in zip(samples, ends, strict=True):
        for code, n in reasons.items():
            hours[code] = hours.get(code, 0.0) + n * (end - at).total_seconds() / 3600
    return hours


def test_the_waiting_chart_draws_the_samples_codes_and_its_caption_adds_them_up(demo, page, login):
    samples, now = in_thread(jobs_wait, demo)
    expected = job_hours(samples, now)
    total = sum(expected.values())
    latest = samples[-1][1]
    assert total > 0 and sum(latest.values()) >= 3, samples  # the scenario made jobs wait
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    base = login("admin")
    draw_dashboard(page, f"{base}/dashboard/?window=1h")
    chart = page.locator("#chart-waiting")
    expect(chart.locator(".main-svg").first).to_be_attached()
    assert chart.locator(".gtitle").text_content() == (
        "Waiting jobs by reason over time (jobs per pending-reason code)"
    )
    heading = page.locator("#summary-waiting strong").text_content()
    assert heading == "Waiting jobs by reason over time."
    # the legend: exactly the codes the samples hold, in API.md's order
    codes = [c for c in ("NEVER_FITS", "QUOTA_EXCEEDED", "NODES_UNAVAILABLE", "PRIORITY",
                         "PREEMPTING", "TOPOLOGY", "INSUFFICIENT_GPUS", "DEMOTED",
                         "LAUNCH_RETRY") if any(r.get(c) for _, r in samples)]  # fmt: skip
    assert chart.locator(".legendtext").all_text_contents() == [reason_label(c) for c in codes]
    y_ticks = chart.locator(".ytick text").all_text_contents()
    assert len(y_ticks) >= 3 and all(WHOLE.match(t) for t in y_ticks), y_ticks
    x_ticks = chart.locator(".xtick text").all_text_contents()
    assert x_ticks and all(HH_MM.match(t) for t in x_ticks), x_ticks

    caption = page.locator("#summary-waiting .summary-text").text_content()
    read = CAPTION.match(caption)
    assert read, caption
    assert read["hours"] == f"{total:,.1f}", (caption, expected)
    shares = dict(part.rsplit(" ", 1) for part in read["shares"].split(", "))
    # each code in the legend's words, without the code itself
    code_of = {reason_words(c): c for c in expected}
    assert shares == {reason_words(c): f"{h / total:.1%}" for c, h in expected.items() if h > 0}
    assert list(shares) == sorted(shares, key=lambda w: -expected[code_of[w]]), "largest first"
    assert read["at"] == f"{samples[-1][0]:%H:%M}"
    # the latest sample follows the latest cycle: the same count as the live tile and bars
    assert int(read["now"]) == sum(latest.values())
    assert read["now"] == page.locator("#tile-pending_jobs").text_content()
    assert read["codes"] == ", ".join(
        f"{latest[c]:,} {reason_words(c)}" for c in codes if latest.get(c)
    )

    # live: a new sample and a cycle; the page refetches /dashboard/data/ and the caption
    # (marked stale first) adds the new sample's five minutes
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    page.wait_for_timeout(500)  # the subscriptions are sent on open
    page.evaluate("document.querySelector('#summary-waiting .summary-text').textContent = 'stale'")
    samples, now = in_thread(five_minutes_later, demo)
    wait_in_page(
        page,
        "document.querySelector('#summary-waiting .summary-text').textContent !== 'stale'",
        timeout=30_000,
    )
    read = CAPTION.match(page.locator("#summary-waiting .summary-text").text_content())
    assert read and read["at"] == f"{samples[-1][0]:%H:%M}"
    assert read["hours"] == f"{sum(job_hours(samples, now).values()):,.1f}"
    assert errors == []
