"""A job after a whole job array in Chromium: a researcher's array runs two tasks at a time
on the small test cluster (4 x 8 GPUs, roomy quotas); the researcher fills the submit form
with "Start after arrays" (the what-if under it says the job would wait for them), submits,
lands on the new job's page, reads its "Starts after" line (the array linked, its tasks
succeeded counted), and after the next cycle the page, without a reload, says why it waits:
``DEPENDENCY``, the array's tasks counted by what they are doing.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from quotas.models import Queue
from scheduling.array_services import submit_array
from scheduling.cycle import run_cycle
from scheduling.models import Job
from scheduling.services import JobRequest
from tests.browser.conftest import in_thread, wait_in_page
from tests.drills import make_quotas_roomy

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_job_submitted_after_an_array_through_the_form_says_what_it_waits_for(demo, page, login):
    make_quotas_roomy()
    sweep = JobRequest(name="sweep", queue="llm-experiment", gpus=4, sim_duration_minutes=90)
    array = in_thread(submit_array, demo["researcher"], sweep, "0-5%2")
    in_thread(run_cycle)  # two of its six tasks start
    base = login("researcher")
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Job name").fill("aggregate")
    page.get_by_label("Queue").select_option(str(Queue.objects.get(name="llm-core").pk))
    page.get_by_label("GPUs in total").fill("8")
    page.get_by_label("Simulated true runtime (minutes)").fill("30")
    expect(page.locator("#feasibility-title")).to_have_text("Would start now")
    page.get_by_label("Start after arrays").fill(f"{array.pk}")
    # the what-if asks with the field (jobs_submit.js) and holds the job for the array
    expect(page.locator("#feasibility-title")).to_have_text("Would wait for other jobs to succeed")
    expect(page.locator("#feasibility-code")).to_have_text("DEPENDENCY")
    expect(page.locator("#feasibility-text")).to_contain_text(
        f"Waits for array {array.pk} (sweep) to succeed: 6 tasks have not: 2 running"
    )
    page.get_by_role("button", name="Submit job").click()

    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="aggregate")
    assert page.url == f"{base}/jobs/{job.pk}/"
    assert list(job.after_arrays.values_list("pk", flat=True)) == [array.pk]
    starts_after = page.locator("#starts-after")
    expect(starts_after).to_have_text(
        f"Starts after: array {array.pk} (sweep): 0 of 6 tasks succeeded. It starts only once "
        "all of them have succeeded (every task of each array), and is cancelled if one fails "
        "or is cancelled."
    )
    expect(starts_after.locator("a")).to_have_attribute("href", f"/arrays/{array.pk}/")
    expect(page.locator("#verdict-none")).to_be_visible()  # no cycle has seen it yet

    # the next cycle's verdict reaches the open page (its live update, no reload)
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    page.wait_for_timeout(500)  # the subscriptions are sent on open
    page.evaluate("window.__sameDocument = true")
    in_thread(run_cycle)
    expect(page.locator("#verdict-code")).to_have_text("DEPENDENCY", timeout=15_000)
    expect(page.locator("#verdict-title")).to_have_text("Waiting for other jobs to succeed")
    message = page.locator("#verdict-message")
    expect(message).to_have_text(
        re.compile(
            rf"^Waits for array {array.pk} \(sweep\) to succeed: 6 tasks have not: 2 running, "
            r"the last predicted to end \d{4}-\d\d-\d\d \d\d:\d\d UTC; 4 waiting to start, "
            r"the last predicted to end at the earliest \d{4}-\d\d-\d\d \d\d:\d\d UTC\.$"
        )
    )
    wait_in_page(page, "window.__sameDocument === true")  # the same page, updated in place
    assert Job.objects.get(pk=job.pk).state == Job.State.PENDING
