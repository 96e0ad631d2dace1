"""Which portal accounts belong to the directory (LDAP), and which to the OpenID Connect
provider (``ProviderAccount``, below).

An account made by a sign-in has no usable password whichever way it came (the directory,
the OpenID Connect provider), and so has an account an admin made for automation without
one: "no usable password" does not say the directory owns it. ``DirectoryAccount`` does:
written at each directory sign-in the directory accepted (``portal.auth.ldap_backend``),
and by the sweep for an account with no usable password that the directory knows by its
name (``portal.auth.sweep``: accounts from before this table). Only these accounts are
swept; local accounts (a usable password) never are.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class DirectoryAccount(models.Model):
    """``user`` signs in through the directory (see the module docstring)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="directory_account"
    )
    linked_at = models.DateTimeField(auto_now_add=True, help_text="wall clock, UTC")

    def __str__(self) -> str:
        return f"{self.user} (directory)"


class ProviderAccount(models.Model):
    """``user`` signs in through the OpenID Connect provider, and what the provider sweep
    (``portal.auth.provider_sweep``, its only writer) asks the provider about them with.

    ``refresh_token`` is the provider's refresh token from the person's last sign-in (or the
    one it rotated to at the last sweep), encrypted with a key derived from ``SECRET_KEY``
    (Fernet: never in plain text in the database); empty when the provider gave none (a
    provider that does not grant ``offline_access``, ``OIDC_SWEEP`` off, or an account from
    before the sweep, marked from its audit records). Such an account is not swept: it is
    checked at its page loads only (the session check) until a sign-in stores a token.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_account"
    )
    refresh_token = models.TextField(blank=True, default="", help_text="Fernet-encrypted")
    session_id = models.TextField(
        blank=True,
        default="",
        help_text="the provider's session the refresh token is of (the sign-in's ID token's "
        "sid; empty: not named)",
    )
    stored_at = models.DateTimeField(
        null=True, blank=True, help_text="when the refresh token was stored; wall clock, UTC"
    )
    checked_at = models.DateTimeField(
        null=True, blank=True, help_text="when the provider last accepted it; wall clock, UTC"
    )
    unanswered_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="when a request with this token went unanswered (the provider may have "
        "rotated it): a refusal of it then deactivates nobody; wall clock, UTC",
    )
    linked_at = models.DateTimeField(auto_now_add=True, help_text="wall clock, UTC")

    def __str__(self) -> str:
        return f"{self.user} (single sign-on)"
