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
from core.people import sync_identity
from quotas.models import BusinessLine

logger = logging.getLogger("portal.auth")


def apply_groups(
    user: Any,
    mapping: IdentityMapping,
    groups: Iterable[str],
    *,
    source: str,
    request: HttpRequest | None,
) -> bool:
    """Give ``user`` what ``groups`` give under ``mapping``; False when the mapping's required
    groups keep them out: then they keep nothing the groups gave (researcher, no managed
    line, not a superuser; audited), or one taken out of every group, refused, stayed an
    admin for their open sessions and API tokens."""
    given = grant_for(mapping, groups)
    let_in = given is not None
    if given is None:
        logger.info("%s sign-in of %s refused: in none of the required groups", source, user)
        given = Grant(role=RESEARCHER, lines={}, groups=())
        reason = "in none of the required groups, not let in"
    else:
        reason = "groups " + (", ".join(given.groups) or "(none mapped)")
    known = {
        line.name: line for line in BusinessLine.objects.filter(name__in=mapping.managed_lines)
    }
    for name in sorted(mapping.managed_lines - known.keys()):
        logger.warning("%s group mapping names line %r, which does not exist", source, name)
    sync_identity(
        user,
        role=given.role,
        lines={known[name]: lead for name, lead in given.lines.items() if name in known},
        managed_lines=list(known.values()),
        source=source,
        reason=reason,
        source_ip=client_ip(request) if request is not None else None,
    )
    return let_in
