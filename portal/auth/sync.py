"""Applying the groups of an organization sign-in to the portal user.

The pure mapping (``core.identity.grant_for``) says the role and the lines by name; this
resolves the names to business lines and writes through the people service
(``core.people.sync_identity``, audited). A line the configuration names but the portal
does not have is skipped with a warning in the log (the sign-in still works).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.http import HttpRequest

from core.api import client_ip
from core.identity import RESEARCHER, Grant, IdentityMapping, grant_for
from core.models import LineMembership, Role
from core.people import sync_identity
from core.roles import role_of
from quotas.models import BusinessLine

logger = logging.getLogger("portal.auth")


def apply_groups(
    user: Any,
    mapping: IdentityMapping,
    groups: Iterable[str],
    *,
    source: str,
    request: HttpRequest | None,
    event: str = "sign-in",
) -> bool:
    """``sync_groups``'s first answer: whether the groups let ``user`` in."""
    return sync_groups(user, mapping, groups, source=source, request=request, event=event)[0]


def sync_groups(
    user: Any,
    mapping: IdentityMapping,
    groups: Iterable[str],
    *,
    source: str,
    request: HttpRequest | None,
    event: str = "sign-in",
) -> tuple[bool, bool]:
    """Give ``user`` what ``groups`` give under ``mapping``; False when the mapping's required
    groups keep them out: then they keep nothing the groups gave (researcher, no managed
    line, not a superuser; audited), or one taken out of every group, refused, stayed an
    admin for their open sessions and API tokens. ``event`` is what read the groups: a
    ``sign-in``, or a ``sweep`` (the directory's, ``portal.auth.sweep``, or the provider's,
    ``portal.auth.provider_sweep``). Returns (let in, whether the role or lines changed)."""
    given = grant_for(mapping, groups)
    let_in = given is not None
    if given is None:
        logger.info("%s %s of %s refused: in none of the required groups", source, event, user)
        given = Grant(role=RESEARCHER, lines={}, groups=())
        reason = "in none of the required groups, not let in"
    else:
        reason = "groups " + (", ".join(given.groups) or "(none mapped)")
    known = {line.name: line for line in managed_lines(mapping)}
    for name in sorted(mapping.managed_lines - known.keys()):
        logger.warning("%s group mapping names line %r, which does not exist", source, name)
    changed = sync_identity(
        user,
        role=given.role,
        lines={known[name]: lead for name, lead in given.lines.items() if name in known},
        managed_lines=list(known.values()),
        source=source,
        reason=reason,
        source_ip=client_ip(request) if request is not None else None,
        event=event,
    )
    return let_in, changed


def managed_lines(mapping: IdentityMapping) -> list[BusinessLine]:
    """The business lines ``mapping`` names that exist (what a person's groups can give)."""
    return list(BusinessLine.objects.filter(name__in=mapping.managed_lines))


def managed_memberships(mapping: IdentityMapping) -> dict[Any, dict[str, bool]]:
    """Each person's memberships of the lines ``mapping`` manages: user id -> {line: lead}."""
    held: dict[Any, dict[str, bool]] = {}
    rows = LineMembership.objects.filter(business_line__name__in=mapping.managed_lines)
    for user_id, line, lead in rows.values_list("user_id", "business_line__name", "is_lead"):
        held.setdefault(user_id, {})[line] = lead
    return held


def takes_away(user: Any, grant: Grant, lines: dict[str, bool]) -> bool:
    """Whether giving ``user`` what ``grant`` gives takes a role or a line from them (a
    role other than researcher changed, a managed line or its lead left; ``lines``: their
    ``managed_memberships``): what a group search that finds no groups, or a provider
    that sends no groups, does to everyone at once, so the sweeps' bounds count it."""
    role = role_of(user)
    if role != Role.RESEARCHER and grant.role != role:
        return True
    return any(name not in grant.lines or (lead and not grant.lines[name])
               for name, lead in lines.items())  # fmt: skip
