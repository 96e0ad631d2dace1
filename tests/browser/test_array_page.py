"""A job array in Chromium: a researcher submits ``0-5%2`` through the submit form on the
small test cluster (4 x 8 GPUs, roomy quotas), the loop runs a cycle, and the array page's
every figure adds up (two tasks running, four held back by the bound, their GPUs); a
held-back task's page says why (``ARRAY_LIMIT``) and when it may start; the bound raised on
the array page starts two more at the next cycle, which the open page shows without a
reload (its live parts).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from quotas.models import BusinessLine, Queue
from scheduling.cycle import run_cycle as run_one_cycle
from scheduling.models import Job, JobArray
from tests.browser.conftest import in_thread, screenshot
from tests.browser.test_accessibility import audit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

GPUS = 4  # each task's


def run_cycle() -> None:
    in_thread(run_one_cycle)


def number(page, selector: str) -> int:
    """The whole number a figure shows (``1,234`` read as 1234)."""
    shown = page.locator(selector).inner_text()
    match = re.match(r"\s*([0-9][0-9,]*)", shown)
    assert match, f"{selector} shows no number: {shown!r}"
    return int(match[1].replace(",", ""))


def read_figures(page) -> dict[str, object]:
    """Every number of the array page: the tasks by state, the size, held back, GPUs held,
    active, and how many tasks the table lists."""
    states = {
        row.get_attribute("data-state"): number(row, "td")
        for row in page.locator("#array-states tbody tr").all()
    }
    return {
        "states": states,
        "size": number(page, "#array-size"),
        "held_back": number(page, "#array-held-back"),
        "gpus": number(page, "#array-gpus"),
        "active": number(page, "#array-active"),
        "rows": page.locator("#array-tasks tbody tr[data-job-id]").count(),
    }


def test_a_researcher_submits_an_array_and_follows_it_on_its_page(demo, page, login):
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    base = login("researcher")
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Job name").fill("sweep")
    page.get_by_label("Queue").select_option(str(Queue.objects.get(name="llm-experiment").pk))
    page.get_by_label("GPUs in total").fill(str(GPUS))
    page.get_by_label("Simulated true runtime (minutes)").fill("90")
    page.get_by_label("Array", exact=True).fill("0-5%2")  # not "Start after arrays"
    # the what-if answers for its tasks together, up to its bound
    expect(page.locator("#feasibility-title")).to_have_text("Would start 2 of its 6 tasks now")
    page.get_by_role("button", name="Submit job").focus()
    page.keyboard.press("Enter")

    page.wait_for_url(re.compile(r"/arrays/\d+/$"))
    array = JobArray.objects.get()
    assert (array.spec, array.size, array.max_running) == ("0-5%2", 6, 2)
    expect(page.locator("main > ul.messages")).to_contain_text(
        f"Array {array.pk} submitted: 6 tasks wait for the next cycle."
    )
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Array {array.pk}: sweep")
    assert read_figures(page) == {"states": {"pending": 6}, "size": 6, "held_back": 0,
                                  "gpus": 0, "active": 6, "rows": 6}  # fmt: skip

    run_cycle()
    page.reload()
    figures = read_figures(page)
    assert sum(figures["states"].values()) == figures["size"] == 6
    assert figures["states"] == {"pending": 4, "running": 2}
    assert figures["held_back"] == 4
    assert figures["gpus"] == 2 * GPUS
    assert figures["active"] == 6 and figures["rows"] == 6
    expect(page.locator("#array-bound")).to_have_text("at most 2 at once")
    expect(page.locator("#array-spec")).to_have_text("0-5%2")
    expect(page.locator("#array-created")).to_have_text(
        re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d UTC$")
    )
    running = page.locator("#array-tasks tbody tr", has=page.locator('[data-state="running"]'))
    expect(running).to_have_count(2)
    held = page.locator("#array-tasks tbody tr", has_text="ARRAY_LIMIT")
    expect(held).to_have_count(4)
    expect(page.get_by_role("button", name="Cancel all 6 active tasks")).to_be_visible()
    screenshot(page, "array-page")
    assert audit(page, "array page") == [], "axe-core (test_accessibility.py's rules)"

    # A held-back task's page: why it waits, and when it may start (its place opens when
    # the first running task ends: a time, cluster time in the viewer's zone)
    task = Job.objects.get(array=array, array_index=2)
    page.locator('#array-tasks tr[data-index="2"] a').click()
    page.wait_for_url(f"{base}/jobs/{task.pk}/")
    expect(page.locator("#job-array")).to_have_text(f"Task 2 of array {array.pk} (sweep, 0-5%2)")
    expect(page.locator("#verdict-code")).to_have_text("ARRAY_LIMIT")
    expect(page.locator("#verdict-title")).to_have_text(
        "Its array runs at most so many tasks at once"
    )
    expect(page.locator("#verdict-message")).to_have_text(
        f"Its array {array.pk} runs at most 2 tasks at once: 2 tasks hold GPUs, and 0 waiting "
        "tasks go before task 2."
    )
    expect(page.locator("#estimated-start")).to_have_text(
        re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d UTC$")
    )
    expect(page.locator("#verdict-remedy")).to_contain_text("raise the bound on the array's page")

    # Back on the array page: a bound above the size is refused there, then 4 is taken
    # and two more start at the next cycle
    page.get_by_role("link", name=f"array {array.pk} (sweep, 0-5%2)").click()
    page.wait_for_url(f"{base}/arrays/{array.pk}/")
    page.get_by_label("Most tasks at once").fill("9")
    page.get_by_role("button", name="Change the bound").click()
    expect(page.locator("#id_max_running_error")).to_have_text("the array has 6 tasks; at most 6")
    assert audit(page, "array page, a bound refused") == []
    page.get_by_label("Most tasks at once").fill("4")
    page.get_by_role("button", name="Change the bound").click()
    page.wait_for_url(f"{base}/arrays/{array.pk}/")
    expect(page.locator("main > ul.messages")).to_contain_text(
        f"Array {array.pk} now runs at most 4 tasks at once"
    )
    expect(page.locator("#array-bound")).to_have_text("at most 4 at once")
    # the page is live: the cycle's event refetches its parts, no reload
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    page.wait_for_timeout(500)  # the subscriptions are sent on open
    page.evaluate("window.__sameDocument = true")
    page.get_by_label("Most tasks at once").fill("typed")  # a field being typed stays
    run_cycle()
    expect(page.locator('#array-states tr[data-state="running"] td')).to_have_text(
        "4", timeout=8_000
    )
    assert page.evaluate("window.__sameDocument === true"), "no reload"
    expect(page.get_by_label("Most tasks at once")).to_have_value("typed")
    figures = read_figures(page)
    assert figures["states"] == {"pending": 2, "running": 4}
    assert figures["held_back"] == 2 and figures["gpus"] == 4 * GPUS
    assert sum(figures["states"].values()) == figures["size"]
