"""The provider sweep: people deleted or disabled at the OpenID Connect provider lose the
portal account without opening a page.

The session check (``portal.auth.oidc.SessionCheck``) asks the provider about a person only
at their page loads: someone who opens no page again kept the account and their API tokens.
A standard provider offers no lookup of other people, but it does answer for each person
whose refresh token the portal holds: a sign-in asks for ``offline_access``
(``OIDC_SWEEP``, on by default) and keeps the refresh token the provider gives, encrypted
(``portal.auth.refresh_tokens``). The sweep (beat entry ``provider-sweep``, every
``OIDC_SWEEP_SECONDS``; ``manage.py sweep_provider`` runs it once) uses each active
provider account's token at the provider's token endpoint (``grant_type=refresh_token``,
the client's own credentials, as the sign-in's token request) and:

- the provider refuses it with ``invalid_grant`` (the person deleted or disabled there,
  their grant or offline session revoked, the token expired): the person is offboarded
  (``core.people.offboard``, as by the directory sweep): inactive, researcher, no mapped
  line, API tokens revoked, sessions ended, live connections closed, one
  ``identity.offboard`` record; their jobs keep running. The refused token is dropped;
- the provider accepts it: nothing changes but the token, when the provider rotated it
  (the new one is stored at once, under the account's row lock: the old one is refused
  from now on);
- the provider cannot be reached, times out, or answers anything else (a 5xx, a refused
  client: ``invalid_client`` is the portal's configuration, not the person): nothing
  changes for that person (a warning in the log); the next run asks again. After the first
  account the provider did not answer, the sweep asks it about nobody else this run. A
  request that may have reached it all the same (a timeout waiting for the answer, a 5xx)
  may have used and rotated the token, after which the provider refuses the one the portal
  kept: a refusal of that token deactivates nobody (the token is dropped, the person listed
  as ``uncertain`` and left as is until their next sign-in stores a new one).

Not swept: local accounts (a usable password), directory accounts, inactive accounts, and
provider accounts with no stored refresh token (signed in before the sweep, or at a
provider that gives none, or a token sealed under a ``SECRET_KEY`` the portal no longer
has): these are listed (``without_token``, ``unreadable``) and stay as before (the session
check at their page loads) until their next sign-in stores a token.

If the provider refuses more than ``OIDC_SWEEP_MAX_SHARE`` of the tokens asked about in one
run (at least one is always allowed), the sweep deactivates nobody and logs an error: a
provider that lost its token store, or whose tokens were all revoked at once, must not
lock everyone out. ``manage.py sweep_provider --dry-run`` says whom it would deactivate
(the tokens are used all the same: a provider that rotates them rotates them).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import requests
from django.conf import settings
from django.db import transaction

from core.people import offboard
from monitoring.models import Alert
from monitoring.services import raise_alert, resolve_cleared
from portal.auth import oidc, refresh_tokens
from portal.auth.models import ProviderAccount
from portal.auth.sync import managed_lines

logger = logging.getLogger("portal.auth.provider_sweep")

REFUSED = "the provider refused the refresh token (invalid_grant)"
# The subjects of the ``provider_sweep`` alert: why a sweep did not run through.
UNAVAILABLE = "provider unavailable"
BOUND = "sweep bound"


@dataclass
class Report:
    """What a sweep did: ``held`` says why it deactivated nobody (empty when it ran)."""

    enabled: bool = True
    held: str = ""
    checked: int = 0  # accounts the provider answered for
    still_there: int = 0
    rotated: int = 0
    not_answered: int = 0
    deactivated: list[str] = field(default_factory=list)
    would_deactivate: list[str] = field(default_factory=list)
    without_token: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)


class NotAnswered(Exception):
    """The provider did not answer a token request (no answer, a timeout, a 5xx or any
    answer that is neither a refusal of the token nor new tokens). ``maybe_used``: whether
    it may have used (and rotated) the token all the same: not when it could not be
    reached, or refused the portal's client (a 4xx other than ``invalid_grant``)."""

    def __init__(self, message: str, *, maybe_used: bool) -> None:
        super().__init__(message)
        self.maybe_used = maybe_used


