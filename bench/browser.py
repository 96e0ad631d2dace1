"""Page times as a person sees them: Chromium (Playwright) from navigation start to drawn.

``manage.py bench_browser`` drives these. A page counts as drawn at the first frame after
its ``load`` event and, where it has charts (``[data-chart]``), after the dashboard's
script has drawn the last of them (``window.__chartsDrawn``, set when every
``Plotly.react`` promise has resolved). Times are read inside the page from the
Navigation Timing origin (navigation start, redirects included), so the browser's own
start-up and Playwright's messaging are not counted.

Each page is loaded once in a fresh browser context ("cold": empty HTTP and code caches)
and then ``runs`` times in the signed-in context a person would keep ("warm"); medians
and p95 are of the warm loads, and every figure is also given as a ratio to a trivial
page of the same stack (``/healthz`` drawn in the same browser), so that a loaded
machine shows as a slower baseline rather than as slower pages.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.latency import percentile

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
BASELINE = ("baseline", "/healthz")
LOGIN = ("login", "/accounts/login/")
# name -> path, or a callable that finds the path through the API of the signed-in page
# (None: nothing of that kind exists on this portal)
PAGES: dict[str, str | Callable[[Any], str | None]] = {}

# Set before any page script runs: resolves with the time (ms since navigation start) of
# the first frame painted after the load event and, on a page with charts, after the
# last chart is drawn (dashboard.js sets window.__chartsDrawn and fires "charts:drawn";
# a page drawing its charts before its load event, as the dashboard did before it said
# so, counts once every chart holds Plotly's SVG).
DRAWN_PROBE = """
window.__drawn = new Promise((resolve) => {
  const painted = () => requestAnimationFrame(() => setTimeout(() => resolve(performance.now()), 0));
  const charts = () => [...document.querySelectorAll("[data-chart]")];
  addEventListener("load", () => {
    if (window.__chartsDrawn !== undefined || charts().every((c) => c.querySelector(".main-svg"))) {
      painted();
    } else {
      document.addEventListener("charts:drawn", painted, { once: true });
    }
  });
});
"""
TIMEOUT_MS = 60_000


def chromium_path() -> str:
    """Debian's Chromium, as the browser tests use (Playwright downloads no browser here)."""
    return shutil.which("chromium") or "/usr/bin/chromium"


def _first(page: Any, api_path: str, key: str) -> str | None:
    """``key`` of the first row the portal's API lists at ``api_path`` (None: no row)."""
    response = page.request.get(_origin(page.url) + api_path)
    if not response.ok:
        return None
    body = response.json()
    rows = body.get("results", body) if isinstance(body, dict) else body
    return str(rows[0][key]) if rows else None


def _origin(url: str) -> str:
    scheme, _, host = url.split("/", 3)[:3]
    return f"{scheme}//{host}"


def _job_detail(page: Any) -> str | None:
    job = _first(page, "/api/v1/jobs/?state=running&limit=1", "id") or _first(
        page, "/api/v1/jobs/?limit=1", "id"
    )
    return f"/jobs/{job}/" if job else None


def _line_page(page: Any) -> str | None:
    line = _first(page, "/api/v1/business-lines/?limit=1", "name")
    return f"/quotas/lines/{line}/" if line else None


def _node_page(page: Any) -> str | None:
    node = _first(page, "/api/v1/nodes/?limit=1", "name")
    return f"/oncall/nodes/{node}/" if node else None


PAGES.update({
    "home": "/",
    "jobs list": "/jobs/",
    "job detail": _job_detail,
    "submit": "/jobs/new/",
    "queues": "/queues/",
    "line page": _line_page,
    "request list": "/quotas/requests/",
    "dashboard": "/dashboard/",
    "oncall": "/oncall/",
    "node page": _node_page,
    "rack map": "/oncall/rack-map/",
})  # fmt: skip


@dataclass
class PageTimes:
    """One page's loads: the cold one, the warm ones (ms, navigation start to drawn)."""

    url: str
    status: int = 0
    cold_ms: float = 0.0
    warm_ms: list[float] = field(default_factory=list)
    error: str = ""

    def summary(self, baseline_ms: float) -> dict[str, Any]:
        median = statistics.median(self.warm_ms) if self.warm_ms else 0.0
        return {
            "url": self.url,
            "status": self.status,
            "cold_ms": round(self.cold_ms, 1),
            "median_ms": round(median, 1),
            "p95_ms": round(percentile(self.warm_ms, 95), 1),
            "max_ms": round(max(self.warm_ms, default=0.0), 1),
            "x_baseline": round(median / baseline_ms, 1) if baseline_ms else None,
            **({"error": self.error} if self.error else {}),
        }


