"""``manage.py bench_usage``: the usage report over a year of runs (``bench.usage``)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.cli import add_output_arguments, write_result
from bench.usage import human, measure


class Command(BaseCommand):
    help = (
        "Load --runs synthetic recorded runs over the last 12 months (rolled back at the "
        "end), then time the usage report for this month, 6 and 11 months ago, against a "
        "one-query baseline. Needs a seeded database."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=1_000_000, help="runs in the year")
        parser.add_argument("--repeat", type=int, default=7, help="timings per month")
        parser.add_argument("--seed", type=int, default=0)
        add_output_arguments(parser)

    def handle(self, *args, **o) -> None:
        if not 1 <= o["runs"] <= 10_000_000 or not 1 <= o["repeat"] <= 100:
            raise CommandError("--runs 1..10000000, --repeat 1..100")
        try:
            result = measure(o["runs"], o["repeat"], o["seed"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        write_result(self, result, o["json"], human)
