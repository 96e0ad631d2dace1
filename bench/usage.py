"""``manage.py bench_usage``: how long the usage report (``quotas.usage.build_usage_report``)
takes over a year of recorded runs, against a trivial query of the same database.

Loads ``runs`` synthetic ``JobRun`` rows spread over the twelve months before the cluster's
now (lengths exponential around 2 h, at most 14 days; sizes 1 to 64 GPUs; owners among
500 people, made if missing; every queue), in a transaction that is rolled back at the
end, then times the report as an admin for the current month, six months ago and eleven
months ago (median of ``repeat``). Needs a seeded database (``seed_demo``).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, transaction

from core import clock
from quotas.models import Queue
from quotas.usage import build_usage_report
from quotas.usage_views import month_before, month_bounds
from scheduling.models import JobRun

PEOPLE = 500
SIZES = (1, 2, 4, 8, 8, 16, 64)


class _Rollback(Exception):
    pass


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1)


def _load(runs: int, seed: int) -> None:
    users = get_user_model()
    people = list(users.objects.all()[:PEOPLE])
    people += users.objects.bulk_create(
        users(username=f"bench-usage-{i:03d}") for i in range(PEOPLE - len(people))
    )
    queues = list(Queue.objects.all())
    if not queues:
        raise ValueError("no queues here: seed_demo first")
    rng, now = random.Random(seed), clock.now()
    year_ago = now - timedelta(days=365)

    def row() -> JobRun:
        start = year_ago + timedelta(seconds=rng.uniform(0, 365 * 86400))
        end = min(now, start + timedelta(seconds=min(rng.expovariate(1 / 7200), 14 * 86400)))
        return JobRun(owner=rng.choice(people), queue=rng.choice(queues), gpus=rng.choice(SIZES),
                      gpu_model="H100", started_at=start, ended_at=end, outcome="succeeded")  # fmt: skip

    for first in range(0, runs, 5000):
        JobRun.objects.bulk_create(row() for _ in range(min(5000, runs - first)))
    with connection.cursor() as cursor:  # as autovacuum would have, for the planner
        cursor.execute(f'ANALYZE "{JobRun._meta.db_table}"')


def measure(runs: int, repeat: int, seed: int = 0) -> dict[str, Any]:
    """Load, time, roll back; the figures as one dict."""
    admin = get_user_model().objects.filter(is_superuser=True).first()
    if admin is None:
        raise ValueError("no admin here: seed_demo first")
    result: dict[str, Any] = {"runs": runs, "repeat": repeat, "months": {}}
    try:
        with transaction.atomic():
            t0 = time.perf_counter()
            _load(runs, seed)
            result["load_s"] = round(time.perf_counter() - t0, 1)
            now = clock.now()
            result["baseline_ms"] = _median_ms(lambda: list(Queue.objects.all()), repeat)
            first = now.date().replace(day=1)
            for back in (0, 6, 11):
                month = first
                for _ in range(back):
                    month = month_before(month)
                start, end = month_bounds(month)
                report = build_usage_report(admin, start, end, now)
                ms = _median_ms(lambda s=start, e=end: build_usage_report(admin, s, e, now), repeat)
                result["months"][month.strftime("%Y-%m")] = {
                    "median_ms": ms, "runs_in_month": report.total.runs,
                    "people": len(report.people),
                    "over_baseline": round(ms / max(result["baseline_ms"], 0.001), 1),
                }  # fmt: skip
            raise _Rollback
    except _Rollback:
        pass
    return result


def human(result: dict[str, Any]) -> Iterable[str]:
    yield (f"{result['runs']:,} runs loaded in {result['load_s']} s (rolled back); "
           f"baseline (the queues, one query): {result['baseline_ms']} ms")  # fmt: skip
    for month, m in result["months"].items():
        yield (f"{month}: {m['median_ms']} ms median of {result['repeat']} "
               f"({m['runs_in_month']:,} runs ended in it, {m['people']} people; "
               f"{m['over_baseline']}x the baseline)")  # fmt: skip
