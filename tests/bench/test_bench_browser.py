"""``manage.py bench_browser``: page times in Chromium, navigation start to drawn, as a
multiple of /healthz. Run end to end on a portal it starts itself (the test database's
demo), and its refusals before any browser starts."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.management import CommandError, call_command

from bench import browser
from bench.management.commands.bench_browser import report


def run(**options) -> str:
    out = io.StringIO()
    call_command("bench_browser", stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_it_times_the_pages_on_a_portal_it_starts_itself(demo):
    # Its own thread: Playwright's sync API refuses a thread with a running asyncio loop,
    # which an earlier test of the session may leave on the main thread.
    with ThreadPoolExecutor(1) as pool:
        out = pool.submit(run, runs=2, pages="home,dashboard,job detail", json=True).result()
    result = json.loads(out)
    pages = result["pages"]
    assert list(pages) == ["baseline", "login", "home", "job detail", "dashboard"]
    assert pages["job detail"]["error"] == "nothing of this kind here"  # the demo has no job
    for name in ("baseline", "login", "home", "dashboard"):
        row = pages[name]
        assert row["status"] == 200 and "error" not in row, (name, row)
        assert 0 < row["median_ms"] <= row["p95_ms"] <= row["max_ms"] and row["cold_ms"] > 0
    assert pages["baseline"]["x_baseline"] == 1.0
    # the ratio of the unrounded medians, rounded to 0.1 (5.2495 printed as 5.2 while
    # 537.8 / 102.4 rounds to 5.3): the printed medians are rounded to 0.1 ms too, so the
    # unrounded ratio lies between their extreme ratios (seen under load: 6.7 printed
    # against 6.646 from the printed medians)
    d, b = pages["dashboard"]["median_ms"], pages["baseline"]["median_ms"]
    low, high = (d - 0.05) / (b + 0.05), (d + 0.05) / (b - 0.05)
    assert low - 0.05 - 1e-9 <= pages["dashboard"]["x_baseline"] <= high + 0.05 + 1e-9
    assert (
        pages["dashboard"]["url"] == "/dashboard/" and pages["login"]["url"] == "/accounts/login/"
    )
    assert result["sign_in"]["median_ms"] > 0 and result["user"] == "admin"
    assert len(result["load_average"]["before"]) == 3 and result["cpus"] >= 1
    lines = report(result)
    assert any(line.startswith("dashboard ") and "/dashboard/" in line for line in lines)
    assert lines[-1].startswith("load average")


def test_every_page_of_the_issue_is_measured():
    assert list(browser.PAGES) == [
        "home", "jobs list", "job detail", "submit", "queues", "line page", "request list",
        "dashboard", "oncall", "node page", "rack map",
    ]  # fmt: skip
    assert browser.BASELINE == ("baseline", "/healthz")
    assert browser.LOGIN == ("login", "/accounts/login/")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"runs": 0}, "--runs must be between 1 and 200"),
        ({"pages": "home,nope"}, "unknown pages ['nope']"),
        ({"url": "http://127.0.0.1:9", "password": "", "user": "x"}, "no password"),
    ],
)
def test_bad_options_are_refused_before_any_browser_starts(monkeypatch, options, message):
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)
    monkeypatch.setattr("bench.management.commands.bench_browser.default_password", lambda: "")
    with pytest.raises(CommandError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run(**options)


@pytest.mark.django_db
def test_without_a_url_the_user_must_exist_here(monkeypatch):
    with pytest.raises(CommandError, match="no active user 'ghost' here"):
        run(user="ghost", password="x")


def test_without_a_url_or_a_database_it_says_what_to_start():
    """A real process on a database that is not there (nothing listens on port 1)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from django.conf import settings

    env = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "portal.settings",
           "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "DEMO_PASSWORD": "x"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "manage.py", "bench_browser", "--runs", "1"], cwd=Path(settings.BASE_DIR),
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "start `make run` or set DATABASE_URL, or give --url" in done.stderr
    assert "Traceback" not in done.stderr
