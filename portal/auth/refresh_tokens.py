"""The OpenID Connect provider's refresh tokens, kept for the provider sweep (a service: the
only writer of ``ProviderAccount``, with ``portal.auth.provider_sweep``).

A refresh token lets whoever holds it, with the portal's client secret, get tokens for the
person from the provider: it is stored encrypted (Fernet, AES-128-CBC with an HMAC-SHA256)
with a key derived from ``SECRET_KEY`` (Django's ``salted_hmac``, a salt of its own), never
in plain text; a token sealed under a key in ``SECRET_KEY_FALLBACKS`` is still read after
``SECRET_KEY`` is rotated. One sealed under a key the portal no longer has cannot be read:
that account is not swept (``provider_sweep`` lists it) until its next sign-in stores a
new one. The database alone (a backup, a dump) does not give the tokens.
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from portal.auth.models import ProviderAccount

KEY_SALT = "portal.auth.refresh_tokens"


def _key(secret: str) -> Fernet:
    """The Fernet key of ``secret`` (a ``SECRET_KEY``): 32 bytes of its salted HMAC."""
    digest = salted_hmac(KEY_SALT, "fernet", secret=secret, algorithm="sha256").digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def _fernet() -> MultiFernet:
    """Seals with ``SECRET_KEY``; opens with it or any of ``SECRET_KEY_FALLBACKS``."""
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet([_key(secret) for secret in secrets])


def seal(token: str) -> str:
    """``token`` encrypted (what the database keeps)."""
    return _fernet().encrypt(token.encode("utf-8")).decode("ascii")


def unseal(sealed: str) -> str | None:
    """The token ``sealed`` holds; None when it cannot be read (sealed under a key the portal
    no longer has, or altered)."""
    try:
        return _fernet().decrypt(sealed.encode("ascii")).decode("utf-8")
    except (InvalidToken, UnicodeError):
        return None


def remember_sign_in(user: Any, refresh_token: str | None, session_id: str = "") -> str | None:
    """``user`` signed in through the provider: mark the account as the provider's and keep
    ``refresh_token`` (sealed) when the provider gave one, with ``session_id`` (the ID
    token's ``sid``: the provider's session it belongs to); without one, the stored token
    stays (a session check, ``prompt=none``, may bring none).

    Returns the token this replaced when it is of another session at the provider (both
    sessions named, and not the same), for the caller to revoke
    (``portal.auth.revocation.revoke_replaced``); None otherwise: a token of the same
    session is of the same grant, which revoking it would revoke with the new one."""
    replaced = None
    with transaction.atomic():
        account, _ = ProviderAccount.objects.select_for_update().get_or_create(user=user)
        if refresh_token:
            old = unseal(account.refresh_token) if account.refresh_token else None
            other_session = bool(session_id and account.session_id != session_id)
            if old and old != refresh_token and account.session_id and other_session:
                replaced = old
            account.refresh_token = seal(refresh_token)
            account.session_id = session_id
            account.stored_at = timezone.now()
            account.unanswered_at = None
            account.save(
                update_fields=["refresh_token", "session_id", "stored_at", "unanswered_at"]
            )
    return replaced


def accepted(account: ProviderAccount, refresh_token: str | None) -> bool:
    """The provider accepted ``account``'s refresh token now (the caller holds its row lock):
    keep the one it rotated to, if it answered one. Returns whether it rotated."""
    account.checked_at = timezone.now()
    account.unanswered_at = None
    fields = ["checked_at", "unanswered_at"]
    rotated = bool(refresh_token) and unseal(account.refresh_token) != refresh_token
    if rotated:
        account.refresh_token = seal(refresh_token or "")
        account.stored_at = account.checked_at
        fields += ["refresh_token", "stored_at"]
    account.save(update_fields=fields)
    return rotated


def unanswered(account: ProviderAccount) -> None:
    """A request with ``account``'s token went unanswered (the caller holds its row lock):
    the provider may have used and rotated it, so a refusal of it later says nothing of
    the person (``portal.auth.provider_sweep``)."""
    account.unanswered_at = timezone.now()
    account.save(update_fields=["unanswered_at"])


def forget(account: ProviderAccount) -> None:
    """Drop ``account``'s refresh token (the provider refused it: it is of no use)."""
    account.refresh_token = ""
    account.save(update_fields=["refresh_token"])
