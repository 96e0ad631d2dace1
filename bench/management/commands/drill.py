"""``manage.py drill --http --seconds N``: the concurrency drill (#16) through a running
portal's API for as long as you like, then the exactly-once check (``bench.drill``).

Point it at a throw-away stack seeded with the demo (``seed_demo``): it submits, cancels,
cordons, drains, asks for and decides quota on the database this command shares with the
portal at ``--url``, and runs cycles here. Exit status 1 when anything failed; the bounded
run is ``tests/concurrency/test_http_drill.py`` (CI).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.cli import add_output_arguments, api_token, write_result
from bench.drill import HttpDrill, verify

PEOPLE = ("admin", "oncall", "lead", "researcher", "researcher2")


class Command(BaseCommand):
    help = (
        "The concurrency drill through a running portal's API (--http): cycles back to back "
        "here while researchers, a lead, an admin and on-call act at once; then checks that "
        "nothing failed and every accepted action was applied exactly once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--http", action="store_true",
                            help="act through the web server at --url (required)")  # fmt: skip
        parser.add_argument("--seconds", type=float, default=120)
        parser.add_argument("--seed", type=int, default=16)
        add_output_arguments(parser, url=True)

    def handle(self, *args, **options) -> None:
        if not options["http"]:
            raise CommandError(
                "only --http is here; the drill of the services in one process is "
                "`DRILL_SECONDS=N pytest tests/concurrency/test_drill.py`"
            )
        from scheduling.models import Node

        tokens = {name: api_token(name) for name in PEOPLE}
        admin = get_user_model().objects.get(username="admin")
        nodes = sorted(Node.objects.values_list("name", flat=True))
        if not nodes:
            raise CommandError("no nodes here (seed_demo first?)")
        drill = HttpDrill(options["url"], tokens, nodes, options["seconds"], options["seed"])
        ledger = drill.run(admin)
        problems = verify(ledger, admin)
        result = {"seconds": options["seconds"], **ledger.summary(), "problems": problems}
        write_result(self, result, options["json"], _human)
        if problems:
            raise CommandError(f"{len(problems)} problems")


def _human(result: dict) -> list[str]:
    lines = [f"drill {result['tag']}: {result['seconds']:.0f} s through the API"]
    lines.append("accepted: " + ", ".join(f"{k} {v}" for k, v in result["accepted"].items()))
    lines.append("refused:  " + ", ".join(f"{k} {v}" for k, v in result["refused"].items()))
    lines.extend(f"PROBLEM {p}" for p in result["problems"][:50])
    lines.append("every accepted action applied once; check_cluster clean"
                 if not result["problems"] else f"{len(result['problems'])} problems")  # fmt: skip
    return lines
