"""The directory sweep: the portal follows the directory (LDAP) without anyone signing in.

A sign-in reads a person's groups; one who was deleted from the directory never signs in
again, so nothing read theirs, and they kept their account, role, sessions and API tokens.
The sweep (beat entry ``directory-sweep``, every ``LDAP_SWEEP_SECONDS``; ``manage.py
sync_directory`` runs it once) asks the directory about every active directory account
(``DirectoryAccount``; an account with a usable password, a local one, never) with the
sign-in's own settings (``AUTH_LDAP_*``: server, service account, user and group searches,
group type, timeouts) and:

- a person the directory no longer has, or (``LDAP_REQUIRED_GROUPS``) no longer lets in, is
  offboarded (``core.people.offboard``): inactive, researcher, no mapped line, API tokens
  revoked, sessions ended, one ``identity.offboard`` record; their jobs keep running;
- a person still there gets the role and lines their groups give now, through the path a
  sign-in takes (``portal.auth.sync.apply_groups``, an ``identity.sync`` record when it
  changes anything, "directory sweep: groups ...");
- an active account with no usable password and no ``DirectoryAccount`` (one from before
  that table, whose sign-ins never changed anything) that the directory has under its name
  is marked as the directory's and swept as the others; one it does not have is not the
  directory's (an OpenID Connect or automation account) and is left alone.

Nothing is written until every account has been looked up: a directory that cannot be
reached or answers an error (a refused bind, a search base that does not exist) at any
point changes nothing, and the next run tries again. A person whose name matches several
entries is left as they are (a sign-in cannot tell them apart either). If the sweep would
deactivate more than ``LDAP_SWEEP_MAX_SHARE`` of the directory accounts, or take a role or
a line from more than that share (each counted apart; at least one is always allowed), it
writes nothing at all and logs an error: a mis-set search base or
filter that finds nobody must not lock everyone out. Either way (not in a dry run) it
raises a ``directory_sweep`` alert for on-call, which the next sweep that runs through
resolves.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import ldap
from django.conf import settings
from django.contrib.auth import get_user_model
from django_auth_ldap.config import LDAPSearch

from core.identity import grant_for
from core.people import offboard
from monitoring.models import Alert
from monitoring.services import raise_alert, resolve_cleared
from portal.auth.ldap_backend import SOURCE, PortalLDAPBackend
from portal.auth.models import DirectoryAccount
from portal.auth.sync import managed_lines, managed_memberships, sync_groups, takes_away

logger = logging.getLogger("portal.auth.sweep")

GONE = "no longer in the directory"
NOT_LET_IN = "in none of the required groups"
AMBIGUOUS = "several directory entries"
# The subjects of the ``directory_sweep`` alert: why a sweep changed nothing.
UNAVAILABLE = "directory unavailable"
BOUND = "sweep bound"


class DirectoryUnavailable(Exception):
    """The directory could not be asked, or answered an error: the sweep changes nothing."""


@dataclass(frozen=True)
class Found:
    """What the directory says of one account: ``groups`` (their names) when it has the
    person, None when it does not; ``linked`` whether the account is already marked as the
    directory's (else it is adopted when found)."""

    user: Any
    linked: bool
    groups: tuple[str, ...] | None


@dataclass
class Plan:
    """What a sweep would do (nothing written yet)."""

    checked: int = 0
    to_sync: list[Found] = field(default_factory=list)
    to_deactivate: list[tuple[Found, str]] = field(default_factory=list)
    to_demote: list[str] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)
    population: int = 0
    allowed: int = 0

    @property
    def over_bound(self) -> bool:
        """More deactivations, or more people losing a role or a line, than
        ``LDAP_SWEEP_MAX_SHARE`` of the directory accounts allows (each counted apart)."""
        return len(self.to_deactivate) > self.allowed or len(self.to_demote) > self.allowed


@dataclass
class Report:
    """What a sweep did: ``held`` says why it wrote nothing (empty when it ran)."""

    enabled: bool = True
    held: str = ""
    checked: int = 0
    adopted: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    would_deactivate: list[str] = field(default_factory=list)
    would_demote: list[str] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)


