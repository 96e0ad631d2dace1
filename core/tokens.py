"""Self-service API tokens: the only writer of ``core.models.ApiToken``.

A token is ``gpt_`` followed by 43 URL-safe characters (32 random bytes from
``secrets``). The database keeps its SHA-256 (a fast hash is enough for a secret of 256
bits: nothing to brute-force), so a leaked database leaks no usable token; the secret is
returned once, by ``create_token``, and never again. Requests present it as DRF's
``Authorization: Token <secret>``; ``core.security.RateLimitedTokenAuthentication`` hands
every key that starts with ``gpt_`` to ``authenticate`` below and everything else to DRF's
``authtoken`` table, where ``manage.py issue_token`` keeps its automation tokens.

Expiry and last use are wall-clock UTC, not cluster time (``core.models.ApiToken``).
``last_used_at`` is written at most once a minute per token, so an API client polling
every second costs one UPDATE a minute, not one per request.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from core import audit
from core.models import ApiToken
from core.prepared import Prepared
from core.security import has_control_characters, invisible_character_error

TOKEN_PREFIX = "gpt_"
PREFIX_SHOWN = len(TOKEN_PREFIX) + 8  # "gpt_" and 8 characters of the secret
SECRET_BYTES = 32
MAX_NAME = 100
MIN_DAYS, MAX_DAYS, DEFAULT_DAYS = 1, 365, 90
LAST_USED_EVERY = timedelta(minutes=1)
MAX_ID = 2**63 - 1  # a larger id in a path is no token (and would overflow the query)


class TokenError(Exception):
    """A refused request to create or use a token: messages by field (400 / 401)."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__(errors)
        self.errors = errors


class TokenNameTaken(TokenError):
    """The user already has a live token of that name (a conflict with state: 409)."""


def hash_secret(secret: str) -> str:
    """SHA-256 hex of a token's secret: what the database stores and looks up."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def is_portal_token(key: str) -> bool:
    """Whether ``key`` has the shape of a self-service token (else: a legacy DRF token)."""
    return key.startswith(TOKEN_PREFIX)


def clean_name(name: Any) -> str:
    """The token's name, trimmed; ``TokenError`` if missing, too long or with controls."""
    if not isinstance(name, str) or not name.strip():
        raise TokenError({"name": ["A name is required (what the token is for)."]})
    if has_control_characters(name):  # before trimming: a name is one line, as sent
        raise TokenError({"name": ["Control characters are not allowed."]})
    if invisible := invisible_character_error(name):
        raise TokenError({"name": [invisible]})
    name = name.strip()
    if len(name) > MAX_NAME:
        raise TokenError({"name": [f"At most {MAX_NAME} characters."]})
    return name


def clean_days(days: Any) -> int:
    """Days until expiry, an integer from 1 to 365 (ASCII digits only)."""
    if isinstance(days, bool) or not (
        isinstance(days, int) or (isinstance(days, str) and days.strip().isascii())
    ):
        raise TokenError({"expires_in_days": ["A whole number of days."]})
    try:
        value = int(days)
    except ValueError:
        raise TokenError({"expires_in_days": ["A whole number of days."]}) from None
    if not MIN_DAYS <= value <= MAX_DAYS:
        raise TokenError({"expires_in_days": [f"From {MIN_DAYS} to {MAX_DAYS} days."]})
    return value


def live_tokens(user: Any):
    """The user's tokens that are not revoked (expired ones included, marked by the caller)."""
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True)


def create_token(
    user: Any, name: Any, expires_in_days: Any = DEFAULT_DAYS, *, source_ip: str | None = None
) -> tuple[ApiToken, str]:
    """Create a token for ``user``; returns it and its secret (shown once, never stored).

    Raises ``TokenError`` for a bad name, a bad expiry or a name already used by one of the
    user's live tokens. Writes a ``token.create`` audit record.
    """
    name = clean_name(name)
    days = clean_days(expires_in_days)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(SECRET_BYTES)
    now = timezone.now()
    try:
        with transaction.atomic():
            token = ApiToken.objects.create(
                user=user,
                name=name,
                prefix=secret[:PREFIX_SHOWN],
                key_hash=hash_secret(secret),
                created_at=now,
                expires_at=now + timedelta(days=days),
            )
            audit.record(
                user,
                "token.create",
                token,
                after={
                    "name": name,
                    "prefix": token.prefix,
                    "expires_at": token.expires_at.isoformat(),
                },
                source_ip=source_ip,
            )
    except IntegrityError:
        raise TokenNameTaken({"name": ["You already have a token with this name."]}) from None
    return token, secret


