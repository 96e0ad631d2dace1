"""Which portal accounts belong to the directory (LDAP).

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
