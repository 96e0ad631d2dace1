"""The job a waiting job's estimate waits for (``scheduling.engine.overrun_note``) is a link
to its page for viewers who may see it, on load and after every live update: the page's
script re-renders the verdict from ``/api/v1/jobs/<id>/`` (its ``job_links``), and used to
set the text alone."""

from __future__ import annotations

import pytest
from django.db import transaction
from playwright.sync_api import expect

from core import events
from core.realtime import publish_on_commit
from scheduling import services
from scheduling.models import Job
from scheduling.services import JobRequest
from tests.browser.conftest import in_thread, wait_in_page
from tests.pages.test_researcher_pages import waiting_on_overrun

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def submit(user, name: str, queue: str) -> Job:
    return in_thread(services.submit_job, user, JobRequest(name=name, queue=queue, gpus=8))


def job_updated(job_id: int) -> None:
    """What the cycle sends when it rewrites a verdict (from a thread: see ``in_thread``)."""

    def send() -> None:
        with transaction.atomic():
            publish_on_commit(*events.job_updated(job_id, "pending", pending_code="PRIORITY"))

    in_thread(send)


def test_the_overrunning_job_stays_a_link_after_a_live_update(demo, page, login):
    mine = submit(demo["lead"], "long-run", "llm-core")
    theirs = submit(demo["researcher2"], "theirs", "search-rec-core")
    waiting = submit(demo["researcher"], "waits", "llm-finetune")
    in_thread(waiting_on_overrun, waiting, mine)
    base = login("researcher")
    page.goto(f"{base}/jobs/{waiting.pk}/")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    page.wait_for_timeout(500)  # the subscriptions are sent on open
    message, facts = page.locator("#verdict-message"), page.locator("#verdict-details")
    expect(message.locator("a")).to_have_attribute("href", f"/jobs/{mine.pk}/")
    expect(message.locator("a")).to_have_text(f"job {mine.pk}")

    # the next cycle's verdict names a run of another line: named, not linked
    in_thread(waiting_on_overrun, waiting, theirs)
    page.evaluate("document.getElementById('verdict-message').textContent = 'stale'")
    with page.expect_response(lambda r: f"/api/v1/jobs/{waiting.pk}/" in r.url):
        job_updated(waiting.pk)
    wait_in_page(page, "document.getElementById('verdict-message').textContent !== 'stale'")
    expect(message).to_contain_text(f"Its estimate waits for job {theirs.pk}, which has run")
    expect(message.locator("a")).to_have_count(0)
    expect(facts.locator("a")).to_have_count(0)

    # and back to the line's own run: a link again, in the sentence and in its fact
    in_thread(waiting_on_overrun, waiting, mine)
    with page.expect_response(lambda r: f"/api/v1/jobs/{waiting.pk}/" in r.url):
        job_updated(waiting.pk)
    expect(message.locator("a")).to_have_attribute("href", f"/jobs/{mine.pk}/", timeout=10_000)
    expect(message).to_contain_text("must free up <soon>.")  # text, not markup
    expect(facts.locator("a")).to_have_text(f"#{mine.pk}")
    page.locator("#verdict-details a").click()
    page.wait_for_url(f"{base}/jobs/{mine.pk}/")
    expect(page.locator("h1")).to_contain_text("long-run")


def test_the_array_a_job_waits_for_is_a_link_on_load_and_after_a_live_update(demo, page, login):
    """A job after a whole array: its verdict names "array 42 (sweep)", a link to the array's
    page for a viewer who may see it, on load and as the page's script re-renders it (the
    API's ``array_links``)."""
    from scheduling.array_services import submit_array
    from scheduling.cycle import run_cycle

    sweep = in_thread(submit_array, demo["researcher"],
                      JobRequest(name="sweep", queue="llm-experiment", gpus=8), "0-1")  # fmt: skip
    then = in_thread(services.submit_job, demo["researcher"],
                     JobRequest(name="collect", queue="llm-experiment", gpus=8,
                                after_arrays=(sweep.pk,)))  # fmt: skip
    in_thread(run_cycle)
    base = login("researcher")
    page.goto(f"{base}/jobs/{then.pk}/")
    message = page.locator("#verdict-message")
    expect(message.locator("a")).to_have_attribute("href", f"/arrays/{sweep.pk}/")
    expect(message.locator("a")).to_have_text(f"array {sweep.pk}")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    page.wait_for_timeout(500)  # the subscriptions are sent on open
    page.evaluate("document.getElementById('verdict-message').textContent = 'stale'")
    with page.expect_response(lambda r: f"/api/v1/jobs/{then.pk}/" in r.url):
        job_updated(then.pk)
    wait_in_page(page, "document.getElementById('verdict-message').textContent !== 'stale'")
    expect(message.locator("a")).to_have_attribute("href", f"/arrays/{sweep.pk}/")
    expect(page.locator("#verdict-details a")).to_have_text(f"array {sweep.pk}")
    page.locator("#verdict-message a").click()
    page.wait_for_url(f"{base}/arrays/{sweep.pk}/")
