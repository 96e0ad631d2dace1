"""``manage.py sync_directory [--dry-run]``: one directory sweep now.

The beat entry ``directory-sweep`` runs the same sweep every ``LDAP_SWEEP_SECONDS``
(portal/auth/sweep.py says what it does); this is for operators: after changing the LDAP
settings, see with ``--dry-run`` whom the directory no longer has before anything is
written. Exit status 1 when the sweep changed nothing because the directory could not be
asked or the deactivation bound (``LDAP_SWEEP_MAX_SHARE``) held it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from portal.auth import sweep


class Command(BaseCommand):
    help = "Follow the LDAP directory now: deactivate people it no longer has, sync groups."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="say what would change; change nothing"
        )

    def handle(self, *args: Any, dry_run: bool, **options: Any) -> None:
        report = sweep.sweep(dry_run=dry_run)
        if not report.enabled:
            self.stdout.write("LDAP is not configured (LDAP_SERVER_URI): nothing to sweep")
            return
        self.stdout.write(f"directory accounts checked: {report.checked}")
        for name in report.ambiguous:
            self.stdout.write(f"left as is (several directory entries): {name}")
        if report.held or dry_run:
            for line in report.would_deactivate:
                self.stdout.write(f"would deactivate: {line}")
            for name in report.would_demote:
                self.stdout.write(f"would take a role or a line from: {name}")
        if report.held:
            self.stderr.write(f"nothing changed: {report.held}")
            raise SystemExit(1)
        if dry_run:
            self.stdout.write("dry run: nothing was changed (other group changes are not listed)")
            return
        for label, names in (
            ("marked as directory accounts", report.adopted),
            ("role or lines changed", report.changed),
            ("deactivated", report.deactivated),
        ):
            self.stdout.write(f"{label}: {', '.join(names) if names else 'none'}")
