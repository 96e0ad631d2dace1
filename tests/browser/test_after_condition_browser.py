"""A job after another's end, whatever the outcome, in Chromium: a researcher's training job
runs on the small test cluster (4 x 8 GPUs, roomy quotas); the researcher fills the submit
form with "Start after jobs" and "Start once they have: ended" (the what-if under it, asked
by the page's script with the choice, says the job would wait for it to end), submits,
lands on the new job's page and reads its "Starts after" line: it starts once they have
ended, whatever the outcome, and says nothing of being cancelled for theirs. A job after
another's failure (Slurm's afternotok) is filled and read the same way.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from quotas.models import Queue
from scheduling.cycle import run_cycle
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.browser.conftest import in_thread
from tests.drills import make_quotas_roomy

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def fill_a_job(page, base: str, name: str) -> None:
    """Open the submit form and fill an 8-GPU, 30-minute job ``name`` in ``llm-core``."""
    page.goto(f"{base}/jobs/new/")
    page.get_by_label("Job name").fill(name)
    page.get_by_label("Queue").select_option(str(Queue.objects.get(name="llm-core").pk))
    page.get_by_label("GPUs in total").fill("8")
    page.get_by_label("Simulated true runtime (minutes)").fill("30")


def test_a_job_submitted_after_another_s_end_through_the_form_says_so(demo, page, login):
    make_quotas_roomy()
    train = JobRequest(name="train", queue="llm-core", gpus=8, sim_duration_minutes=90)
    first = in_thread(submit_job, demo["researcher"], train)
    in_thread(run_cycle)  # it runs
    base = login("researcher")
    fill_a_job(page, base, "cleanup")
    page.get_by_label("Start after jobs").fill(f"{first.pk}")
    title, text = page.locator("#feasibility-title"), page.locator("#feasibility-text")
    expect(title).to_have_text("Would wait for other jobs to succeed")
    expect(text).to_contain_text(f"Waits for job {first.pk} (train) to succeed: running")
    start_once = page.get_by_label("Start once they have")
    expect(start_once).to_have_value("succeeded")
    start_once.select_option("ended")
    # the what-if asks again with the choice (jobs_submit.js) and answers as the loop would
    expect(title).to_have_text("Would wait for other jobs to end")
    expect(page.locator("#feasibility-code")).to_have_text("DEPENDENCY")
    expect(text).to_contain_text(f"Waits for job {first.pk} (train) to end: running")
    page.get_by_role("button", name="Submit job").click()

    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="cleanup")
    assert page.url == f"{base}/jobs/{job.pk}/"
    assert job.after_condition == "ended"
    assert list(job.after.values_list("pk", flat=True)) == [first.pk]
    starts_after = page.locator("#starts-after")
    expect(starts_after).to_have_text(
        f"Starts after: job {first.pk} (train), running. It starts once all of them have "
        "ended, whatever the outcome, even if one fails or is cancelled."
    )
    expect(starts_after).not_to_contain_text("is cancelled if one fails")
    expect(starts_after.locator("a")).to_have_attribute("href", f"/jobs/{first.pk}/")


def test_a_job_submitted_after_another_s_failure_says_when_it_runs_and_when_it_is_cancelled(
    demo, page, login
):
    make_quotas_roomy()
    train = JobRequest(name="train", queue="llm-core", gpus=8, sim_duration_minutes=90)
    first = in_thread(submit_job, demo["researcher"], train)
    in_thread(run_cycle)
    base = login("researcher")
    fill_a_job(page, base, "fallback")
    page.get_by_label("Start after jobs").fill(f"{first.pk}")
    page.get_by_label("Start once they have").select_option("failed")
    title, text = page.locator("#feasibility-title"), page.locator("#feasibility-text")
    expect(title).to_have_text("Would wait for other jobs to fail")
    expect(text).to_contain_text(
        f"Waits for job {first.pk} (train) to end without succeeding: running"
    )
    page.get_by_role("button", name="Submit job").click()

    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="fallback")
    assert job.after_condition == "failed"
    expect(page.locator("#starts-after")).to_have_text(
        f"Starts after: job {first.pk} (train), running. It starts only once all of them have "
        "ended without succeeding (failed or cancelled), and is cancelled if one succeeds."
    )
    in_thread(run_cycle)  # its verdict
    page.reload()
    expect(page.locator("#verdict-title")).to_have_text("Waiting for other jobs to fail")
