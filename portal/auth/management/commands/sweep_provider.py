"""``manage.py sweep_provider [--dry-run]``: one provider sweep now.

The beat entry ``provider-sweep`` runs the same sweep every ``OIDC_SWEEP_SECONDS``
(portal/auth/provider_sweep.py says what it does): each active OpenID Connect account's
refresh token is used at the provider, and a person it refuses is deactivated. This prints
the counts, whom it deactivated, and the accounts it cannot check (no stored refresh token:
signed in before the sweep, or at a provider that gives none). With ``--dry-run``, whom the
provider refuses, deactivating nobody (the tokens are used all the same). Exit status 1
when the provider could not be asked or the bound (``OIDC_SWEEP_MAX_SHARE``) held.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from portal.auth import provider_sweep


class Command(BaseCommand):
    help = "Ask the OpenID Connect provider about its accounts now: deactivate whom it refuses."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="say whom it would deactivate; deactivate nobody"
        )

    def handle(self, *args: Any, dry_run: bool, **options: Any) -> None:
        report = provider_sweep.sweep(dry_run=dry_run)
        if not report.enabled:
            self.stdout.write(
                "OpenID Connect is not configured (OIDC_ISSUER) or OIDC_SWEEP is off: nothing "
                "to sweep"
            )
            return
        self.stdout.write(f"accounts checked at the provider: {report.checked}")
        self.stdout.write(f"still there: {report.still_there} ({report.rotated} token(s) rotated)")
        if report.not_answered:
            self.stdout.write(f"not checked (the provider did not answer): {report.not_answered}")
        for label, names in (
            ("not swept, no refresh token stored (until their next sign-in)", report.without_token),
            ("not swept, refresh token unreadable (SECRET_KEY changed)", report.unreadable),
        ):
            self.stdout.write(
                f"{label}: {len(names)}" + (f" ({', '.join(names)})" if names else "")
            )
        for name in report.uncertain:
            self.stdout.write(
                f"left as is, token refused after a request that went unanswered: {name}"
            )
        if report.held or dry_run:
            for name in report.would_deactivate:
                self.stdout.write(f"would deactivate: {name}")
        if report.held:
            self.stderr.write(f"nobody deactivated: {report.held}")
            raise SystemExit(1)
        if dry_run:
            self.stdout.write("dry run: nobody was deactivated")
            return
        names = report.deactivated
        self.stdout.write(f"deactivated: {', '.join(names) if names else 'none'}")
