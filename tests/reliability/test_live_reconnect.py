"""A live page in a real browser rides out a Redis restart: it reconnects and refetches.

Chromium (Playwright) keeps the home page open on a web server whose Redis this test
owns. Redis is stopped and restarted empty (its channel groups gone); meanwhile a
cycle starts the watched job and its events are dropped. The page must show the
outage, come back "live" by itself, call its ``Live.onReconnect`` hooks (the pages'
refetch: here one that reads the watched job), and receive events again, which needs
its subscriptions to be made again on the new Redis.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from bench.management.commands.bench_live import run_timed_cycle
from scheduling.cycle import run_cycle
from scheduling.models import Job
from scheduling.services import JobRequest, cancel_job, submit_job
from tests.browser.conftest import (  # noqa: F401 - Debian's Chromium
    browser_type_launch_args,
    wait_in_page,
)
from tests.reliability.conftest import (
    child_env,
    in_a_thread,
    session_cookie,
    wait_until,
    web_server,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WATCH = """(jobId) => {
  window.__cycles = [];
  window.__refetched = [];
  window.__same_page = true;
  Live.on("cycles", (msg) => window.__cycles.push(msg.data.id));
  Live.onReconnect(async () => {
    const r = await fetch(`/api/v1/jobs/${jobId}/`, { headers: { Accept: "application/json" } });
    window.__refetched.push((await r.json()).state);
  });
}"""


def page_shows(page, expression: str, timeout_s: float = 10) -> bool:
    """Whether a JavaScript expression comes true within ``timeout_s`` (``wait_until``)."""
    try:
        wait_in_page(page, expression, timeout_s * 1000)
    except AssertionError:
        return False
    return True


def sees_cycle(page, cycle_id: int, timeout_s: float = 10) -> bool:
    return page_shows(page, f"window.__cycles.includes({cycle_id})", timeout_s)


def sees_a_new_cycle(page) -> bool:
    record, _ = in_a_thread(run_timed_cycle)
    return sees_cycle(page, record.pk, 2)


def test_a_live_page_reconnects_and_refetches_when_redis_comes_back(
    roomy, on_own_redis, scratch, page
):
    researcher = roomy["researcher"]
    blocker = in_a_thread(
        lambda: submit_job(roomy["lead"], JobRequest(name="blocker", queue="llm-core", gpus=32))
    )
    in_a_thread(run_cycle)  # the whole cluster is busy: the watched job will wait
    watched = in_a_thread(
        lambda: submit_job(researcher, JobRequest(name="watched", queue="llm-core", gpus=8))
    )
    with web_server(child_env(REDIS_URL=on_own_redis.url), scratch / "web.log") as base:
        page.context.add_cookies(
            [{"name": "sessionid", "value": session_cookie(researcher), "url": base}]
        )
        page.goto(base + "/")
        status = page.locator("#live-status")
        expect(status).to_have_text("live", timeout=10_000)
        page.evaluate(WATCH, watched.pk)
        # The subscription is acknowledged asynchronously: a cycle's event proves it.
        wait_until(lambda: sees_a_new_cycle(page), 20, "the first live cycle event", 0)

        on_own_redis.stop()
        expect(status).to_have_text("reconnecting…", timeout=10_000)
        in_a_thread(lambda: cancel_job(roomy["lead"], blocker.pk))
        in_a_thread(run_cycle)  # frees the GPUs and starts the watched job; events dropped
        assert Job.objects.get(pk=watched.pk).state == Job.State.RUNNING

        on_own_redis.start()
        # up to ~35 s on some runs before the first socket after the restart is answered
        # (tests/reliability/test_redis_outage.py says what is known)
        expect(status).to_have_text("live", timeout=75_000)
        assert page_shows(page, "window.__refetched.length > 0"), "the reconnect hook ran"
        # (the server's first socket after the restart may drop once on a stale Redis
        # connection; the page reconnects, and refetches, again by itself)
        assert set(page.evaluate("window.__refetched")) == {"running"}, "caught up"
        # The test process's own publisher pauses PUBLISH_PAUSE_S (10 s) after the failures
        # while Redis was down; on a loaded machine a cycle plus its 2 s look take long too
        # (20 s failed two full-suite runs here out of four, never alone).
        wait_until(lambda: sees_a_new_cycle(page), 45, "events again on the new Redis", 0)
        assert page.evaluate("window.__same_page"), "no reload: the page caught up by itself"
