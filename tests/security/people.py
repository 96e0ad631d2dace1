"""The people of the permission tables: one persona per kind of user a predicate tells apart.

``make_people()`` writes two business lines and seven users (plus the anonymous one) in
a few inserts, so a test per (persona, predicate) pair stays cheap:

| persona      | role       | lines                 |
| ------------ | ---------- | --------------------- |
| anonymous    | none       | none                  |
| researcher   | researcher | member of ``alpha``   |
| outsider     | researcher | member of ``beta``    |
| lead         | team_lead  | leads ``alpha``       |
| other_lead   | team_lead  | leads ``beta``        |
| oncall       | oncall     | none                  |
| admin        | admin      | none                  |
| superuser    | (none set) | none; Django superuser, so an admin |
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from core.models import LineMembership, Profile
from quotas.models import BusinessLine

PERSONAS = ("anonymous", "researcher", "outsider", "lead", "other_lead", "oncall", "admin",
            "superuser")  # fmt: skip
EVERYONE_SIGNED_IN = frozenset(PERSONAS) - {"anonymous"}
ADMINS = frozenset({"admin", "superuser"})
OPERATORS = ADMINS | {"oncall"}
LEADS = frozenset({"lead", "other_lead"})
ROLES = {"researcher": "researcher", "outsider": "researcher", "lead": "team_lead",
         "other_lead": "team_lead", "oncall": "oncall", "admin": "admin"}  # fmt: skip
MEMBERSHIPS = {"researcher": ("alpha", False), "outsider": ("beta", False),
               "lead": ("alpha", True), "other_lead": ("beta", True)}  # fmt: skip


def make_people() -> dict[str, Any]:
    """The personas by name, and the lines under ``"lines"`` (``{"alpha": ..., "beta": ...}``)."""
    lines = {
        name: BusinessLine.objects.create(name=name, display_name=name.title(), quota_gpus=8)
        for name in ("alpha", "beta")
    }
    users = get_user_model().objects
    people: dict[str, Any] = {"anonymous": AnonymousUser(), "lines": lines}
    for name, role in ROLES.items():
        people[name] = users.create_user(name, f"{name}@example.org")
        Profile.objects.create(user=people[name], role=role)
    people["superuser"] = users.create_superuser("superuser", "root@example.org", "x")
    for name, (line, is_lead) in MEMBERSHIPS.items():
        LineMembership.objects.create(user=people[name], business_line=lines[line], is_lead=is_lead)
    return people


def table_cases(table: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every ``(predicate, persona)`` pair of a table (predicate -> personas it lets in)."""
    return [(predicate, persona) for predicate in sorted(table) for persona in PERSONAS]


def answers_as_table(module: ModuleType, table: dict[str, set[str]], people: dict[str, Any],
                     predicate: str, persona: str) -> bool:  # fmt: skip
    """Whether ``module.<predicate>`` lets ``persona`` in exactly when ``table`` says so."""
    return getattr(module, predicate)(people[persona]) is (persona in table[predicate])


def public_predicates(module: ModuleType) -> set[str]:
    """The public functions a permissions module defines (so each must be in a table)."""
    return {
        name
        for name, fn in inspect.getmembers(module, inspect.isfunction)
        if fn.__module__ == module.__name__ and not name.startswith("_")
    }


class FakeRequest:
    """Enough of a request for a DRF permission's ``has_permission``."""

    def __init__(self, user: Any) -> None:
        self.user = user
