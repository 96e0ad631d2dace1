"""``manage.py bench_browser``: every page's time to drawn in Chromium, as a person sees it.

Against a running portal (``--url``, e.g. ``make run``'s live demo) or, without it, against
a web server this command starts on its own database (the demo ``seed_demo`` wrote; no
loop runs, so the pages stand still). Signs in through the login form as ``--user``
(default ``admin``: every page) with ``--password`` (default ``$DEMO_PASSWORD``, else the
password ``make run`` keeps in ``.devdata/demo_password``), then for each page prints
the cold load, the median and p95 of ``--runs`` warm loads, and the median as a multiple
of a trivial page of the same stack (``/healthz`` drawn in the same browser). How a page
counts as drawn: ``bench/browser.py``.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench import browser
from bench.cli import write_result


def default_password() -> str:
    """``$DEMO_PASSWORD``, else the one ``make run`` generated (``.devdata/demo_password``)."""
    if os.environ.get("DEMO_PASSWORD"):
        return os.environ["DEMO_PASSWORD"]
    stored = Path(settings.BASE_DIR) / ".devdata" / "demo_password"
    return stored.read_text().strip() if stored.exists() else ""


class Command(BaseCommand):
    help = (
        "Time every page in Chromium from navigation start to drawn (charts included): cold, "
        "median and p95 of --runs warm loads, and as a multiple of /healthz drawn by the same "
        "browser. --url: a running portal (default: a web server started here on this "
        "database's demo)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="", help="a running portal (default: start one)")
        parser.add_argument("--runs", type=int, default=10, help="warm loads per page")
        parser.add_argument("--user", default="admin", help="who signs in (admin sees all)")
        parser.add_argument("--password", default="", help="default: $DEMO_PASSWORD")
        parser.add_argument(
            "--pages", default="",
            help=f"comma-separated subset of: {', '.join(browser.PAGES)}",
        )  # fmt: skip
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **o) -> None:
        if not 1 <= o["runs"] <= 200:
            raise CommandError("--runs must be between 1 and 200")
        only = [p.strip() for p in o["pages"].split(",") if p.strip()] or None
        unknown = sorted(set(only or ()) - set(browser.PAGES))
        if unknown:
            raise CommandError(f"unknown pages {unknown}; known: {', '.join(browser.PAGES)}")
        password = o["password"] or default_password()
        if not password:
            raise CommandError("no password: give --password or set DEMO_PASSWORD")
        if not Path(browser.chromium_path()).exists():
            raise CommandError("Chromium is missing: apt-get install -y chromium")
        if not o["url"]:
            from django.contrib.auth import get_user_model
            from django.db import OperationalError

            try:
                known = get_user_model().objects.filter(username=o["user"], is_active=True)
                exists = known.exists()
            except OperationalError as exc:
                raise CommandError(
                    f"no database to start a portal on ({exc}); start `make run` or set "
                    "DATABASE_URL, or give --url"
                ) from exc
            if not exists:
                raise CommandError(f"no active user {o['user']!r} here (seed_demo first?)")
        portal = nullcontext(o["url"]) if o["url"] else browser.own_portal()
        try:
            with portal as base:
                result = browser.measure(
                    base, o["user"], password, o["runs"], only=only,
                    log=lambda line: self.stderr.write(line),
                )  # fmt: skip
        except RuntimeError as exc:
            raise CommandError(str(exc)) from exc
        write_result(self, result, o["json"], report, indent=2)


def report(result: dict) -> list[str]:
    """The human lines: one per page, then the sign-in and the machine's load."""
    lines = [
        f"{result['url']} as {result['user']}, {result['runs']} warm loads per page "
        f"(ms from navigation start to drawn; x = median / baseline median)",
        f"{'page':<14} {'url':<32} {'status':>6} {'cold':>8} {'median':>8} {'p95':>8} {'x':>6}",
    ]
    for name, row in result["pages"].items():
        if row.get("error"):
            lines.append(f"{name:<14} {row['url']:<32} {row['error']}")
            continue
        lines.append(
            f"{name:<14} {row['url'][:32]:<32} {row['status']:>6} {row['cold_ms']:>8} "
            f"{row['median_ms']:>8} {row['p95_ms']:>8} {row['x_baseline']:>6}"
        )
    s = result["sign_in"]
    lines.append(
        f"{'sign-in':<14} {'POST login -> home drawn':<32} {'':>6} {'':>8} {s['median_ms']:>8} "
        f"{s['p95_ms']:>8} {s['x_baseline']:>6}"
    )
    load = result["load_average"]
    lines.append(
        f"load average (1, 5, 15 min) before {load['before']}, after {load['after']} "
        f"on {result['cpus']} CPUs"
    )
    return lines