class Refused(Exception):
    """The provider refused the refresh token (``invalid_grant``): the description it gave."""


def enabled() -> bool:
    """Whether OpenID Connect is on and the sweep with it (``OIDC_SWEEP``)."""
    return oidc.enabled() and bool(getattr(settings, "OIDC_SWEEP", False))


def _refresh(token_endpoint: str, refresh_token: str) -> str | None:
    """Use ``refresh_token`` at the provider: the refresh token it answers (None: it kept the
    one it had). ``Refused`` when it refuses the token; ``NotAnswered`` otherwise."""
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    auth = None
    if settings.OIDC_TOKEN_USE_BASIC_AUTH:  # as mozilla-django-oidc's token request
        auth = (settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET)
    else:
        data |= {"client_id": settings.OIDC_RP_CLIENT_ID,
                 "client_secret": settings.OIDC_RP_CLIENT_SECRET}  # fmt: skip
    try:
        response = requests.post(
            token_endpoint,
            data=data,
            auth=auth,
            timeout=settings.OIDC_TIMEOUT,
            verify=settings.OIDC_VERIFY_SSL,
            allow_redirects=False,
        )
    except requests.ConnectTimeout as exc:
        raise NotAnswered(f"no answer: {exc}", maybe_used=False) from exc
    except requests.RequestException as exc:
        raise NotAnswered(f"no answer: {exc}", maybe_used=True) from exc
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if response.status_code == 400 and error == "invalid_grant":
        raise Refused(str(body.get("error_description") or "invalid_grant"))
    if response.status_code != 200 or not isinstance(body, dict) or "access_token" not in body:
        raise NotAnswered(
            f"HTTP {response.status_code}" + (f" {error}" if error else ""),
            maybe_used=not 400 <= response.status_code < 500,
        )
    new = body.get("refresh_token")
    return new if isinstance(new, str) and new else None


def _candidates(report: Report) -> list[int]:
    """The ids of the provider accounts to ask about (active, no usable password, a token the
    portal can read); the others with no token are listed in ``report``."""
    ids = []
    rows = ProviderAccount.objects.filter(user__is_active=True).select_related("user")
    for account in rows.order_by("pk"):
        if account.user.has_usable_password():
            continue  # a local account now: never swept
        name = account.user.get_username()
        if not account.refresh_token:
            report.without_token.append(name)
        elif refresh_tokens.unseal(account.refresh_token) is None:
            report.unreadable.append(name)
        else:
            ids.append(account.pk)
    return ids


def _ask(pk: int, token_endpoint: str, report: Report) -> tuple[Any, Any] | None:
    """Ask the provider about the account ``pk`` under its row lock (another sweep at once
    skips it, a sign-in waits): (account, the stored token's time) when the provider refused
    it, else None. ``NotAnswered`` propagates."""
    with transaction.atomic():
        account = (
            ProviderAccount.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("user")
            .filter(pk=pk, user__is_active=True)
            .first()
        )
        if account is None or account.user.has_usable_password():
            return None  # being swept by another run, deactivated or made local meanwhile
        token = refresh_tokens.unseal(account.refresh_token) if account.refresh_token else None
        if token is None:
            return None
        try:
            new = _refresh(token_endpoint, token)
        except NotAnswered as exc:
            if exc.maybe_used:
                refresh_tokens.unanswered(account)
            unanswered = exc  # raised once this is committed (the row lock's transaction)
        except Refused as exc:
            report.checked += 1
            if account.unanswered_at is not None:
                # the provider may have rotated it at the request that went unanswered (and
                # a used token is refused): not a sign that the person is gone
                logger.warning(
                    "provider sweep: %s's token refused (%s) after a request that went "
                    "unanswered: left as is, not swept until their next sign-in",
                    account.user,
                    exc,
                )
                refresh_tokens.forget(account)
                report.uncertain.append(account.user.get_username())
                return None
            logger.info("provider sweep: %s refused: %s", account.user, exc)
            return account, account.stored_at
        else:
            report.checked += 1
            report.still_there += 1
            if refresh_tokens.accepted(account, new):
                report.rotated += 1
            return None
    raise unanswered