def revoke_token(user: Any, token_id: int, *, source_ip: str | None = None) -> ApiToken:
    """Revoke one of ``user``'s own live tokens; ``ApiToken.DoesNotExist`` for anything else
    (another user's token, a revoked one, no such id). Writes a ``token.revoke`` record."""
    if not 0 < token_id <= MAX_ID:
        raise ApiToken.DoesNotExist
    with transaction.atomic():
        token = live_tokens(user).select_for_update().get(pk=token_id)
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit.record(
            user,
            "token.revoke",
            token,
            before={"name": token.name, "prefix": token.prefix},
            after={"revoked_at": token.revoked_at.isoformat()},
            source_ip=source_ip,
        )
    return token


# -- the automation token (``manage.py issue_token``: DRF's ``authtoken``, one per user) ----

AUTOMATION_PREFIX_SHOWN = 8


def issue_automation_token(user: Any) -> str:
    """``user``'s automation token, made on first use (``manage.py issue_token``, run by
    whoever administers the server). Making one is a privileged act on another person's
    account: one ``token.issue`` record, by the system. Printing it again writes nothing."""
    with transaction.atomic():
        token, created = Token.objects.get_or_create(user=user)
        if created:
            audit.record(
                None,
                "token.issue",
                user,
                reason="automation token made by manage.py issue_token",
                after={"prefix": token.key[:AUTOMATION_PREFIX_SHOWN]},
            )
    return token.key


def automation_token(user: Any) -> dict[str, Any] | None:
    """``user``'s automation token as their tokens page shows it (never the key), or None."""
    token = Token.objects.filter(user=user).first()
    if token is None:
        return None
    return {"prefix": token.key[:AUTOMATION_PREFIX_SHOWN], "created_at": token.created}


def revoke_automation_token(user: Any, *, source_ip: str | None = None) -> bool:
    """Delete ``user``'s own automation token (False: they had none). One ``token.revoke``
    record; scripts using it get a 401 from then on."""
    with transaction.atomic():
        token = Token.objects.select_for_update().filter(user=user).first()
        if token is None:
            return False
        prefix = token.key[:AUTOMATION_PREFIX_SHOWN]
        token.delete()
        audit.record(
            user,
            "token.revoke",
            user,
            reason="automation token (manage.py issue_token) revoked by its owner",
            before={"prefix": prefix},
            source_ip=source_ip,
        )
    return True


def revoke_all(user: Any) -> int:
    """Revoke every live token of ``user`` and delete their ``issue_token`` (DRF) token, in
    the caller's transaction (``core.people.offboard``, which audits it); how many went."""
    revoked = live_tokens(user).update(revoked_at=timezone.now())
    return revoked + Token.objects.filter(user=user).delete()[0]


# Every API request looks its token up: compiled once (``core.prepared``), the token, its
# user and their profile (the role) in one query.
_TOKEN_BY_HASH = Prepared(
    lambda key_hash: (
        ApiToken.objects.select_related("user", "user__profile")
        .filter(key_hash=key_hash)
        .order_by("pk")[:1]
    ),
    str,
)
_LEGACY_TOKEN_BY_KEY = Prepared(
    lambda key: Token.objects.select_related("user", "user__profile").filter(key=key)[:1], str
)


def legacy_token(key: str) -> Token | None:
    """The DRF token ``key`` (``manage.py issue_token``'s automation tokens) with its user and
    profile loaded, or None. Its active user is checked by the caller
    (``core.security.RateLimitedTokenAuthentication``)."""
    return _LEGACY_TOKEN_BY_KEY.first(key)


def authenticate(secret: str, *, now: datetime | None = None) -> ApiToken:
    """The live token whose secret is ``secret``, its user loaded; ``TokenError`` if the
    token is unknown, revoked, expired or its user inactive. Notes the use (at most one
    write a minute)."""
    now = now or timezone.now()
    token = _TOKEN_BY_HASH.first(hash_secret(secret))
    if token is None or token.revoked_at is not None:
        raise TokenError({"detail": ["Invalid token."]})
    if token.expires_at <= now:
        raise TokenError({"detail": ["Token expired."]})
    if not token.user.is_active:
        raise TokenError({"detail": ["User inactive or deleted."]})
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def describe(token: ApiToken, now: datetime | None = None) -> dict[str, Any]:
    """A token as the API and the page show it (never its secret or hash)."""
    now = now or timezone.now()
    return {
        "id": token.pk,
        "name": token.name,
        "prefix": token.prefix,
        "created_at": token.created_at,
        "expires_at": token.expires_at,
        "last_used_at": token.last_used_at,
        "expired": token.expires_at <= now,
    }
