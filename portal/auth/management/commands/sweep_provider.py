"""``manage.py sweep_provider [--dry-run]``: one provider sweep now.

The beat entry ``provider-sweep`` runs the same sweep every ``OIDC_SWEEP_SECONDS``
(portal/auth/provider_sweep.py says what it does): each active OpenID Connect account's
refresh token is used at the provider: a person it refuses, or whose groups (its user info)
no longer let them in, is deactivated; the others get the role and lines their groups give
now. This prints the counts, whose role or lines it changed, whom it deactivated, whose
groups it could not read, and the accounts it cannot check (no stored refresh token: signed
in before the sweep, or at a provider that gives none). With ``--dry-run``, whom it would
deactivate or take a role or a line from, changing nobody (the tokens are used all the
same). Exit status 1 when the provider could not be asked or the bound
(``OIDC_SWEEP_MAX_SHARE``) held.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from portal.auth import provider_sweep


class Command(BaseCommand):
    help = (
        "Ask the OpenID Connect provider about its accounts now: deactivate whom it refuses, "
        "apply the groups of the others."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="say whom it would deactivate or demote; change nobody",
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
        for name in report.no_user_info:
            self.stdout.write(f"groups not applied, the user info gave no claims: {name}")
        for name in report.other_account:
            self.stdout.write(f"left as is, the user info names another account: {name}")
        if report.held or dry_run:
            for name in report.would_deactivate:
                self.stdout.write(f"would deactivate: {name}")
            for name in report.would_demote:
                self.stdout.write(f"would take a role or a line from: {name}")
        if report.held:
            self.stderr.write(f"nobody deactivated, no groups applied: {report.held}")
            raise SystemExit(1)
        if dry_run:
            self.stdout.write(
                "dry run: nobody was deactivated and no groups were applied (other group "
                "changes are not listed)"
            )
            return
        for label, names in (
            ("role or lines changed", report.changed),
            ("deactivated", report.deactivated),
        ):
            self.stdout.write(f"{label}: {', '.join(names) if names else 'none'}")
