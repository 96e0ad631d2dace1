"""``manage.py replay``: a thin wrapper over the Django-free ``replay`` package (no database).

The same options as ``python -m replay`` (``replay.cli``); docs/replay.md.
"""

from django.core.management.base import BaseCommand, CommandError

from replay.cli import CliError, add_arguments, execute


class Command(BaseCommand):
    help = (
        "Replay a GPU-cluster job trace (philly, itp, alibaba or a CSV path) in virtual time "
        "through the scheduling engine and the simulator core, and report the metrics."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser) -> None:
        add_arguments(parser)

    def handle(self, *args, **options) -> None:
        try:
            execute(options, self.stdout.write, self.stderr.write)
        except CliError as exc:
            raise CommandError(str(exc)) from exc
