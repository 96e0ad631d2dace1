"""``manage.py bench_pages``: server-side render times of the pages at full scale (rolled back).

Loads the benchmark cluster (``bench.scale.scale_dataset``), runs one cycle and a
metrics rollup so the pages have something to show, then times each page with
Django's test client as an admin. Everything is rolled back afterwards.
"""

from __future__ import annotations

import statistics
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test import Client

from bench.cli import add_output_arguments, add_scale_arguments, write_result
from bench.scale import LoopRunning, scale_dataset
from monitoring.rollup import rollup
from scheduling.cycle import run_cycle

PAGES = ("/", "/jobs/", "/jobs/?state=pending", "/queues/", "/dashboard/", "/oncall/",
         "/oncall/rack-map/", "/api/v1/jobs/?state=pending", "/api/v1/queues/",
         "/api/v1/nodes/", "/api/v1/jobs.csv")  # fmt: skip


def fetch(client: Client, url: str) -> int:
    """GET ``url`` and read its whole body (a streamed export is built as it is read)."""
    response = client.get(url)
    if response.streaming:
        for _ in response.streaming_content:
            pass
    return response.status_code


def time_pages(runs: int) -> dict[str, dict]:
    """Each page: its status (after a warm-up request), median and max of ``runs`` renders."""
    admin, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_superuser": True, "is_staff": True}
    )
    client = Client(HTTP_HOST="localhost")
    client.force_login(admin)
    result = {}
    for url in PAGES:
        status = fetch(client, url)  # warm-up
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            fetch(client, url)
            times.append((time.perf_counter() - t0) * 1000)
        result[url] = {"status": status, "median_ms": round(statistics.median(times), 1),
                       "max_ms": round(max(times), 1)}  # fmt: skip
    return result


class Command(BaseCommand):
    help = (
        "Load the benchmark cluster (default 10,000 GPUs, 5,000 pending, 2,000 running) in a "
        "transaction, run one cycle and a metrics rollup, time each page's server-side render "
        "as an admin, then roll everything back. Stop the portal's loop first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_scale_arguments(parser)
        add_output_arguments(parser)

    def handle(self, *args, **o) -> None:
        if not (
            8 <= o["gpus"] <= 100_000 and 0 <= o["pending"] <= 100_000 and 1 <= o["runs"] <= 100
        ):
            raise CommandError("--gpus 8..100000, --pending 0..100000, --runs 1..100")
        try:
            with scale_dataset(o["gpus"], o["pending"], o["running"], seed=0):
                run_cycle()
                rollup()
                result = time_pages(o["runs"])
        except LoopRunning as exc:
            raise CommandError(str(exc)) from exc
        write_result(
            self, result, o["json"],
            lambda r: (
                f"{url:<32} {row['status']}  median {row['median_ms']:>7} ms  "
                f"max {row['max_ms']:>7} ms"
                for url, row in r.items()
            ),
            sort_keys=True,
        )  # fmt: skip
