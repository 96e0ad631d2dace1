"""A time limit in Chromium, read in Tokyo: the researcher picks a queue that bounds its
runs (the form's hint says how) and submits a job with "Time limit (minutes)" 30; once it runs, its page says when the run is asked to stop,
in JST; the loop stops it at its limit and the page, live, says it failed on its time
limit, with the same words a reload gives (the script renders what the server renders).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import expect

from quotas.models import Queue
from scheduling.cycle import run_cycle
from scheduling.models import Job
from scheduling.sim_services import advance_clock
from tests.browser.conftest import in_thread
from tests.browser.test_after_condition_browser import fill_a_job
from tests.drills import make_quotas_roomy

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def advance(admin, seconds: float) -> None:
    in_thread(advance_clock, admin, seconds)


def test_a_limited_job_says_when_it_stops_and_fails_on_its_limit_live(demo, browser, login):
    make_quotas_roomy()
    Queue.objects.filter(name="llm-core").update(
        max_time_limit_minutes=1440, default_time_limit_minutes=480
    )
    context = browser.new_context(timezone_id="Asia/Tokyo")
    page = context.new_page()
    try:
        base = login("researcher", page)
        fill_a_job(page, base, "bounded")
        expect(page.locator("#queue-hint")).to_contain_text(
            "A run may last at most 24 h here. A job that gives no time limit gets 8 h."
        )
        page.get_by_label("Simulated true runtime (minutes)").fill("90")
        page.get_by_label("Time limit (minutes)").fill("30")
        page.get_by_role("button", name="Submit job").click()
        page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        job = Job.objects.get(name="bounded")
        assert job.time_limit_minutes == 30
        limit = page.locator('#job-status [data-field="time_limit"]')
        expect(limit).to_have_text("30 min a run")
        expect(page.locator("#timeline")).to_contain_text("; time limit 30 min a run")

        in_thread(run_cycle)
        job.refresh_from_db()
        assert job.state == "running"
        stop = job.started_at + timedelta(minutes=30, hours=9)  # JST
        expect(limit).to_have_text(
            f"30 min a run: this run is asked to stop at {stop:%Y-%m-%d %H:%M} JST if still running"
        )
        page.reload()
        expect(limit).to_have_text(
            f"30 min a run: this run is asked to stop at {stop:%Y-%m-%d %H:%M} JST if still running"
        )
        expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
        expect(page.locator("#time-limit-form")).to_be_visible()

        advance(demo["admin"], 31 * 60)
        in_thread(run_cycle)  # asked to stop
        expect(page.locator("#job-state")).to_have_text("preempting")
        expect(page.locator("#timeline")).to_contain_text(
            "it reached its time limit of 30 min a run; the job then ends failed, with no retry"
        )
        for _ in range(8):
            advance(demo["admin"], 60)
            in_thread(run_cycle)
            if Job.objects.get(pk=job.pk).state == "failed":
                break
        expect(page.locator("#job-state")).to_have_text("failed")
        expect(page.locator("#time-limit-form")).to_be_hidden()  # live: it ended
        expect(limit).to_have_text("30 min a run")
        failure = page.locator('#job-status [data-field="failure_reason"]')
        expect(failure).to_contain_text("time limit reached (Slurm's TIMEOUT): the run lasted")
        live = page.locator("#job-status").inner_text()
        page.reload()
        assert page.locator("#job-status").inner_text() == live, (
            "the script says what the server says"
        )
        assert " UTC" not in live
    finally:
        context.close()


def test_a_waiting_job_s_earliest_start_is_changed_on_its_page_in_tokyo(demo, browser, login):
    """Scontrol update StartTime= in the browser: the researcher in Tokyo puts a waiting job
    off to tomorrow 09:00 (their time), reads it back in JST, the loop holds it with
    BEGIN_TIME, then empties the field: it queues from now and starts; the form hides, live."""
    from zoneinfo import ZoneInfo

    from core import clock
    from scheduling.services import JobRequest, submit_job

    make_quotas_roomy()
    tokyo = ZoneInfo("Asia/Tokyo")
    job = in_thread(submit_job, demo["researcher"],
                    JobRequest(name="eval", queue="llm-core", gpus=8, sim_duration_minutes=60))  # fmt: skip
    day = clock.now().astimezone(tokyo).date() + timedelta(days=1)
    nine = f"{day:%Y-%m-%d}T09:00"
    context = browser.new_context(timezone_id="Asia/Tokyo")
    page = context.new_page()
    try:
        base = login("researcher", page)
        page.goto(f"{base}/jobs/{job.pk}/")
        row = page.locator('#job-status [data-field="begin_at"]')
        expect(row).to_have_text("none")
        page.locator("#begin-time-at").fill(nine)
        page.locator("#begin-time-reason").fill("after the data refresh")
        page.get_by_role("button", name="Change the earliest start").click()
        page.wait_for_url(re.compile(rf"/jobs/{job.pk}/$"))
        expect(page.locator("ul.messages")).to_have_text(
            f"Job #{job.pk} does not start before {day:%Y-%m-%d} 09:00 JST."
        )
        expect(row).to_have_text(f"{day:%Y-%m-%d} 09:00 JST (asked: Slurm's --begin)")
        expect(page.locator("#begin-time-at")).to_have_value(nine)
        expect(page.locator("#timeline")).to_contain_text(
            f"to {day:%Y-%m-%d} 09:00 JST (Slurm's --begin); it queues from then: after the "
            "data refresh"
        )
        expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
        in_thread(run_cycle)
        expect(page.locator("#verdict-code")).to_have_text("BEGIN_TIME")

        page.locator("#begin-time-at").fill("")
        page.get_by_role("button", name="Change the earliest start").click()
        expect(page.locator("ul.messages")).to_have_text(
            f"Job #{job.pk} has no earliest start: it queues from now."
        )
        expect(row).to_have_text("none")
        expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
        in_thread(run_cycle)
        expect(page.locator("#job-state")).to_have_text("running")
        expect(page.locator("#begin-time-form")).to_be_hidden()  # live: it started
    finally:
        context.close()