class _Entry:
    """A directory entry as django-auth-ldap's group types read it: ``dn``, ``attrs`` and
    a bound ``connection`` (``LDAPGroupType.user_groups``)."""

    def __init__(self, dn: str, attrs: dict[str, list[str]], connection: Any) -> None:
        self.dn = dn
        self.attrs = attrs
        self.connection = connection


def _connect(config: Any) -> Any:
    """A connection bound as the service account, set up as django-auth-ldap sets up its
    own (``_LDAPUser._get_connection`` and ``_bind``); ``ldap.LDAPError`` when it cannot."""
    connection = ldap.initialize(config.SERVER_URI)
    for option, value in config.CONNECTION_OPTIONS.items():
        connection.set_option(option, value)
    if config.START_TLS:
        connection.start_tls_s()
    connection.simple_bind_s(config.BIND_DN, config.BIND_PASSWORD)
    return connection


def _candidates() -> list[tuple[Any, bool]]:
    """Active accounts with no usable password, each with whether it is marked as the
    directory's; local accounts (a usable password) are never among them."""
    linked = set(DirectoryAccount.objects.values_list("user_id", flat=True))
    # the profile with each account: the bound reads every person's role (``takes_away``)
    users = get_user_model().objects.filter(is_active=True).select_related("profile")
    users = users.order_by("pk")
    return [(user, user.pk in linked) for user in users if not user.has_usable_password()]


def _look_up(
    backend: PortalLDAPBackend, connection: Any, user: Any
) -> tuple[str, ...] | str | None:
    """The group names of ``user``'s directory entry; None when the directory has no entry
    of that name, ``AMBIGUOUS`` when it has several. ``ldap.LDAPError`` propagates."""
    config = backend.settings
    name = backend.django_to_ldap_username(user.get_username())
    results = config.USER_SEARCH.execute(connection, {"user": name})
    if not results:
        return None
    if len(results) > 1:
        return AMBIGUOUS
    dn, attrs = results[0]
    infos = config.GROUP_TYPE.user_groups(_Entry(dn, attrs, connection), config.GROUP_SEARCH)
    names = {config.GROUP_TYPE.group_name_from_info(info) for info in infos}
    return tuple(sorted(n for n in names if n))


def plan() -> Plan:
    """Ask the directory about every candidate account; ``DirectoryUnavailable`` when it
    cannot be asked or answers an error for any of them (then nothing may be written)."""
    backend = PortalLDAPBackend()
    config = backend.settings
    if not isinstance(config.USER_SEARCH, LDAPSearch):
        # LDAPSearchUnion logs and swallows search errors: an outage would look like nobody.
        raise DirectoryUnavailable("AUTH_LDAP_USER_SEARCH must be one LDAPSearch to sweep")
    mapping = settings.LDAP_IDENTITY_MAPPING
    result = Plan()
    held = managed_memberships(mapping)
    try:
        connection = _connect(config)
    except ldap.LDAPError as exc:
        raise DirectoryUnavailable(f"bind as the service account failed: {exc!r}") from exc
    try:
        for user, linked in _candidates():
            try:
                groups = _look_up(backend, connection, user)
            except ldap.LDAPError as exc:
                raise DirectoryUnavailable(f"looking up {user} failed: {exc!r}") from exc
            result.checked += 1
            if groups == AMBIGUOUS:
                result.ambiguous.append(user.get_username())
                continue
            if groups is None and not linked:
                continue  # not the directory's: an OpenID Connect or automation account
            found = Found(user, linked, groups if isinstance(groups, tuple) else None)
            result.population += 1
            if found.groups is None:
                result.to_deactivate.append((found, GONE))
            elif grant_for(mapping, found.groups) is None:
                result.to_deactivate.append((found, NOT_LET_IN))
            else:
                result.to_sync.append(found)
                if takes_away(user, grant_for(mapping, found.groups), held.get(user.pk, {})):
                    result.to_demote.append(user.get_username())
    finally:
        with contextlib.suppress(ldap.LDAPError):
            connection.unbind_s()
    share = float(getattr(settings, "LDAP_SWEEP_MAX_SHARE", 0.1))
    result.allowed = max(1, math.floor(share * result.population))
    return result


