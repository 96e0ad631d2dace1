"""Refresh tokens the portal lets go of are revoked at the provider (OAuth 2.0 Token
Revocation, RFC 7009), so that a copy of one (a database backup with the ``SECRET_KEY``, a
log) stops working there, not only here.

- A sign-in that replaces the stored token with one of another session at the provider
  (``portal.auth.refresh_tokens.remember_sign_in``): the old one is revoked once the
  sign-in commits (``revoke_replaced``). Then the new one is used once at the token
  endpoint, as the provider sweep does (the token it rotates to is kept): a provider that
  revoked it with the old one (one that revokes everything of the person's for the client)
  would have the sweep deactivate the person, so the portal drops it instead (the person is
  not swept until their next sign-in) and logs an error: turn ``OIDC_REVOKE`` off for
  such a provider. A token of the same session is not revoked: a provider revokes the
  grant with a refresh token (RFC 7009, 2.1), and the new token is of that grant.
- An offboarded person (``core.people.offboard``, whoever calls it: the directory sweep,
  the provider sweep): the stored token is dropped in the offboarding's transaction and
  revoked once it commits (``offboarded``, connected in ``portal.auth.apps``).

The endpoint is ``OIDC_OP_REVOCATION_ENDPOINT`` (``OIDC_REVOCATION_ENDPOINT``) or, when
empty, the discovery document's ``revocation_endpoint``; none, or ``OIDC_REVOKE`` off, and
nothing is revoked. The client authenticates as at the token endpoint (``OIDC_TOKEN_AUTH``),
with ``OIDC_TIMEOUT`` and ``OIDC_VERIFY_SSL``. Best effort: a provider that does not answer
or refuses is a warning in the log, never a failed sign-in or offboarding (the commit
callbacks are ``robust``: an error in one is logged, not raised); the token is left to
expire there.
"""

from __future__ import annotations

import logging
from typing import Any

import requests
from django.conf import settings
from django.db import transaction

from portal.auth import oidc, provider_sweep, refresh_tokens
from portal.auth.models import ProviderAccount

logger = logging.getLogger("portal.auth.revocation")


def endpoint() -> str:
    """The provider's revocation endpoint; empty when the portal revokes nothing (OpenID
    Connect off, ``OIDC_REVOKE`` off, no endpoint configured or published, or a discovery
    document that cannot be read now)."""
    if not oidc.enabled() or not getattr(settings, "OIDC_REVOKE", False):
        return ""
    configured = getattr(settings, "OIDC_OP_REVOCATION_ENDPOINT", "")
    if configured:
        return str(configured)
    try:
        return oidc.provider_metadata().get("revocation_endpoint", "")
    except oidc.ProviderUnavailable as exc:
        logger.warning("no refresh token revoked: %s", exc)
        return ""


def revoke(refresh_token: str, *, whose: Any) -> bool:
    """Revoke ``refresh_token`` (``whose``: the person, for the log) at the provider now:
    whether it answered 200 (RFC 7009: also for a token it no longer knows). Never raises
    for the provider's failures: a warning is logged."""
    url = endpoint()
    if not url:
        return False
    try:
        response = oidc.post_as_client(
            url, {"token": refresh_token, "token_type_hint": "refresh_token"}
        )
    except requests.RequestException as exc:
        logger.warning("%s's refresh token not revoked at the provider: %s", whose, exc)
        return False
    if response.status_code != 200:
        try:
            body = response.json()
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        logger.warning(
            "%s's refresh token not revoked at the provider: HTTP %s%s",
            whose,
            response.status_code,
            f" {error}" if isinstance(error, str) else "",
        )
        return False
    logger.info("%s's refresh token revoked at the provider", whose)
    return True


def _still_accepted(user: Any) -> None:
    """Use ``user``'s stored token once at the token endpoint, under the account's row lock
    (as the provider sweep does): keep the token it rotates to; drop it, with an error in
    the log, when the provider refuses it (it revoked it with the one replaced)."""
    with transaction.atomic():
        account = ProviderAccount.objects.select_for_update().filter(user=user).first()
        token = refresh_tokens.unseal(account.refresh_token) if account else None
        if account is None or token is None:
            return
        try:
            token_endpoint = oidc.provider_metadata()["token_endpoint"]
            new, _, _ = provider_sweep.refresh(token_endpoint, token)
        except oidc.ProviderUnavailable as exc:
            logger.warning("%s's new refresh token not checked: %s", user, exc)
        except provider_sweep.NotAnswered as exc:
            logger.warning("%s's new refresh token not checked: %s", user, exc)
            if exc.maybe_used:
                refresh_tokens.unanswered(account)
        except provider_sweep.Refused as exc:
            logger.error(
                "revoking %s's replaced refresh token revoked the new one too (%s): it is "
                "dropped, the person is not swept until their next sign-in; this provider "
                "revokes more than the token: set OIDC_REVOKE=0",
                user,
                exc,
            )
            refresh_tokens.forget(account)
        else:
            refresh_tokens.accepted(account, new)


def revoke_replaced(user: Any, replaced: str) -> None:
    """Once the caller's transaction commits, revoke ``replaced``, the refresh token a
    sign-in of ``user`` replaced, and check that the stored one still works (module
    docstring). Nothing when the portal revokes nothing (``endpoint``)."""

    def run() -> None:
        if revoke(replaced, whose=user):
            _still_accepted(user)

    transaction.on_commit(run, robust=True)


def _let_go(account: ProviderAccount, whose: Any) -> None:
    """Drop ``account``'s refresh token (its row locked) and revoke it once this commits."""
    token = refresh_tokens.unseal(account.refresh_token) if account.refresh_token else None
    if account.refresh_token:
        refresh_tokens.forget(account)
    if token is not None:
        transaction.on_commit(lambda: revoke(token, whose=whose), robust=True)


def _let_go_later(user: Any) -> None:
    """``_let_go`` of ``user``'s account in a transaction of its own."""
    with transaction.atomic():
        account = ProviderAccount.objects.select_for_update().filter(user=user).first()
        if account is not None:
            _let_go(account, user)


def offboarded(sender: Any, *, user: Any, **kwargs: Any) -> None:
    """``core.people.offboarded``: drop ``user``'s stored refresh token in the offboarding's
    transaction, and revoke it at the provider once that commits. An account row another
    transaction holds (a sweep asking about them, a sign-in storing a token) is not waited
    for with the person's row locked (the provider sweep locks the account, then the
    person): it is let go of once the offboarding commits."""
    rows = ProviderAccount.objects.filter(user=user)
    account = rows.select_for_update(skip_locked=True).first()
    if account is not None:
        _let_go(account, user)
    elif rows.exists():
        transaction.on_commit(lambda: _let_go_later(user), robust=True)
