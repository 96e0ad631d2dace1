"""``manage.py prune [--dry-run]``: delete history older than its retention period.

The beat entry ``retention`` runs the same prune every 15 minutes (portal/retention.py
says what is kept and for how long); this command is for a first prune, or to see what
the next one will delete.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from portal import retention


class Command(BaseCommand):
    help = "Delete cycles, resolved alerts and audit records older than their retention period."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="say what would be deleted; delete nothing"
        )
        parser.add_argument(
            "--batch-size", type=int, default=retention.BATCH_SIZE,
            help=f"rows per delete statement (default {retention.BATCH_SIZE})",
        )  # fmt: skip

    def handle(self, *args, dry_run: bool, batch_size: int, **options) -> None:
        if batch_size < 1:
            self.stderr.write("--batch-size must be at least 1")
            raise SystemExit(2)
        if dry_run:
            findings, verb = retention.plan(), "would be deleted"
        else:
            findings, verb = retention.prune(batch_size=batch_size), "deleted"
        for finding in findings:
            self.stdout.write(finding.describe(verb))
        self.stdout.write(retention.KEPT_WITH_THEIR_JOB)
        if dry_run:
            self.stdout.write("dry run: nothing was deleted")