def _still_swept(user: Any) -> bool:
    """Whether ``user`` is still an active account with no usable password (an admin may
    have given it a password, or deactivated it, while the directory was asked)."""
    user.refresh_from_db()
    return user.is_active and not user.has_usable_password()


def _adopt(user: Any, report: Report) -> None:
    """Mark ``user`` (no usable password, found in the directory under its name) as the
    directory's: from now on it is swept as any directory account."""
    DirectoryAccount.objects.get_or_create(user=user)
    report.adopted.append(user.get_username())
    logger.info("directory sweep: %s is the directory's (found under its name)", user)


def _held_alert(cause: str, why: str) -> None:
    """Tell on-call that the sweep changed nothing (``cause``: ``UNAVAILABLE`` or ``BOUND``):
    until one runs through, people who left keep their access. The next sweep that runs
    through resolves it (``sweep``)."""
    raise_alert(
        Alert.Kind.DIRECTORY_SWEEP,
        Alert.Severity.WARNING,
        cause,
        f"The directory sweep changed nothing. {why} Until a sweep runs through, people "
        "deleted from the directory keep their portal access and group changes wait for a "
        "sign-in; `manage.py sync_directory --dry-run` lists what it would do.",
    )


def sweep(*, dry_run: bool = False) -> Report:
    """One sweep (module docstring); with ``dry_run``, what it would do, writing nothing."""
    if not getattr(settings, "LDAP_ENABLED", False):
        return Report(enabled=False)
    try:
        found = plan()
    except DirectoryUnavailable as exc:
        logger.warning("directory sweep: nothing changed, the directory is unavailable: %s", exc)
        if not dry_run:
            _held_alert(UNAVAILABLE, f"The directory could not be asked: {exc}.")
        return Report(held=f"directory unavailable: {exc}")
    report = Report(
        checked=found.checked,
        would_deactivate=[f"{f.user.get_username()} ({why})" for f, why in found.to_deactivate],
        would_demote=found.to_demote,
        ambiguous=found.ambiguous,
    )
    for name in found.ambiguous:
        logger.warning("directory sweep: %s matches several directory entries, left as is", name)
    if found.over_bound:
        demoted = (
            f" and take a role or a line from {len(found.to_demote)}" if found.to_demote else ""
        )
        report.held = (
            f"would deactivate {len(found.to_deactivate)} of {found.population} directory "
            f"accounts{demoted}, more than LDAP_SWEEP_MAX_SHARE allows ({found.allowed} of each)"
        )
        logger.error("directory sweep: nothing changed: %s: %s", report.held,
                     ", ".join(report.would_deactivate))  # fmt: skip
        if not dry_run:
            _held_alert(BOUND, f"It {report.held}.")
        return report
    if dry_run:
        return report
    resolve_cleared(Alert.Kind.DIRECTORY_SWEEP, (), "a directory sweep ran through")
    mapping = settings.LDAP_IDENTITY_MAPPING
    lines = managed_lines(mapping)
    for item in found.to_sync:
        if not _still_swept(item.user):
            continue
        if not item.linked:
            _adopt(item.user, report)
        _, changed = sync_groups(
            item.user, mapping, item.groups or (), source=SOURCE, request=None, event="sweep"
        )
        if changed:
            report.changed.append(item.user.get_username())
    for item, why in found.to_deactivate:
        if not _still_swept(item.user):
            continue
        if not item.linked:
            _adopt(item.user, report)
        if offboard(item.user, managed_lines=lines, source=SOURCE, reason=why):
            report.deactivated.append(item.user.get_username())
            logger.info("directory sweep: %s deactivated (%s)", item.user, why)
    report.would_deactivate, report.would_demote = [], []
    return report
