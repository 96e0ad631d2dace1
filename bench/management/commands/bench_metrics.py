"""``manage.py bench_metrics``: /metrics time as the history grows (issue #17).

Adds scheduling-cycle rows in steps (default 1k, 10k, 100k, 1M: 1M is ~58 days of
5-second cycles), times GET /metrics (the bearer-token scrape Prometheus does) at each
step and prints median and p95. Everything it writes is rolled back at the end, so it
may run against a dev database. ``--json`` prints one object per step. The scrapes are
in-process (Django's test client, the whole middleware stack, no HTTP server), as a
request that came over HTTPS from the test client's host, which the command allows for
its own run: so it works under ``make run``'s and production settings alike.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection, transaction
from django.test import Client
from django.test.utils import override_settings

from scheduling.models import SchedulingCycle

TOKEN = "bench-metrics-" + "b" * 32


class Rollback(Exception):
    """Undo every row the bench wrote."""


def add_cycles(total_wanted: int) -> int:
    """Grow the cycle table to ``total_wanted`` rows (one INSERT ... SELECT)."""
    missing = total_wanted - SchedulingCycle.objects.count()
    if missing <= 0:
        return 0
    with connection.cursor() as cur:
        cur.execute(
            f"""INSERT INTO {SchedulingCycle._meta.db_table}
                (kind, started_at, cluster_time, duration_ms, observe_ms, plan_ms, apply_ms,
                 starts, preemptions, finished, failed, requeued, pending, pending_by_reason,
                 violations, errors, drift)
                SELECT CASE WHEN i %% 6 = 0 THEN 'sweep' ELSE 'cycle' END,
                       now() - make_interval(secs => i * 5), now() - make_interval(secs => i * 5),
                       50 + (i %% 900), 10, 20, 20, i %% 3, (i %% 7 = 0)::int, 1, 0, 0, 40,
                       '{{"PRIORITY": 30, "QUOTA_EXCEEDED": 10}}', '[]', '[]', '[]'
                FROM generate_series(1, %s) AS i""",
            [missing],
        )
    return missing


def time_scrapes(client: Client, runs: int) -> list[float]:
    """``runs`` timed scrapes (ms) after one to warm up."""
    client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", secure=True)  # warm
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", secure=True)
        times.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200, response.status_code
    return times


class Command(BaseCommand):
    help = "Time /metrics with 1k to 1M scheduling-cycle rows (rolled back after)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sizes", default="1000,10000,100000,1000000")
        parser.add_argument("--runs", type=int, default=30)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o) -> None:
        sizes = [int(s) for s in o["sizes"].split(",")]
        os.environ["METRICS_TOKEN"] = TOKEN
        client = Client()
        results = []
        # The test client's host name, allowed for this command's own requests only.
        hosts = override_settings(ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "testserver"])
        try:
            with hosts, transaction.atomic():
                for size in sizes:
                    add_cycles(size)
                    with connection.cursor() as cur:
                        cur.execute(f"ANALYZE {SchedulingCycle._meta.db_table}")
                    times = sorted(time_scrapes(client, o["runs"]))
                    row = {
                        "cycle_rows": SchedulingCycle.objects.count(),
                        "median_ms": round(statistics.median(times), 2),
                        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 2),
                        "runs": len(times),
                    }
                    results.append(row)
                    if not o["json"]:
                        self.stdout.write(
                            f"{row['cycle_rows']:>9} cycle rows: /metrics median "
                            f"{row['median_ms']:.1f} ms, p95 {row['p95_ms']:.1f} ms "
                            f"({row['runs']} scrapes)"
                        )
                raise Rollback
        except Rollback:
            pass
        if o["json"]:
            self.stdout.write(json.dumps(results))
