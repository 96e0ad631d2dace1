"""One at a time by name in Chromium: a researcher's training job "train" runs on the small
test cluster (4 x 8 GPUs, roomy quotas); the researcher fills the submit form for a second
part, first under another name (the what-if: it would start now), then renames it "train"
and ticks "One at a time by name" (the page's script asks again with the box and the name:
it would wait for the first to end), submits, and reads on the new job's page why it waits.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from scheduling.cycle import run_cycle
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.browser.conftest import in_thread
from tests.browser.test_after_condition_browser import fill_a_job
from tests.drills import make_quotas_roomy

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_second_part_submitted_one_at_a_time_by_name_waits_for_the_first(demo, page, login):
    make_quotas_roomy()
    train = JobRequest(name="train", queue="llm-core", gpus=8, sim_duration_minutes=90)
    first = in_thread(submit_job, demo["researcher"], train)
    in_thread(run_cycle)  # it runs
    base = login("researcher")
    fill_a_job(page, base, "part-2")
    page.get_by_label("One at a time by name").check()
    title, text = page.locator("#feasibility-title"), page.locator("#feasibility-text")
    expect(title).to_have_text("Would start now")  # no job of that name
    page.get_by_label("Job name").fill("train")  # the script asks again with the name
    expect(title).to_have_text("Would wait for other jobs to end")
    expect(text).to_contain_text(f"Waits for job {first.pk} (train) to end: running")
    page.get_by_role("button", name="Submit job").click()

    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="train", singleton=True)
    assert page.url == f"{base}/jobs/{job.pk}/"
    assert list(job.after.values_list("pk", flat=True)) == [first.pk]
    expect(page.locator("#singleton")).to_have_text(
        "One at a time by name (Slurm's singleton): it was made to wait for researcher's jobs "
        "named “train” that were still waiting or running when it was submitted (above, with "
        "any it was asked to wait for)."
    )
    expect(page.locator("#starts-after").locator("a")).to_have_attribute(
        "href", f"/jobs/{first.pk}/"
    )
    in_thread(run_cycle)  # the loop's verdict
    page.reload()
    expect(page.locator("#verdict-title")).to_have_text("Waiting for other jobs to end")
    expect(page.locator("#verdict-message")).to_contain_text(
        f"Waits for job {first.pk} (train) to end: running"
    )