def _deactivate(account: Any, stored_at: Any, lines: list[Any], report: Report) -> None:
    """Offboard the person whose token the provider refused, unless a sign-in stored a new
    token since (they signed in: the provider has them) or the account changed meanwhile."""
    with transaction.atomic():
        current = (
            ProviderAccount.objects.select_for_update(of=("self",))
            .select_related("user")
            .filter(pk=account.pk)
            .first()
        )
        if current is None or current.stored_at != stored_at or not current.refresh_token:
            return
        user = current.user
        if user.has_usable_password():
            return
        refresh_tokens.forget(current)
        if offboard(user, managed_lines=lines, source=oidc.SOURCE, reason=REFUSED):
            report.deactivated.append(user.get_username())
            logger.info("provider sweep: %s deactivated (%s)", user, REFUSED)


def _held_alert(cause: str, why: str) -> None:
    """Tell on-call that the sweep did not run through (``cause``: ``UNAVAILABLE`` or
    ``BOUND``): until one does, people the provider deleted keep their access. The next
    sweep that runs through resolves it."""
    raise_alert(
        Alert.Kind.PROVIDER_SWEEP,
        Alert.Severity.WARNING,
        cause,
        f"The single sign-on sweep did not run through. {why} Until one does, people "
        "deleted or disabled at the OpenID Connect provider keep their portal account and "
        "API tokens (the session check still signs them out at a page load); "
        "`manage.py sweep_provider --dry-run` lists whom it would deactivate.",
    )


def sweep(*, dry_run: bool = False) -> Report:
    """One sweep (module docstring); with ``dry_run``, whom it would deactivate, deactivating
    nobody (tokens are still used, and rotated ones stored)."""
    if not enabled():
        return Report(enabled=False)
    report = Report()
    try:
        token_endpoint = oidc.provider_metadata(fresh=True)["token_endpoint"]
    except oidc.ProviderUnavailable as exc:
        logger.warning("provider sweep: nothing changed, the provider is unavailable: %s", exc)
        report.held = f"provider unavailable: {exc}"
        _candidates(report)  # still say who is not swept
        if not dry_run:
            _held_alert(UNAVAILABLE, f"The provider could not be asked: {exc}.")
        return report
    refused: list[tuple[Any, Any]] = []
    ids = _candidates(report)
    for index, pk in enumerate(ids):
        try:
            found = _ask(pk, token_endpoint, report)
        except NotAnswered as exc:
            report.not_answered = len(ids) - index
            logger.warning(
                "provider sweep: the provider did not answer (%s): %d account(s) not checked "
                "this run, asked again at the next",
                exc,
                report.not_answered,
            )
            break
        if found is not None:
            refused.append(found)
    report.would_deactivate = [account.user.get_username() for account, _ in refused]
    allowed = max(1, math.floor(float(settings.OIDC_SWEEP_MAX_SHARE) * report.checked))
    if len(refused) > allowed:
        report.held = (
            f"the provider refused {len(refused)} of {report.checked} refresh tokens, more than "
            f"OIDC_SWEEP_MAX_SHARE allows ({allowed})"
        )
        logger.error("provider sweep: nobody deactivated: %s: %s", report.held,
                     ", ".join(report.would_deactivate))  # fmt: skip
        if not dry_run:
            _held_alert(BOUND, f"{report.held[:1].upper()}{report.held[1:]}.")
        return report
    if dry_run:
        return report
    if report.not_answered:
        _held_alert(
            UNAVAILABLE,
            f"The provider's token endpoint did not answer for {report.not_answered} of "
            f"{len(ids)} accounts.",
        )
    else:
        resolve_cleared(Alert.Kind.PROVIDER_SWEEP, (), "a provider sweep ran through")
    lines = managed_lines(settings.OIDC_IDENTITY_MAPPING)
    for account, stored_at in refused:
        _deactivate(account, stored_at, lines, report)
    report.would_deactivate = []
    return report
