"""``manage.py bench_metrics``: /metrics time as the history grows (issue #17).

Adds scheduling-cycle rows in steps (default 1k, 10k, 100k, 1M: 1M is ~58 days of
5-second cycles), times GET /metrics (the bearer-token scrape Prometheus does) at each
step and prints median and p95. ``--finished-jobs`` grows the job history (finished jobs,
kept forever) to the same sizes at each step too. Everything it writes is rolled back at the end, so it
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
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.test import Client
from django.test.utils import override_settings
from django.utils import timezone

from quotas.models import Queue
from scheduling.models import Job, SchedulingCycle

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


def add_finished_jobs(total_wanted: int) -> int:
    """Grow the job table to ``total_wanted`` rows with finished jobs (succeeded, failed,
    cancelled), copies of one made for the purpose, in one INSERT ... SELECT."""
    missing = total_wanted - Job.objects.count()
    if missing <= 0:
        return 0
    queue = Queue.objects.order_by("pk").first()
    owner = get_user_model().objects.order_by("pk").first()
    if queue is None or owner is None:
        raise CommandError("--finished-jobs needs a queue and a user (manage.py seed_demo)")
    at = timezone.now()
    seed = Job.objects.create(
        name="bench-finished", owner=owner, queue=queue, tier=queue.tier, gpus=8,
        gpus_per_node=8, state=Job.State.SUCCEEDED, submitted_at=at, started_at=at, finished_at=at,
    )  # fmt: skip
    columns = [f.column for f in Job._meta.concrete_fields if f.column != "id"]
    values = [
        "(CASE WHEN g %% 10 = 0 THEN 'failed' WHEN g %% 7 = 0 THEN 'cancelled'"
        " ELSE 'succeeded' END)"
        if column == "state"
        else column
        for column in columns
    ]
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {Job._meta.db_table} ({', '.join(columns)})"
            f" SELECT {', '.join(values)} FROM {Job._meta.db_table}, generate_series(1, %s) g"
            " WHERE id = %s",
            [missing - 1, seed.pk],
        )
        cur.execute(f"ANALYZE {Job._meta.db_table}")
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
        parser.add_argument(
            "--finished-jobs", action="store_true",
            help="also grow the finished-job history to each size (jobs are never pruned)",
        )  # fmt: skip

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
                    if o["finished_jobs"]:
                        add_finished_jobs(size)
                    with connection.cursor() as cur:
                        cur.execute(f"ANALYZE {SchedulingCycle._meta.db_table}")
                    times = sorted(time_scrapes(client, o["runs"]))
                    row = {
                        "cycle_rows": SchedulingCycle.objects.count(),
                        "job_rows": Job.objects.count(),
                        "median_ms": round(statistics.median(times), 2),
                        "p95_ms": round(times[max(0, int(len(times) * 0.95) - 1)], 2),
                        "runs": len(times),
                    }
                    results.append(row)
                    if not o["json"]:
                        self.stdout.write(
                            f"{row['cycle_rows']:>9} cycle rows, {row['job_rows']:>9} jobs:"
                            f" /metrics median "
                            f"{row['median_ms']:.1f} ms, p95 {row['p95_ms']:.1f} ms "
                            f"({row['runs']} scrapes)"
                        )
                raise Rollback
        except Rollback:
            pass
        if o["json"]:
            self.stdout.write(json.dumps(results))
