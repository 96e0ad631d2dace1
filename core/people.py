"""The writer of a person's role and line memberships from an identity source (a service).

``sync_identity`` sets what the organization's groups say (``core.identity.grant_for``,
lines resolved by the caller): the role (``Profile.role``, and Django's ``is_staff`` /
``is_superuser`` for admins, as ``seed_demo`` gives them, cleared on demotion), and the
memberships of the lines the mapping manages: added, lead flag changed, or removed when
the groups no longer give them. Memberships of other lines are not touched. A change is
one ``AuditRecord`` (action ``identity.sync``) with the role and lines before and after;
a sign-in that changes nothing writes nothing.

``offboard`` is the other end: a person the directory no longer has (or no longer lets
in), or whose refresh token the OpenID Connect provider refuses (the provider sweep),
loses the account itself: inactive, what the groups gave taken away, API tokens revoked
(``core.tokens.revoke_all``), sessions ended, live connections closed; one
``identity.offboard`` record. Whatever else gives access that is not core's (the identity
provider's refresh token, ``portal.auth.revocation``) is let go of by the receivers of
``offboarded``, sent in the same transaction.
Their jobs are not touched: work already submitted keeps running.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from django.contrib.sessions.models import Session
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from core import audit, realtime, tokens
from core.models import LineMembership, Profile, Role

ACTION = "identity.sync"
OFFBOARD_ACTION = "identity.offboard"
# Sent by ``offboard`` (keyword ``user``) inside its transaction, the person's row locked,
# once the account is closed, and by a deactivation in the Django admin (``core.admin``):
# a receiver drops what else gives access in that transaction, and calls anything outside
# the database after it commits (``transaction.on_commit``).
offboarded = Signal()


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


def _apply(user: Any, role: str, lines: Mapping[Any, bool], managed_lines: Collection[Any]) -> None:
    """Write ``role`` and, among ``managed_lines``, exactly the memberships of ``lines``
    (inside the caller's transaction, the user's row locked)."""
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


def _lock(user: Any) -> None:
    """One writer of a person at a time: two sign-ins at once both added the memberships
    (an IntegrityError) and both audited the one change. Reloads ``is_active``."""
    user.is_active = (
        type(user)
        .objects.select_for_update()
        .filter(pk=user.pk)
        .values_list("is_active", flat=True)
    ).get()


def _forget_cached(user: Any) -> None:
    for cached in ("_portal_role", "_portal_lines"):  # core.roles caches them on the user
        if hasattr(user, cached):
            delattr(user, cached)


def sync_identity(
    user: Any,
    *,
    role: str,
    lines: Mapping[Any, bool],
    managed_lines: Collection[Any],
    source: str,
    reason: str = "",
    source_ip: str | None = None,
    event: str = "sign-in",
) -> bool:
    """Give ``user`` the ``role`` and, among ``managed_lines`` (business lines), exactly the
    memberships of ``lines`` (line -> is_lead). Returns whether anything changed (then
    audited, ``reason`` saying which groups of which ``source`` gave it at which ``event``:
    a ``sign-in`` is recorded as the person's own action, anything else, the directory
    ``sweep``, as the system's)."""
    if role not in Role.values:
        raise ValueError(f"unknown role {role!r}")
    with transaction.atomic():
        _lock(user)
        before = _state(user)
        _apply(user, role, lines, managed_lines)
        after = _state(user)
        changed = before != after
        if changed:
            audit.record(
                user if event == "sign-in" else None,
                ACTION,
                user,
                reason=f"{source} {event}" + (f": {reason}" if reason else ""),
                before=before,
                after=after,
                source_ip=source_ip,
            )
            realtime.close_live_connections(user_pk=user.pk, reason=ACTION)
    _forget_cached(user)
    return changed


def _session_keys(user_pk: Any) -> list[str]:
    """The keys of the unexpired database sessions signed in as ``user_pk`` (sessions are
    not indexed by user: each one is decoded)."""
    wanted = str(user_pk)
    return [
        session.session_key
        for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator()
        if str(session.get_decoded().get("_auth_user_id")) == wanted
    ]


def offboard(user: Any, *, managed_lines: Collection[Any], source: str, reason: str) -> bool:
    """Close ``user``'s account because ``source`` no longer has them (``reason`` says how):
    inactive, researcher, not staff or superuser, none of ``managed_lines``, every API token
    revoked, every session ended. One ``identity.offboard`` record (by the system) with
    what they had; False, writing nothing, when the account was already inactive. Their
    jobs are left running."""
    with transaction.atomic():
        _lock(user)
        if not user.is_active:
            return False
        before = {**_state(user), "active": True}
        _apply(user, Role.RESEARCHER, {}, managed_lines)
        user.is_active = False
        user.save(update_fields=["is_active"])
        revoked = tokens.revoke_all(user)
        offboarded.send(sender=type(user), user=user)
        ended = _session_keys(user.pk)
        Session.objects.filter(session_key__in=ended).delete()
        after = {**_state(user), "active": False}
        audit.record(
            None,
            OFFBOARD_ACTION,
            user,
            reason=f"{source} sweep: {reason}; account deactivated, {revoked} API token(s) "
            f"revoked, {len(ended)} session(s) ended",
            before=before,
            after=after,
        )
        realtime.close_live_connections(user_pk=user.pk, reason=OFFBOARD_ACTION)
    _forget_cached(user)
    return True
