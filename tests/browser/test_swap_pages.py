"""A quota swap (#19) read in a real browser: the displaced job's open page follows the loop
live ("On borrowed capacity: yes (reclaimable)" and a timeline line naming the job that
started in its place), the job that started says it did so within its quota, and once that
job is cancelled the displaced job's page says, live, that it runs within quota again.

The demo's 4 x 8-GPU cluster, line ``llm`` cut to 16 GPUs: one 16-GPU experiment of the
lead's fills it; a fine-tuning job that may not be preempted then starts on the idle half
of the cluster, the experiment running on as the borrowed part.
"""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from playwright.sync_api import expect

from quotas.models import BusinessLine, Queue
from scheduling import services
from scheduling.cycle import run_cycle as run_one_cycle
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest
from scheduling.sim_services import advance_clock
from tests.browser.conftest import in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A time as people read it on these pages: never an epoch, never a float.
READABLE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}(:\d{2})? UTC$")


def line_held_by_an_experiment(demo) -> Job:
    """Line ``llm`` cut to 16 GPUs, held within quota by the lead's running 16-GPU
    experiment (preemptible, so a swap may displace it)."""
    BusinessLine.objects.filter(name="llm").update(quota_gpus=16, guarantee_gpus=0)
    Queue.objects.filter(business_line__name="llm").update(quota_gpus=None, guarantee_gpus=0)
    experiment = in_thread(services.submit_job, demo["lead"], JobRequest(
        name="sweep-16", queue="llm-experiment", gpus=16, gpus_per_node=8,
        sim_duration_minutes=600))  # fmt: skip
    in_thread(run_one_cycle)
    experiment.refresh_from_db()
    assert (experiment.state, experiment.borrowed) == ("running", False)
    return experiment


def test_a_displaced_job_page_says_live_that_it_now_runs_on_borrowed_capacity(demo, page, login):
    experiment = line_held_by_an_experiment(demo)

    base = login("lead")
    page.goto(f"{base}/jobs/{experiment.pk}/")
    borrowed = page.locator('#job-status [data-field="borrowed"]')
    expect(borrowed).to_have_text("no")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)

    finetune = in_thread(services.submit_job, demo["researcher"], JobRequest(
        name="sft-8", queue="llm-finetune", gpus=8, preemptible=False,
        sim_duration_minutes=600))  # fmt: skip
    record = in_thread(run_one_cycle)
    finetune.refresh_from_db()
    experiment.refresh_from_db()
    assert (record.starts, record.preemptions) == (1, 0)
    assert (finetune.state, finetune.borrowed) == ("running", False)
    assert (experiment.state, experiment.borrowed) == ("running", True)

    # The open page, without reload: the flag and the timeline line that says why.
    expect(borrowed).to_have_text("yes (reclaimable)")
    line = page.locator("#timeline li", has_text="borrowed")
    expect(line).to_have_count(1)
    expect(line).to_contain_text(
        f"job {finetune.pk}, which may not be preempted, started within the quota in its place"
    )
    event = JobEvent.objects.get(job=experiment, kind="borrowed")
    expect(line.locator("time")).to_have_text(READABLE_TIME)
    shown_at = line.locator("time").get_attribute("datetime").replace("Z", "+00:00")
    assert datetime.fromisoformat(shown_at) == event.at, "the event's own time, not another"
    expect(page.locator("#job-state")).to_have_text("running")

    # The same after a reload (the server's rendering agrees with the live one).
    page.reload()
    expect(borrowed).to_have_text("yes (reclaimable)")
    expect(page.locator("#timeline li", has_text="borrowed")).to_contain_text(f"job {finetune.pk}")

    # The job that started in its place says how, and is not itself reclaimable.
    page.goto(f"{base}/jobs/{finetune.pk}/")
    expect(page.locator('#job-status [data-field="borrowed"]')).to_have_text("no")
    expect(page.locator("#timeline li", has_text="started")).to_contain_text(
        "within its quota; 1 preemptible job of its queue or line now runs on borrowed "
        "capacity in its place"
    )
    assert Job.objects.filter(state="running").count() == 2

    # The job that swapped in is cancelled: once its run is gone, the line holds the
    # experiment within its quota again, and the experiment's open page says so, live.
    page.goto(f"{base}/jobs/{experiment.pk}/")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    expect(borrowed).to_have_text("yes (reclaimable)")
    in_thread(services.cancel_job, demo["researcher"], finetune.pk)
    for _ in range(3):
        in_thread(run_one_cycle)
        experiment.refresh_from_db()
        if not experiment.borrowed:
            break
    assert (experiment.state, experiment.borrowed) == ("running", False)
    expect(borrowed).to_have_text("no")
    back = page.locator("#timeline li", has_text="no longer on borrowed capacity")
    expect(back).to_have_count(1)
    expect(back).to_contain_text("now runs within its queue's and line's quotas")
    expect(back.locator("time")).to_have_text(READABLE_TIME)
    event = JobEvent.objects.get(job=experiment, kind="within_quota")
    shown_at = back.locator("time").get_attribute("datetime").replace("Z", "+00:00")
    assert datetime.fromisoformat(shown_at) == event.at


def test_a_small_job_s_page_says_why_it_does_not_swap_a_big_run_into_borrowed_work(
    demo, page, login
):
    experiment = line_held_by_an_experiment(demo)
    in_thread(advance_clock, demo["admin"], 3600)
    small = in_thread(services.submit_job, demo["researcher"], JobRequest(
        name="eval-1", queue="llm-finetune", gpus=1, preemptible=False,
        sim_duration_minutes=60))  # fmt: skip
    record = in_thread(run_one_cycle)
    small.refresh_from_db()
    experiment.refresh_from_db()
    assert record.starts == 0 and small.state == "pending", record
    assert (experiment.state, experiment.borrowed) == ("running", False)
    assert small.pending_details["borrow_refused"] == "swap_risk"

    base = login("researcher")
    page.goto(f"{base}/jobs/{small.pk}/")
    expect(page.locator("#verdict-code")).to_have_text("QUOTA_EXCEEDED")
    rule = page.locator("#verdict-details dt", has_text="Not borrowing idle capacity because")
    expect(rule.locator("xpath=following-sibling::dd[1]")).to_have_text(
        "the work that would be borrowed in its place is too big or has run too long to be "
        "put at risk for it"
    )
    said = page.locator("#verdict-message").inner_text()
    assert re.search(
        r"\(16 GPUs\) are so big or have run so long that a reclaim an hour from now would "
        r"count 3\d GPU-hours evicted, more than the 16 a swap may put at risk for a 1-GPU job",
        said,
    ), said
