"""The provider sweep: people deleted or disabled at the OpenID Connect provider lose the
portal account, and people whose groups changed there get the role and lines the groups
give now, without opening a page.

The session check (``portal.auth.oidc.SessionCheck``) asks the provider about a person only
at their page loads: someone who opens no page again kept the account, their role and
lines, and their API tokens with them. A standard provider offers no lookup of other
people, but it does answer for each person whose refresh token the portal holds: a sign-in
asks for ``offline_access`` (``OIDC_SWEEP``, on by default) and keeps the refresh token the
provider gives, encrypted (``portal.auth.refresh_tokens``). The sweep (beat entry ``provider-sweep``, every
``OIDC_SWEEP_SECONDS``; ``manage.py sweep_provider`` runs it once) uses each active
provider account's token at the provider's token endpoint (``grant_type=refresh_token``,
the client's own credentials, as the sign-in's token request) and:

- the provider refuses it with ``invalid_grant`` (the person deleted or disabled there,
  their grant or offline session revoked, the token expired): the person is offboarded
  (``core.people.offboard``, as by the directory sweep): inactive, researcher, no mapped
  line, API tokens revoked, sessions ended, live connections closed, one
  ``identity.offboard`` record; their jobs keep running. The refused token is dropped
  (not sent back to the provider to revoke: ``portal.auth.revocation``);
- the provider accepts it: the token it rotated to, if it did, is stored at once, under the
  account's row lock (the old one is refused from now on). Then the person's claims are
  read from the provider's user info endpoint with the access token of that answer (as at
  a sign-in, which reads the groups there too), and their groups (``OIDC_GROUPS_CLAIM``)
  applied as a sign-in applies them (``portal.auth.sync.sync_groups``, event ``sweep``):
  the role and lines they give now, an ``identity.sync`` record by the system ("single
  sign-on sweep: groups ...") when that changes anything; someone whose groups no longer
  let them in (``OIDC_REQUIRED_GROUPS``) is offboarded as above ("in none of the required
  groups"), and their token, which still works, revoked at the provider once that commits
  (``portal.auth.revocation.offboarded``). Claims about another account (a user name, as
  ``PortalOIDCBackend.username_from`` reads it, other than the account's, or a ``sub``
  other than the ID token's the refresh answered) leave the person as is
  (``other_account``, a warning). A user info that gives no
  claims (not reached, a timeout, not a 200, not a JSON object) leaves their groups as they
  are this run (``no_user_info``); after one that did not answer at all (not reached, a
  timeout, a 5xx), the sweep reads nobody else's this run, and on-call hears of it;
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

Nothing is applied until every account has been asked. If the sweep would deactivate more
than ``OIDC_SWEEP_MAX_SHARE`` of the accounts the provider answered for (refused tokens and
people in none of the required groups together), or take a role or a line from more than
that share (``portal.auth.sync.takes_away``, as the directory sweep counts it; each counted
apart, at least one of each always allowed), it deactivates nobody, changes nobody's groups,
logs an error and raises the ``provider_sweep`` alert (``sweep bound``): a provider that lost
its token store, revoked every token at once, or stopped sending the groups claim must not
lock everyone out or demote every admin and lead. ``manage.py sweep_provider --dry-run``
says whom it would deactivate or take a role or a line from, changing nobody (the tokens are
used all the same: a provider that rotates them rotates them). Just before a change, under
the account's row lock, the account is read again: one made local or inactive meanwhile, or
whose token a sign-in replaced (that sign-in applied the groups itself), is left as it is.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import jwt
import requests
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.db import transaction

from core.identity import grant_for, groups_from_claim
from core.people import offboard
from monitoring.models import Alert
from monitoring.services import raise_alert, resolve_cleared
from portal.auth import oidc, refresh_tokens
from portal.auth.models import ProviderAccount
from portal.auth.sync import managed_lines, managed_memberships, sync_groups, takes_away

logger = logging.getLogger("portal.auth.provider_sweep")

REFUSED = "the provider refused the refresh token (invalid_grant)"
NOT_LET_IN = "in none of the required groups"
# The subjects of the ``provider_sweep`` alert: why a sweep did not run through.
UNAVAILABLE = "provider unavailable"
BOUND = "sweep bound"


@dataclass
class Report:
    """What a sweep did: ``held`` says why it deactivated nobody and changed nobody's
    groups (empty when it ran)."""

    enabled: bool = True
    held: str = ""
    checked: int = 0  # accounts the provider answered for
    still_there: int = 0
    rotated: int = 0
    not_answered: int = 0
    changed: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    would_deactivate: list[str] = field(default_factory=list)
    would_demote: list[str] = field(default_factory=list)
    without_token: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)
    no_user_info: list[str] = field(default_factory=list)
    other_account: list[str] = field(default_factory=list)


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


class NoUserInfo(Exception):
    """The provider's user info endpoint gave no claims for an access token (no answer, a
    timeout, not a 200, not a JSON object). ``unanswered``: it did not answer at all (not
    reached, a timeout, a 5xx): the sweep asks it about nobody else this run."""

    def __init__(self, message: str, *, unanswered: bool) -> None:
        super().__init__(message)
        self.unanswered = unanswered


@dataclass
class Asked:
    """The provider's answer for one account: it ``refused`` the token, or accepted it and
    gave ``access_token``. ``stored_at``: the stored token's time once answered (a sign-in
    that stores a new token since moves it: that sign-in applied the groups itself)."""

    account: Any
    stored_at: Any
    refused: bool = False
    access_token: str = ""
    subject: str | None = None  # the ``sub`` of the ID token it answered, if any


def enabled() -> bool:
    """Whether OpenID Connect is on and the sweep with it (``OIDC_SWEEP``)."""
    return oidc.enabled() and bool(getattr(settings, "OIDC_SWEEP", False))


def refresh(token_endpoint: str, refresh_token: str) -> tuple[str | None, str, str | None]:
    """Use ``refresh_token`` at the provider: (the refresh token it answers, None when it
    kept the one it had; the access token it answers; the subject of the ID token it
    answers, if any). ``Refused`` when it refuses the token; ``NotAnswered`` otherwise."""
    try:
        response = oidc.post_as_client(
            token_endpoint, {"grant_type": "refresh_token", "refresh_token": refresh_token}
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
    access = body.get("access_token") if isinstance(body, dict) else None
    if response.status_code != 200 or not isinstance(access, str) or not access:
        raise NotAnswered(
            f"HTTP {response.status_code}" + (f" {error}" if error else ""),
            maybe_used=not 400 <= response.status_code < 500,
        )
    new = body.get("refresh_token")
    return (new if isinstance(new, str) and new else None), access, _subject(body.get("id_token"))


def _subject(id_token: Any) -> str | None:
    """The ``sub`` of an ID token from the token endpoint (its signature unchecked: it came
    straight from the provider, OpenID Connect Core 1.0, 3.1.3.7), None when it has none."""
    if not isinstance(id_token, str):
        return None
    try:
        sub = jwt.decode(id_token, options={"verify_signature": False}).get("sub")
    except jwt.PyJWTError:
        return None
    return sub if isinstance(sub, str) else None


def _user_info(userinfo_endpoint: str, access_token: str) -> dict[str, Any]:
    """The claims the provider's user info endpoint gives for ``access_token`` (the sign-in
    reads the groups there too); ``NoUserInfo`` when it gives none."""
    try:
        response = requests.get(
            userinfo_endpoint,
            headers={"Authorization": f"Bearer {access_token}"},
            timeout=settings.OIDC_TIMEOUT,
            verify=settings.OIDC_VERIFY_SSL,
            allow_redirects=False,
        )
    except requests.RequestException as exc:
        raise NoUserInfo(f"no answer: {exc}", unanswered=True) from exc
    if response.status_code != 200:
        raise NoUserInfo(f"HTTP {response.status_code}", unanswered=response.status_code >= 500)
    try:
        claims = response.json()
    except ValueError:
        claims = None
    if not isinstance(claims, dict):
        raise NoUserInfo("the answer is not a JSON object", unanswered=False)
    return claims


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


def _ask(pk: int, token_endpoint: str, report: Report) -> Asked | None:
    """Ask the provider about the account ``pk`` under its row lock (another sweep at once
    skips it, a sign-in waits): its answer, None when there is nothing to do (not asked, or
    a refusal that says nothing of the person). ``NotAnswered`` propagates."""
    with transaction.atomic():
        account = (
            ProviderAccount.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("user", "user__profile")  # the profile: the bound reads the role
            .filter(pk=pk, user__is_active=True)
            .first()
        )
        if account is None or account.user.has_usable_password():
            return None  # being swept by another run, deactivated or made local meanwhile
        token = refresh_tokens.unseal(account.refresh_token) if account.refresh_token else None
        if token is None:
            return None
        try:
            new, access, subject = refresh(token_endpoint, token)
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
            return Asked(account, account.stored_at, refused=True)
        else:
            report.checked += 1
            report.still_there += 1
            if refresh_tokens.accepted(account, new):
                report.rotated += 1
            # the user info is read after this commits: the rotated token is stored first
            return Asked(account, account.stored_at, access_token=access, subject=subject)
    raise unanswered


def _groups(asked: Asked, userinfo_endpoint: str, report: Report) -> list[str] | None:
    """The person's groups from the provider's user info for ``asked.access_token``; None
    (listed in ``report``) when it gives no claims, or claims about another account (another
    user name, or another subject than the ID token the refresh answered): then their groups
    are not applied this run. ``NoUserInfo`` propagates when the endpoint did not answer at
    all."""
    user = asked.account.user
    name = user.get_username()
    try:
        claims = _user_info(userinfo_endpoint, asked.access_token)
    except NoUserInfo as exc:
        logger.warning("provider sweep: no user info for %s (%s): groups not applied this run",
                       user, exc)  # fmt: skip
        report.no_user_info.append(name)
        if exc.unanswered:
            raise
        return None
    try:
        named = oidc.PortalOIDCBackend().username_from(claims)
    except SuspiciousOperation as exc:
        named = f"none ({exc})"
    sub = claims.get("sub")
    if named != name.lower() or (asked.subject is not None and sub != asked.subject):
        # the name as the sign-in finds the account (``accounts_named``)
        logger.warning("provider sweep: the user info for %s is about %s (sub %r): left as is",
                       user, named, sub)  # fmt: skip
        report.other_account.append(name)
        return None
    return groups_from_claim(claims.get(settings.OIDC_GROUPS_CLAIM))


def _still_swept(asked: Asked) -> Any:
    """The account's user, under the account's row lock (the caller's transaction), when it
    is as it was when the provider was asked: else None (an admin gave it a password or
    deactivated it, or a sign-in stored a new token and applied the groups itself)."""
    current = (
        ProviderAccount.objects.select_for_update(of=("self",))
        .select_related("user")
        .filter(pk=asked.account.pk)
        .first()
    )
    if current is None or current.stored_at != asked.stored_at or not current.refresh_token:
        return None
    if not current.user.is_active or current.user.has_usable_password():
        return None
    return current


def _deactivate(asked: Asked, why: str, lines: list[Any], report: Report) -> None:
    """Offboard the person whose token the provider refused, or whose groups no longer let
    them in (``why``), unless the account changed meanwhile (``_still_swept``)."""
    with transaction.atomic():
        current = _still_swept(asked)
        if current is None:
            return
        user = current.user
        if why == REFUSED:  # of no use; any other is revoked at the provider by the offboarding
            refresh_tokens.forget(current)  # (portal.auth.revocation.offboarded)
        if offboard(user, managed_lines=lines, source=oidc.SOURCE, reason=why):
            report.deactivated.append(user.get_username())
            logger.info("provider sweep: %s deactivated (%s)", user, why)
        elif why != REFUSED:  # made inactive meanwhile: not offboarded here, token dropped
            refresh_tokens.forget(current)


def _sync(asked: Asked, groups: list[str], report: Report) -> None:
    """Give the person what ``groups`` give (``sync_groups``: an ``identity.sync`` record by
    the system when it changes anything), unless the account changed meanwhile."""
    with transaction.atomic():
        current = _still_swept(asked)
        if current is None:
            return
        mapping = settings.OIDC_IDENTITY_MAPPING
        _, changed = sync_groups(
            current.user, mapping, groups, source=oidc.SOURCE, request=None, event="sweep"
        )
        if changed:
            report.changed.append(current.user.get_username())
            logger.info("provider sweep: %s's role or lines changed", current.user)


def _held_alert(cause: str, why: str) -> None:
    """Tell on-call that the sweep did not run through (``cause``: ``UNAVAILABLE`` or
    ``BOUND``): until one does, people the provider deleted keep their access, and people
    it took out of groups what the groups gave. The next sweep that runs through resolves
    it."""
    raise_alert(
        Alert.Kind.PROVIDER_SWEEP,
        Alert.Severity.WARNING,
        cause,
        f"The single sign-on sweep did not run through. {why} Until one does, people "
        "deleted or disabled at the OpenID Connect provider keep their portal account and "
        "API tokens, and people taken out of groups there keep the role and lines those "
        "gave (the session check still signs them out, or applies their groups, at a page "
        "load); `manage.py sweep_provider --dry-run` lists whom it would deactivate or "
        "take a role or a line from.",
    )


def _bound(report: Report, deactivations: int, refused: int) -> str:
    """Why the sweep is held by ``OIDC_SWEEP_MAX_SHARE`` (empty: it is not): more
    deactivations, or more people losing a role or a line, than that share of the accounts
    the provider answered for (each counted apart; at least one is always allowed)."""
    allowed = max(1, math.floor(float(settings.OIDC_SWEEP_MAX_SHARE) * report.checked))
    demoted = len(report.would_demote)
    if deactivations <= allowed and demoted <= allowed:
        return ""
    why = f"the provider refused {refused} of {report.checked} refresh tokens"
    if deactivations > refused:
        why += f", {deactivations - refused} more are in none of the required groups"
    if demoted:
        why += f" and {demoted} would lose a role or a line"
    each = " of each" if deactivations > refused or demoted else ""
    return f"{why}, more than OIDC_SWEEP_MAX_SHARE allows ({allowed}{each})"


def sweep(*, dry_run: bool = False) -> Report:
    """One sweep (module docstring); with ``dry_run``, whom it would deactivate or take a
    role or a line from, changing nobody (tokens are still used, and rotated ones stored)."""
    if not enabled():
        return Report(enabled=False)
    report = Report()
    try:
        metadata = oidc.provider_metadata(fresh=True)
    except oidc.ProviderUnavailable as exc:
        logger.warning("provider sweep: nothing changed, the provider is unavailable: %s", exc)
        report.held = f"provider unavailable: {exc}"
        _candidates(report)  # still say who is not swept
        if not dry_run:
            _held_alert(UNAVAILABLE, f"The provider could not be asked: {exc}.")
        return report
    mapping = settings.OIDC_IDENTITY_MAPPING
    held_lines = managed_memberships(mapping)
    to_deactivate: list[tuple[Asked, str]] = []
    to_sync: list[tuple[Asked, list[str]]] = []
    user_info_unanswered = ""  # why the user info endpoint is asked about nobody else
    ids = _candidates(report)
    for index, pk in enumerate(ids):
        try:
            asked = _ask(pk, metadata["token_endpoint"], report)
        except NotAnswered as exc:
            report.not_answered = len(ids) - index
            logger.warning(
                "provider sweep: the provider did not answer (%s): %d account(s) not checked "
                "this run, asked again at the next",
                exc,
                report.not_answered,
            )
            break
        if asked is None:
            continue
        if asked.refused:
            to_deactivate.append((asked, REFUSED))
            continue
        user = asked.account.user
        if user_info_unanswered:
            report.no_user_info.append(user.get_username())
            continue
        try:
            groups = _groups(asked, metadata["userinfo_endpoint"], report)
        except NoUserInfo as exc:
            user_info_unanswered = str(exc)
            continue
        if groups is None:
            continue
        grant = grant_for(mapping, groups)
        if grant is None:
            to_deactivate.append((asked, NOT_LET_IN))
            continue
        to_sync.append((asked, groups))
        if takes_away(user, grant, held_lines.get(user.pk, {})):
            report.would_demote.append(user.get_username())
    report.would_deactivate = [
        asked.account.user.get_username() + ("" if why == REFUSED else f" ({why})")
        for asked, why in to_deactivate
    ]
    refused = sum(why == REFUSED for _, why in to_deactivate)
    report.held = _bound(report, len(to_deactivate), refused)
    if report.held:
        logger.error("provider sweep: nobody deactivated or changed: %s: %s", report.held,
                     ", ".join(report.would_deactivate + report.would_demote))  # fmt: skip
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
    elif report.no_user_info:
        why = f" (it did not answer: {user_info_unanswered})" if user_info_unanswered else ""
        _held_alert(
            UNAVAILABLE,
            f"The provider's user info endpoint gave no claims for {len(report.no_user_info)} "
            f"of {report.still_there} accounts{why}: their groups were not applied.",
        )
    else:
        resolve_cleared(Alert.Kind.PROVIDER_SWEEP, (), "a provider sweep ran through")
    for asked, groups in to_sync:
        _sync(asked, groups, report)
    lines = managed_lines(mapping)
    for asked, why in to_deactivate:
        _deactivate(asked, why, lines, report)
    report.would_deactivate, report.would_demote = [], []
    return report
