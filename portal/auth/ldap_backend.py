"""Sign-in against the organization's LDAP directory (django-auth-ldap).

``PortalLDAPBackend`` is django-auth-ldap's backend with these additions:

- the directory is asked for the user name the login limiter counts and the portal stores
  (``core.security.normalize_username``: NFKC, stripped, case-folded), not the one typed:
  OpenLDAP takes ``admİn`` (a capital dotted I) for ``admin`` where Python's lower case is
  ``admi̇n``, which made a second account past the local-account guard, and a spelling the
  limiter counted apart from the name;
- after the directory accepts the password, the user's groups (their ``cn``) are mapped to
  the role and lines (``LDAP_IDENTITY_MAPPING``, ``portal.auth.sync``) at every sign-in, so
  a change of groups takes effect at the next one;
- the e-mail and names the directory gives are kept only when the account can hold them
  (``portal.auth.accounts.profile_text``: a NUL or a value too long was a 500);
- a local account (one with a usable password: break-glass admins, demo users) is never
  signed in or changed by the directory, even under the same user name;
- an account the directory signed in is marked as the directory's (``DirectoryAccount``),
  so the sweep (``portal.auth.sweep``) follows it without a sign-in; one the sweep
  deactivated (or an admin did) has no session: ``get_user`` answers None for an
  inactive account, as Django's ``ModelBackend`` does (django-auth-ldap's does not), and
  its sign-in is refused with a message before the groups are applied (they gave the role
  back to an account no one could use, audited as a sign-in);
- a directory that cannot be reached (django-auth-ldap catches the ``LDAPError`` and sends
  ``ldap_error``; a search for groups that fails is caught here) is said on the login page
  (``portal.auth.notices``), not a 500: local accounts, checked first by ``ModelBackend``,
  still sign in.
"""

from __future__ import annotations

import logging
from typing import Any

import ldap
from django.conf import settings
from django.dispatch import receiver
from django_auth_ldap.backend import LDAPBackend, ldap_error, populate_user

from core.security import normalize_username
from portal.auth import notices
from portal.auth.accounts import accounts_named, make_account, profile_text
from portal.auth.models import DirectoryAccount
from portal.auth.sync import apply_groups

logger = logging.getLogger("portal.auth")
SOURCE = "directory"


class PortalLDAPBackend(LDAPBackend):
    """django-auth-ldap with the portal's group mapping, outage notice and local-account guard."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        """django-auth-ldap's, for the name as ``normalize_username`` makes it (module docstring)."""
        if username is not None:
            username = normalize_username(username)
        return super().authenticate(request, username=username, password=password, **kwargs)

    def get_or_build_user(self, username: str, ldap_user: Any) -> tuple[Any, bool]:
        """The account named ``username`` whatever its case (``accounts_named``, not
        django-auth-ldap's ``iexact`` get: PostgreSQL took ``rıck`` for ``rick``, and two
        accounts differing in case were a 500), or a new one (``make_account``); refused
        when it is a local account or when several accounts have the name."""
        found = accounts_named(username)
        if len(found) > 1:
            logger.warning("directory sign-in as %s refused: %d accounts have that name",
                           username, len(found))  # fmt: skip
            notices.tell(ldap_user._request, notices.several_accounts("the directory"))
            raise ldap_user.AuthenticationFailed("several accounts have this user name")
        if found:
            user, built = found[0], False
        else:  # made here, not at django-auth-ldap's save: two first sign-ins at once were a 500
            user, built = make_account(username.lower())
        if not built and user.has_usable_password():
            logger.warning("directory sign-in as %s refused: a local account has that name", user)
            notices.tell(ldap_user._request, notices.local_account_taken("the directory"))
            raise ldap_user.AuthenticationFailed("a local account has this user name")
        return user, built

    def get_user(self, user_id: Any) -> Any:
        """The signed-in account of a session, or None when it is inactive (deactivated by
        the directory sweep or an admin): django-auth-ldap's kept serving its sessions."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def authenticate_ldap_user(self, ldap_user: Any, password: str) -> Any:
        """django-auth-ldap's; then the account is marked as the directory's and the groups
        give the role and lines (``apply_groups``), or keep the person out."""
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is None:
            return None
        DirectoryAccount.objects.get_or_create(user=user)
        request = ldap_user._request
        if not user.is_active:  # the sweep closed it (or an admin): groups are not applied
            logger.info("directory sign-in as %s refused: the account is inactive", user)
            notices.tell(request, notices.DEACTIVATED)
            return None
        try:
            groups = sorted(ldap_user.group_names)
        except ldap.LDAPError as exc:
            logger.warning("directory group search for %s failed: %s", user, exc)
            notices.tell(request, notices.DIRECTORY_UNREACHABLE)
            notices.not_checked(request, user.get_username())
            return None
        if not apply_groups(
            user, settings.LDAP_IDENTITY_MAPPING, groups, source=SOURCE, request=request
        ):
            notices.tell(request, notices.not_let_in("directory"))
            return None
        return user


@receiver(populate_user, sender=PortalLDAPBackend, dispatch_uid="portal.auth.ldap_populate")
def _keep_what_fits(sender: type, user: Any, ldap_user: Any, **kwargs: Any) -> None:
    """django-auth-ldap copied ``mail``, ``givenName`` and ``sn`` as they came; before the
    save, one the account cannot hold (``profile_text``: a NUL, an e-mail too long) is left
    empty and a name too long is cut, not a 500."""
    for field in settings.AUTH_LDAP_USER_ATTR_MAP:
        value = profile_text(field, getattr(user, field))
        setattr(user, field, "" if value is None else value)


def _unreachable(exc: BaseException) -> bool:
    """Errors that mean the directory could not be asked, not that it said no."""
    down = (ldap.SERVER_DOWN, ldap.TIMEOUT, ldap.CONNECT_ERROR, ldap.BUSY, ldap.UNAVAILABLE)
    return isinstance(exc, down)


@receiver(ldap_error, sender=PortalLDAPBackend, dispatch_uid="portal.auth.ldap_error")
def _on_ldap_error(
    sender: type, context: str, user: Any, request: Any, exception: Exception, **kwargs: Any
) -> None:
    """django-auth-ldap caught an ``LDAPError``: say so on the login page; the password was
    not checked, so the login limiter does not count the attempt (``notices.not_checked``)."""
    logger.warning("directory error while %s: %r", context, exception)
    if request is not None:
        notices.not_checked(request, normalize_username(request.POST.get("username", "")))
    if _unreachable(exception):
        notices.tell(request, notices.DIRECTORY_UNREACHABLE)
    else:
        notices.tell(
            request,
            "The company directory (LDAP) answered with an error, so directory accounts cannot "
            "sign in right now. Local accounts still work.",
        )
