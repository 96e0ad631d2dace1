"""The writer of a person's role and line memberships from an identity source (a service).

``sync_identity`` sets what the organization's groups say (``core.identity.grant_for``,
lines resolved by the caller): the role (``Profile.role``, and Django's ``is_staff`` /
``is_superuser`` for admins, as ``seed_demo`` gives them, cleared on demotion), and the
memberships of the lines the mapping manages: added, lead flag changed, or removed when
the groups no longer give them. Memberships of other lines are not touched. A change is
one ``AuditRecord`` (action ``identity.sync``) with the role and lines before and after;
a sign-in that changes nothing writes nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from django.db import transaction

from core import audit
from core.models import LineMembership, Profile, Role

ACTION = "identity.sync"


def _state(user: Any) -> dict[str, Any]:
    profile = Profile.objects.filter(user=user).first()
    role = profile.role if profile is not None else Role.RESEARCHER
    lines = {
        m.business_line.name: "lead" if m.is_lead else "member"
        for m in LineMembership.objects.filter(user=user).select_related("business_line")
    }
    return {
        "role": role,
        "superuser": bool(user.is_superuser),
        "lines": dict(sorted(lines.items())),
    }


def sync_identity(
    user: Any,
    *,
    role: str,
    lines: Mapping[Any, bool],
    managed_lines: Collection[Any],
    source: str,
    reason: str = "",
    source_ip: str | None = None,
) -> bool:
    """Give ``user`` the ``role`` and, among ``managed_lines`` (business lines), exactly the
    memberships of ``lines`` (line -> is_lead). Returns whether anything changed (then
    audited, ``reason`` saying which groups of which ``source`` gave it)."""
    if role not in Role.values:
        raise ValueError(f"unknown role {role!r}")
    with transaction.atomic():
        # One sync of a person at a time: two sign-ins at once both added the memberships
        # (an IntegrityError) and both audited the one change.
        type(user).objects.select_for_update().filter(pk=user.pk).exists()
        before = _state(user)
        admin = role == Role.ADMIN
        if user.is_staff != admin or user.is_superuser != admin:
            user.is_staff = user.is_superuser = admin
            user.save(update_fields=["is_staff", "is_superuser"])
        Profile.objects.update_or_create(user=user, defaults={"role": role})
        managed_ids = {line.pk for line in managed_lines}
        wanted = {line.pk: is_lead for line, is_lead in lines.items() if line.pk in managed_ids}
        current = {
            m.business_line_id: m
            for m in LineMembership.objects.filter(user=user, business_line_id__in=managed_ids)
        }
        for line_id, membership in current.items():
            if line_id not in wanted:
                membership.delete()
            elif membership.is_lead != wanted[line_id]:
                membership.is_lead = wanted[line_id]
                membership.save(update_fields=["is_lead"])
        LineMembership.objects.bulk_create(
            [
                LineMembership(user=user, business_line_id=line_id, is_lead=is_lead)
                for line_id, is_lead in wanted.items()
                if line_id not in current
            ]
        )
        after = _state(user)
        changed = before != after
        if changed:
            audit.record(
                user,
                ACTION,
                user,
                reason=f"{source} sign-in" + (f": {reason}" if reason else ""),
                before=before,
                after=after,
                source_ip=source_ip,
            )
    for cached in ("_portal_role", "_portal_lines"):  # core.roles caches them on the user
        if hasattr(user, cached):
            delattr(user, cached)
    return changed
