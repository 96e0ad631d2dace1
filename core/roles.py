"""Roles and line memberships: the base every app's permission predicates are built on.

``role_of`` (one role per user, cached on the user object), the two role tests the base
layer itself needs (``is_admin``, ``is_oncall_or_admin``: admin site, audit log, metrics)
and the user's lines. Who may do what in an app is that app's ``permissions`` module
(``scheduling.permissions``, ``quotas.permissions``, ``monitoring.permissions``); views,
API permissions, services and consumers ask those, and nothing else decides access.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from core.models import LineMembership, Role

User = AbstractBaseUser | AnonymousUser


def role_of(user: User) -> str | None:
    """The user's role, or None for anonymous users."""
    if not user or not user.is_authenticated:
        return None
    cached = getattr(user, "_portal_role", None)
    if cached is None:
        profile = getattr(user, "profile", None)
        cached = profile.role if profile is not None else Role.RESEARCHER
        if user.is_superuser:
            cached = Role.ADMIN
        user._portal_role = cached
    return cached


def is_admin(user: User) -> bool:
    return role_of(user) == Role.ADMIN


def is_oncall_or_admin(user: User) -> bool:
    return role_of(user) in (Role.ONCALL, Role.ADMIN)


def line_ids(user: User) -> set[int]:
    """Lines the user belongs to (as member or lead)."""
    if not user or not user.is_authenticated:
        return set()
    cached = getattr(user, "_portal_lines", None)
    if cached is None:
        cached = set(
            LineMembership.objects.filter(user=user).values_list("business_line_id", flat=True)
        )
        user._portal_lines = cached
    return cached


def line_ids_query(user: User) -> QuerySet:
    """``line_ids`` as a subquery, for filters that should cost no extra round trip."""
    if not user or not user.is_authenticated:
        return LineMembership.objects.none().values("business_line_id")
    return LineMembership.objects.filter(user=user).values("business_line_id")


def led_line_ids(user: User) -> set[int]:
    """Lines the user leads (team leads only)."""
    if role_of(user) != Role.TEAM_LEAD:
        return set()
    return set(
        LineMembership.objects.filter(user=user, is_lead=True).values_list(
            "business_line_id", flat=True
        )
    )
