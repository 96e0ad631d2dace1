"""Redis goes away and comes back: pages keep serving, the loop commits, live views recover.

Each test runs its own Redis (the shared test Redis stays up for everyone else):
the web server is started on it, and this process's channel layer and cache point at it too,
as a Celery worker's would. "Away" is tried two ways: the server stopped (connections
refused) and the server frozen with SIGSTOP (connections hang, as in a network partition).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import requests
from rest_framework.authtoken.models import Token

from bench.management.commands.bench_live import ViewerPool, run_timed_cycle
from core import realtime
from core.realtime import PUBLISH_TIMEOUT_S
from portal.devservices import Redis
from scheduling.consistency import find_inconsistencies
from scheduling.cycle import run_cycle
from scheduling.models import Job, SchedulingCycle
from scheduling.services import JobRequest, submit_job
from tests.conftest import DEMO_PASSWORD
from tests.reliability.conftest import (
    celery_beat,
    celery_worker,
    child_env,
    loop_env,
    session_cookie,
    stop_process,
    wait_until,
    web_server,
)

pytestmark = pytest.mark.django_db(transaction=True)

READ_PATHS = ["/", "/api/v1/jobs/", "/api/v1/nodes/", "/api/v1/queues/", "/api/v1/business-lines/"]


def signed_in(base: str, user) -> requests.Session:
    http = requests.Session()
    http.cookies.set("sessionid", session_cookie(user), domain="127.0.0.1")
    return http


def api_client(user) -> requests.Session:
    http = requests.Session()
    token = Token.objects.get_or_create(user=user)[0].key
    http.headers.update({"Authorization": f"Token {token}", "Accept": "application/json"})
    return http


def log_in_with_the_form(base: str, username: str) -> requests.Response:
    http = requests.Session()
    page = http.get(base + "/accounts/login/", timeout=10)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return http.post(
        base + "/accounts/login/",
        data={"username": username, "password": DEMO_PASSWORD, "csrfmiddlewaretoken": csrf},
        headers={"Referer": base + "/accounts/login/"}, allow_redirects=False, timeout=10,
    )  # fmt: skip


def assert_portal_serves(base: str, users: dict) -> None:
    """Pages, API reads and writes, and a login, all without Redis."""
    browser = signed_in(base, users["researcher"])
    for path in READ_PATHS:
        response = browser.get(base + path, timeout=10)
        assert response.status_code == 200, (path, response.status_code)
    login = log_in_with_the_form(base, "researcher2")
    assert login.status_code == 302 and login.headers["Location"] == "/", login.status_code
    submitted = api_client(users["researcher"]).post(
        base + "/api/v1/jobs/", timeout=10,
        json={"name": "during-outage", "queue": "llm-experiment", "gpus": 8},
    )  # fmt: skip
    assert submitted.status_code == 201, submitted.text


def one_viewer_gets_the_next_cycle(base: str, user, subscribe_s: float = 20) -> None:
    pool = ViewerPool(base, [session_cookie(user)])
    pool.start(timeout=subscribe_s)
    try:
        record, _ = run_timed_cycle()
        wait_until(lambda: pool.all_received(record.pk), 10, "cycle.completed after recovery")
    finally:
        pool.close()


def test_with_redis_stopped_pages_serve_the_loop_commits_and_live_updates_resume(
    roomy, on_own_redis, scratch, caplog
):
    caplog.set_level(logging.WARNING, logger="core.realtime")
    with web_server(child_env(REDIS_URL=on_own_redis.url), scratch / "web.log") as base:
        one_viewer_gets_the_next_cycle(base, roomy["researcher"])  # live before the outage
        on_own_redis.stop()

        waiting = submit_job(roomy["lead"], JobRequest(name="waits", queue="llm-core", gpus=8))
        assert_portal_serves(base, roomy)
        record = run_cycle()
        assert record is not None and record.starts == 2  # "waits" and "during-outage"
        assert Job.objects.get(pk=waiting.pk).state == Job.State.RUNNING, "committed"
        assert "live events dropped" in caplog.text
        cycle_via_api = api_client(roomy["admin"]).post(base + "/api/v1/scheduler/cycle/")
        assert cycle_via_api.status_code == 200, cycle_via_api.text

        on_own_redis.start()  # back, and empty: no groups, no queued messages
        # On the uvicorn server about one run in three takes ~35 s here before the first
        # socket after the restart is answered (4 s otherwise): measured, not yet explained
        # (suspected: the channel layer's pooled connections to the old Redis; a
        # health_check_interval made it more frequent). Pages retry and catch up meanwhile.
        one_viewer_gets_the_next_cycle(base, roomy["researcher"], subscribe_s=75)


def session_post(base: str, user, path: str, body: dict) -> requests.Response:
    """A browser-like POST: session cookie plus the CSRF cookie and header."""
    browser = signed_in(base, user)
    browser.get(base + "/accounts/login/", timeout=10)  # sets the csrftoken cookie
    csrf = browser.cookies["csrftoken"]
    return browser.post(
        base + path, json=body, timeout=15,
        headers={"X-CSRFToken": csrf, "Referer": base + "/"},
    )  # fmt: skip


@contextmanager
def frozen(redis: Redis) -> Iterator[None]:
    """Redis still accepts connections but never answers (SIGSTOP), like a partition."""
    os.kill(redis.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(redis.process.pid, signal.SIGCONT)


def test_a_frozen_redis_does_not_hang_the_loop_pages_or_submissions(
    roomy, on_own_redis, scratch, monkeypatch
):
    monkeypatch.setattr(realtime, "PUBLISH_PAUSE_S", 2.0)  # this process only; the server: 10 s
    with web_server(child_env(REDIS_URL=on_own_redis.url), scratch / "web.log") as base:
        one_viewer_gets_the_next_cycle(base, roomy["researcher"])
        with frozen(on_own_redis):
            started = time.monotonic()
            record = run_cycle()
            assert record is not None and SchedulingCycle.objects.filter(pk=record.pk).exists()
            assert time.monotonic() - started < PUBLISH_TIMEOUT_S + 3, "publishing gave up"
            started = time.monotonic()
            assert run_cycle() is not None
            assert time.monotonic() - started < 2, "no second wait within the pause"

            browser = signed_in(base, roomy["researcher"])
            for path in READ_PATHS:
                assert browser.get(base + path, timeout=15).status_code == 200, path
            started = time.monotonic()
            submitted = session_post(base, roomy["researcher"], "/api/v1/jobs/",
                                     {"name": "frozen", "queue": "llm-experiment", "gpus": 1})  # fmt: skip
            assert submitted.status_code == 201, submitted.text
            assert time.monotonic() - started < PUBLISH_TIMEOUT_S + 3, "one wait, then the pause"
        one_viewer_gets_the_next_cycle(base, roomy["researcher"])


def test_a_frozen_redis_does_not_hang_token_api_calls_or_logins(roomy, on_own_redis, scratch):
    env = child_env(REDIS_URL=on_own_redis.url)
    with web_server(env, scratch / "web.log") as base, frozen(on_own_redis):
        reads = api_client(roomy["researcher"]).get(base + "/api/v1/jobs/", timeout=8)
        assert reads.status_code == 200
        assert log_in_with_the_form(base, "researcher2").status_code == 302


def test_the_beat_driven_loop_resumes_when_redis_comes_back(roomy, own_redis, scratch):
    """Celery's broker is Redis: no cycle runs while it is away; they resume on their own."""
    env = loop_env(own_redis.url)
    worker = celery_worker(env, scratch / "worker.log", "--pool", "solo")
    beat = celery_beat(env, scratch / "beat.log", scratch / "beat-schedule")
    try:
        wait_until(lambda: SchedulingCycle.objects.filter(kind="cycle").exists(), 40,
                   "the first beat-driven cycle")  # fmt: skip
        own_redis.stop()
        waiting = submit_job(roomy["lead"], JobRequest(name="late", queue="llm-core", gpus=8))
        time.sleep(3)  # a few beats' worth of outage
        assert Job.objects.get(pk=waiting.pk).state == Job.State.PENDING
        own_redis.start()
        back = time.monotonic()
        wait_until(lambda: Job.objects.get(pk=waiting.pk).state == Job.State.RUNNING, 40,
                   "a beat-driven cycle after Redis returned")  # fmt: skip
        resumed_after = time.monotonic() - back
    finally:
        stop_process(beat)
        stop_process(worker)
    assert find_inconsistencies() == []
    print(f"the loop resumed {resumed_after:.1f} s after Redis returned")
