"""Time server-side page renders at full scale (rolled back afterwards)."""

import json
import statistics
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.test import Client

from scheduling.bench_db import load_scale_dataset
from scheduling.cluster_lock import try_cluster_lock
from scheduling.loop import run_cycle

PAGES = ("/", "/jobs/", "/jobs/?state=pending", "/queues/", "/dashboard/", "/oncall/",
         "/oncall/rack-map/", "/api/v1/jobs/?state=pending", "/api/v1/queues/",
         "/api/v1/nodes/")  # fmt: skip


class _Rollback(Exception):
    pass


class Command(BaseCommand):
    help = (
        "Load the benchmark cluster (default 10,000 GPUs, 5,000 pending, 2,000 running) in a "
        "transaction, run one cycle and a metrics rollup, time each page's server-side render "
        "as an admin, then roll everything back. Stop the portal's loop first."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--gpus", type=int, default=10_000)
        parser.add_argument("--pending", type=int, default=5_000)
        parser.add_argument("--running", type=int, default=2_000)
        parser.add_argument("--runs", type=int, default=7)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o) -> None:
        if not (
            8 <= o["gpus"] <= 100_000 and 0 <= o["pending"] <= 100_000 and 1 <= o["runs"] <= 100
        ):
            raise CommandError("--gpus 8..100000, --pending 0..100000, --runs 1..100")
        from monitoring.rollup import rollup

        result: dict = {}
        try:
            with transaction.atomic():
                if not try_cluster_lock():
                    raise CommandError("the scheduling loop is running; stop the portal first")
                load_scale_dataset(o["gpus"], o["pending"], o["running"], seed=0)
                run_cycle()
                rollup()
                admin, _ = get_user_model().objects.get_or_create(
                    username="bench-admin", defaults={"is_superuser": True, "is_staff": True}
                )
                client = Client(HTTP_HOST="localhost")
                client.force_login(admin)
                for url in PAGES:
                    status = client.get(url).status_code  # warm-up
                    times = []
                    for _ in range(o["runs"]):
                        t0 = time.perf_counter()
                        client.get(url)
                        times.append((time.perf_counter() - t0) * 1000)
                    result[url] = {"status": status, "median_ms": round(statistics.median(times), 1),
                                   "max_ms": round(max(times), 1)}  # fmt: skip
                raise _Rollback
        except _Rollback:
            pass
        if o["json"]:
            self.stdout.write(json.dumps(result, sort_keys=True))
        else:
            for url, row in result.items():
                self.stdout.write(
                    f"{url:<32} {row['status']}  median {row['median_ms']:>7} ms  max {row['max_ms']:>7} ms"
                )
