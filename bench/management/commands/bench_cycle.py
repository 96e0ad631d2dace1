"""``manage.py bench_cycle``: time scheduling cycles at scale (docs/benchmarks.md).

The engine alone (``bench.engine.run_bench``: ``plan`` + ``check_plan`` on the random
benchmark snapshot, no database), or with ``--with-db`` full ``run_cycle`` calls
through the database on the same cluster loaded as rows and rolled back afterwards
(``bench.scale.run_db_bench``): each cycle's phases, and ``plan()`` alone on the very
snapshot the cycle planned on, so that ``cycle_over_plan_alone`` compares the two in
the same minute of a shared machine.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.cli import add_output_arguments, add_scale_arguments, write_result
from bench.engine import run_bench
from bench.scale import LoopRunning, run_db_bench

LIMIT = 200_000


class Command(BaseCommand):
    help = (
        "Time scheduling cycles at scale: the engine alone (plan + check_plan on a random "
        "snapshot), or with --with-db a full cycle through the database (rolled back after)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_scale_arguments(parser)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--with-db", action="store_true")
        parser.add_argument(
            "--dependents", type=int, default=0,
            help="with --with-db: that many pending jobs are an array waiting for a whole "
            "array of as many others (at most 1,000); then one more cycle is timed after a "
            "task of the first is cancelled, which cancels them all (cascade)",
        )  # fmt: skip
        add_output_arguments(parser)

    def handle(self, *args, **o) -> None:
        for name in ("gpus", "pending", "running", "runs"):
            if not 0 <= o[name] <= LIMIT or (name in ("gpus", "runs") and o[name] < 1):
                raise CommandError(f"--{name} out of range")
        size = (o["gpus"], o["pending"], o["running"], o["runs"], o["seed"])
        if not 0 <= o["dependents"] <= 1000 or (o["dependents"] and not o["with_db"]):
            raise CommandError("--dependents is 0 to 1,000, with --with-db")
        if o["with_db"]:
            try:
                result = run_db_bench(*size, dependents=o["dependents"])
            except LoopRunning as exc:
                raise CommandError(str(exc)) from exc
        else:
            result = run_bench(*size)
        write_result(self, result, o["json"], human_lines, sort_keys=True)


def human_lines(result: dict) -> Iterator[str]:
    """One line per figure (sorted), then the cycle's phases (``--with-db``) as a table."""
    wall, cpu = result.get("phases_median_ms"), result.get("phases_cpu_median_ms")
    for key, value in sorted(result.items()):
        if key not in ("phases_median_ms", "phases_cpu_median_ms"):
            yield f"{key:>26}: {value}"
    if wall and cpu:
        yield "phases (median of the steady cycles): wall ms / CPU ms"
        for name, ms in wall.items():
            if ms or cpu[name]:
                yield f"{name:>26}: {ms:8.1f} / {cpu[name]:8.1f}"
