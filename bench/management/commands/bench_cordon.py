"""``manage.py bench_cordon``: how long an on-call cordon waits for a running cycle
(docs/benchmarks.md, "Session 40"). ``bench.cordon`` measures; see its docstring.

It cordons and uncordons real nodes of the configured database as ``oncall``: run it on
a seeded benchmark database with no loop running, never on a portal people use.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.cli import add_output_arguments, write_result
from bench.cordon import human, measure


class Command(BaseCommand):
    help = (
        "Time on-call cordons (scheduling.nodes.services.cordon_node, from a second process) "
        "with no cycle running, then while this process runs scheduling cycles back to "
        "back; print median / p95 / max of each, which cycle lock the waits met, and how "
        "long the cycles hold node locks. Needs a seeded cluster and no running loop."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cordons", type=int, default=100, help="cordons in each run")
        parser.add_argument(
            "--pause", type=float, default=0.5, help="longest random pause between cordons (s)"
        )
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--no-workload", action="store_true", help="no demo arrivals before each cycle"
        )
        add_output_arguments(parser)

    def handle(self, *args, **o) -> None:
        if not 1 <= o["cordons"] <= 1000 or not 0 <= o["pause"] <= 60:
            raise CommandError("--cordons 1..1000, --pause 0..60")
        try:
            result = measure(o["cordons"], o["pause"], o["seed"], not o["no_workload"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        write_result(self, result, o["json"], human)