def load_once(page: Any, url: str) -> tuple[int, float]:
    """Navigate ``page`` to ``url``; (HTTP status, ms from navigation start to drawn)."""
    response = page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
    status = response.status if response is not None else 0
    drawn = page.evaluate("window.__drawn")
    return status, float(drawn)


def sign_in(page: Any, base: str, username: str, password: str) -> float:
    """Sign in through the login form; ms from the form's submission (the POST's
    navigation start) to the home page drawn. Raises if the portal refuses."""
    page.goto(base + LOGIN[1], wait_until="load", timeout=TIMEOUT_MS)
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation(url=base + "/", wait_until="load", timeout=TIMEOUT_MS):
        page.click("button[type=submit]")
    return float(page.evaluate("window.__drawn"))


def measure(
    base: str, username: str, password: str, runs: int, *, only: list[str] | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:  # fmt: skip
    """Time the baseline, the login page, a sign-in and every page (``only``: a subset by
    name) on the portal at ``base``; returns the report ``bench_browser`` prints."""
    from playwright.sync_api import sync_playwright

    base = base.rstrip("/")
    load_before = os.getloadavg()
    wanted = [name for name in PAGES if only is None or name in only]
    results: dict[str, PageTimes] = {}
    sign_ins: list[float] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            new_context = _context_factory(browser)
            # signed out: the baseline and the login page, each cold then warm
            for name, path in (BASELINE, LOGIN):
                results[name] = _time_page(new_context, None, base, path, runs)
            # sign-ins, each in a fresh context (a person arriving)
            for _ in range(runs):
                with new_context() as ctx:
                    sign_ins.append(sign_in(ctx.new_page(), base, username, password))
            with new_context() as ctx:
                page = ctx.new_page()
                sign_in(page, base, username, password)
                for name in wanted:
                    path = PAGES[name]
                    url = path if isinstance(path, str) else path(page)
                    if url is None:
                        results[name] = PageTimes(url="", error="nothing of this kind here")
                        continue
                    log(f"{name}: {url}")
                    results[name] = _time_page(
                        new_context, ctx.storage_state(), base, url, runs, warm_page=page
                    )
        finally:
            browser.close()
    baseline = statistics.median(results["baseline"].warm_ms)
    sign_in_median = statistics.median(sign_ins)
    return {
        "url": base,
        "runs": runs,
        "user": username,
        "load_average": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },  # fmt: skip
        "cpus": os.cpu_count(),
        "pages": {name: t.summary(baseline) for name, t in results.items()},
        "sign_in": {
            "median_ms": round(sign_in_median, 1),
            "p95_ms": round(percentile(sign_ins, 95), 1),
            "max_ms": round(max(sign_ins), 1),
            "x_baseline": round(sign_in_median / baseline, 1) if baseline else None,
        },
    }


def _context_factory(browser: Any) -> Callable[..., Any]:
    def new_context(storage_state: Any = None) -> Any:
        ctx = browser.new_context(
            viewport={"width": 1280, "height": 900}, storage_state=storage_state
        )
        ctx.add_init_script(DRAWN_PROBE)
        return ctx

    return new_context


def _time_page(
    new_context: Callable[..., Any], state: Any, base: str, path: str, runs: int,
    warm_page: Any = None,
) -> PageTimes:  # fmt: skip
    """One cold load in a fresh context (signed in as ``state``), then ``runs`` warm loads
    in ``warm_page`` (or in a context kept for them)."""
    times = PageTimes(url=path)
    url = base + path
    try:
        with new_context(state) as cold:
            times.status, times.cold_ms = load_once(cold.new_page(), url)
        if warm_page is not None:
            for _ in range(runs):
                times.warm_ms.append(load_once(warm_page, url)[1])
        else:
            with new_context(state) as ctx:
                page = ctx.new_page()
                load_once(page, url)  # the cold load above filled another context's cache
                for _ in range(runs):
                    times.warm_ms.append(load_once(page, url)[1])
    except Exception as exc:  # noqa: BLE001 - reported per page; the others still run
        times.error = f"{type(exc).__name__}: {exc}"[:300]
    return times


# -- a portal of its own ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def database_url() -> str:
    """The URL of the database this process uses (a test database included)."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@contextmanager
def own_portal(timeout: float = 60.0) -> Iterator[str]:
    """The portal's web server (``portal.web``) on this process's database and Redis, on a
    free port, for as long as the block runs; yields its base URL."""
    from django.conf import settings

    port = _free_port()
    env = dict(os.environ)
    env.update(DATABASE_URL=database_url(), REDIS_URL=settings.REDIS_URL)
    env.setdefault("DJANGO_SETTINGS_MODULE", settings.SETTINGS_MODULE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "portal.web", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"],
        cwd=Path(settings.BASE_DIR), env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the portal's web server did not start on port {port}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
