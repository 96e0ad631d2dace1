"""What the login page says when an organization sign-in cannot be done right now.

The messages go through Django's messages (shown by ``base.html``); the request is also
marked (``request.identity_notice``) so the login page does not add "your username and
password didn't match" when the truth is that they could not be checked.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import HttpRequest

logger = logging.getLogger("portal.auth")

DIRECTORY_UNREACHABLE = (
    "The company directory (LDAP) cannot be reached right now, so directory accounts "
    "cannot sign in. Please try again in a few minutes. Local accounts still work."
)

DEACTIVATED = (
    "Your portal account is deactivated (the directory sweep or a cluster admin closed it), "
    "so it cannot sign in. Ask a cluster admin to reactivate it."
)


def sso_label() -> str:
    return getattr(settings, "OIDC_LABEL", "single sign-on")


def sso_unavailable() -> str:
    return (
        f"Sign-in with {sso_label()} is not available right now: the identity provider "
        "cannot be reached. Please try again in a few minutes. Local accounts still work."
    )


def sso_failed() -> str:
    return f"Sign-in with {sso_label()} did not complete. Please try again."


def sso_session_ended() -> str:
    """The silent check of a signed-in person (``portal.auth.oidc.SessionCheck``) failed."""
    return (
        f"Your session at {sso_label()} ended, or your account there was removed or "
        "disabled, so you were signed out of the portal: sign in again."
    )


def not_let_in(source: str) -> str:
    return (
        f"Your {source} account is not in a group that may use the portal. "
        "Ask your team lead or a cluster admin to be added to one."
    )


def local_account_taken(source: str) -> str:
    return (
        f"This user name belongs to a local portal account, which {source} cannot sign in. "
        "Use the local password, or ask a cluster admin."
    )


def several_accounts(source: str) -> str:
    return (
        f"More than one portal account has this user name (in different cases), so {source} "
        "cannot tell which is yours. Ask a cluster admin."
    )


def not_checked(request: HttpRequest | None, username: str) -> None:
    """Mark a sign-in whose password the directory could not check, so the login limiter
    does not count it as a wrong guess. Never for a local account (one with a usable
    password): its password was checked, by ``ModelBackend``, and found wrong."""
    if request is None:
        return
    same_name = get_user_model().objects.filter(username__iexact=username)
    if not any(user.has_usable_password() for user in same_name):
        request.credentials_unchecked = True


def tell(request: HttpRequest | None, text: str) -> None:
    """Show ``text`` once on the next page (the login page) and mark the request."""
    if request is None:
        return
    if getattr(request, "identity_notice", None) == text:
        return
    request.identity_notice = text
    messages.error(request, text, fail_silently=True)
