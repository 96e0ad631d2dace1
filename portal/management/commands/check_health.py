"""``manage.py check_health [CHECK ...]``: run /readyz's checks here; exit 1 if one fails.

For container healthchecks of processes that serve no HTTP: docker-compose.yml's
``beat`` runs ``check_health beat`` (the health sweep, a beat entry of its own, ran
recently: beat is sending its schedule and a worker is running it). Without arguments
every check of ``portal/health.py`` runs, as ``/readyz`` does.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from portal.health import CHECKS


class Command(BaseCommand):
    help = "Run the readiness checks of /readyz (all, or those named); exit 1 if one fails."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("checks", nargs="*", metavar="CHECK", help=", ".join(CHECKS))

    def handle(self, *args, checks: list[str], **options) -> None:
        unknown = [name for name in checks if name not in CHECKS]
        if unknown:
            self.stderr.write(f"unknown check(s): {', '.join(unknown)}; known: {', '.join(CHECKS)}")
            raise SystemExit(2)
        failed = 0
        for name in checks or list(CHECKS):
            try:
                self.stdout.write(f"{name}: ok: {CHECKS[name]()}")
            except Exception as exc:  # a failing dependency is the finding, not a crash
                failed += 1
                self.stdout.write(f"{name}: FAILED: {str(exc)[:300] or type(exc).__name__}")
        if failed:
            raise SystemExit(1)
