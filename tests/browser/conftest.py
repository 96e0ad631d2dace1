"""Browser tests: Debian's Chromium driven by Playwright against the real ASGI server.

``portal_server`` runs the web server (HTTP + websockets) in a subprocess on the test
database and the test Redis, so pages, websockets and the loop (run in the test
process, publishing through the Redis channel layer) are all real. Tests using it
need committed data: mark them ``django_db(transaction=True)``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
# Screenshots go to a scratch directory, so a test run leaves the checkout as it was;
# `make screenshots` sets PORTAL_SCREENSHOTS_DIR=docs/screenshots to refresh the docs' ones.
SCREENSHOTS = Path(
    os.environ.get("PORTAL_SCREENSHOTS_DIR") or Path(tempfile.gettempdir()) / "portal-screenshots"
)

pytestmark = pytest.mark.browser

# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
# around it are still synchronous and safe (TESTBEDS.md).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: apt-get install -y chromium (.ci/run does it)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def portal_server(transactional_db) -> Iterator[str]:
    """Base URL of the portal's web server (portal/web.py) on the test database."""
    db = settings.DATABASES["default"]
    port = _free_port()
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",  # same hashers as the test process
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=settings.REDIS_URL,
        DEBUG="1",
        SIMULATOR_SPEED="0",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "portal.web", "--port", str(port), "--workers", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60  # a loaded 2-core machine starts it slowly
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the web server did not start")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def login(page, portal_server):
    """``login("researcher")`` signs the page in (demo password) and returns the base URL."""
    from tests.conftest import DEMO_PASSWORD

    def sign_in(username: str, target=None) -> str:
        target = target or page
        target.goto(f"{portal_server}/accounts/login/")
        target.get_by_label("Username").fill(username)
        target.get_by_label("Password").fill(DEMO_PASSWORD)
        target.get_by_role("button", name="Log in").click()
        target.wait_for_url(f"{portal_server}/")
        return portal_server

    return sign_in


def wait_in_page(page, expression: str, timeout: float = 10_000) -> None:
    """Wait until ``expression`` is true in the page. Not ``page.wait_for_function``: once
    its first check is false it polls with ``eval`` in the page, which the portal's CSP
    refuses (``script-src 'self'``), so a test using it passed only when the page was
    already there (a full run failed on it, session 42). ``page.evaluate`` is not the
    page's script, so the CSP does not apply to it."""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout:.0f} ms: {expression}")
        page.wait_for_timeout(100)


def draw_dashboard(page, url: str) -> float:
    """Open a dashboard URL and wait until its script has drawn every chart (it sets
    ``window.__chartsDrawn``, the time it took); return that."""
    page.goto(url)
    wait_in_page(page, "window.__chartsDrawn !== undefined", timeout=30_000)
    return page.evaluate("window.__chartsDrawn")


def screenshot(page, name: str) -> None:
    """Save a screenshot (``<name>.png``) to SCREENSHOTS: docs/screenshots/ under
    `make screenshots`, a scratch directory otherwise."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def in_thread(fn, *args):
    """Call ``fn`` in a worker thread (own DB connection) and return its result.

    Playwright's sync API runs an event loop in the test thread, where the after-commit
    publishing of live events (``async_to_sync``) is refused; from a thread of its own the
    code publishes through Redis to the server serving the pages, as a Celery worker does.
    """
    import threading

    from django.db import connection

    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            out["error"] = exc
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(120)
    if worker.is_alive():
        raise TimeoutError(f"{getattr(fn, '__name__', fn)} still running after 120 s")
    if "error" in out:
        raise out["error"]
    return out.get("value")
