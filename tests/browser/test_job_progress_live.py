"""A running job's "Progress so far" moves with the header's cluster clock.

The page walk of session 42 read "Started 16:08" and "Progress so far 29 min" beside a
clock at 16:45: the backend's progress reading is stored every 5 minutes of work, and the
page showed it as it was when the page was made. The server now counts a run's progress
to its now (``Job.progress_at``) and the page's script ticks it with the clock between
refetches (``static/js/pages/jobs_detail.js``): here the clock jumps 25 minutes on a cycle
event, with no event about the job, and the progress follows.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import transaction
from playwright.sync_api import expect

from core import events
from core.realtime import publish_on_commit
from scheduling import services
from scheduling.cycle import run_cycle
from scheduling.models import Job
from scheduling.services import JobRequest
from tests.browser.conftest import in_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def cycle_seen_at(at) -> None:
    """A cycle's summary as the loop sends it, at cluster time ``at`` (nothing else moves)."""
    record = SimpleNamespace(
        pk=999, kind="cycle", cluster_time=at, duration_ms=1.0, starts=0, preemptions=0,
        finished=0, failed=0, requeued=0, pending=0, pending_by_reason={}, errors=[],
        violations=[], drift=[],
    )  # fmt: skip

    def send() -> None:
        with transaction.atomic():
            publish_on_commit(*events.cycle_completed(record))

    in_thread(send)


def test_progress_so_far_ticks_with_the_cluster_clock(demo, page, login):
    job = in_thread(
        services.submit_job,
        demo["researcher"],
        JobRequest(name="long", queue="llm-core", gpus=8, sim_duration_minutes=600),
    )
    in_thread(run_cycle)
    job = Job.objects.get(pk=job.pk)
    assert job.state == "running", job.state
    base = login("researcher")
    page.goto(f"{base}/jobs/{job.pk}/")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    page.wait_for_timeout(500)  # the subscriptions are sent on open
    progress = page.locator('#job-status [data-field="progress_seconds"]')
    expect(page.locator("#progress-label")).to_have_text("Progress so far")
    expect(progress).to_have_text("0 min")
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    seen = job.started_at + timedelta(minutes=25, seconds=10)
    cycle_seen_at(seen)
    # the minute of that instant (not of started_at + 25 min: a start at hh:mm:50 or later
    # puts the two in different minutes, and the test failed once on it)
    expect(page.locator("#cluster-time")).to_contain_text(f"{seen:%H:%M}", timeout=5_000)
    expect(progress).to_have_text("25 min", timeout=3_000)
    assert not [url for url in asked if f"/api/v1/jobs/{job.pk}/" in url], "the clock alone"
