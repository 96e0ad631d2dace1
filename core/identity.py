"""From the organization's groups to the portal's role and line memberships (pure, no Django).

Both organization sign-ins use this one mapping: the LDAP backend with the user's directory
groups (their ``cn``), the OpenID Connect backend with the groups claim of the user info.
The deployment names the groups (docs/deploy.md, "Identity"):

- ``admin_groups`` and ``oncall_groups`` give those roles;
- ``line_groups`` make a member of a business line (group -> line names);
- ``lead_groups`` make a lead of a line (group -> line names); leading a line is the
  team-lead role.

One role per user, the strongest that applies: admin, then on-call, then team lead (leads
at least one line), else researcher. Line memberships are kept whatever the role (an admin
may also lead a line). Group names match case-insensitively (directories mostly compare
``cn`` that way). ``required_groups``, when given, lets in only members of one of them.

``grant_for`` is what a sign-in applies (``portal/auth/sync.py``); the lines it names are
resolved against the business lines there, and only the lines the mapping names are ever
added or removed (``managed_lines``), so memberships given by hand in other lines stay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# The values of core.models.Role (kept here as plain strings: this module imports no Django).
ADMIN = "admin"
ONCALL = "oncall"
TEAM_LEAD = "team_lead"
RESEARCHER = "researcher"


def _fold(name: str) -> str:
    return name.strip().casefold()


def _group_map(pairs: Iterable[tuple[str, str]], what: str) -> dict[str, frozenset[str]]:
    """``[(group, line), ...]`` -> ``{folded group: {lines}}``; refuses empty names."""
    out: dict[str, set[str]] = {}
    for group, line in pairs:
        if not group.strip() or not line.strip():
            raise ValueError(f"{what}: a group and a line name are both needed, got {group}={line}")
        out.setdefault(_fold(group), set()).add(line.strip())
    return {group: frozenset(lines) for group, lines in out.items()}


@dataclass(frozen=True)
class IdentityMapping:
    """Which groups give which role and which line memberships (see the module docstring)."""

    admin_groups: frozenset[str] = frozenset()
    oncall_groups: frozenset[str] = frozenset()
    line_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    lead_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    required_groups: frozenset[str] = frozenset()

    @classmethod
    def build(
        cls,
        *,
        admin_groups: Iterable[str] = (),
        oncall_groups: Iterable[str] = (),
        line_groups: Iterable[tuple[str, str]] = (),
        lead_groups: Iterable[tuple[str, str]] = (),
        required_groups: Iterable[str] = (),
    ) -> IdentityMapping:
        """A mapping from names as written in the configuration (folded here)."""
        return cls(
            admin_groups=frozenset(_fold(g) for g in admin_groups if g.strip()),
            oncall_groups=frozenset(_fold(g) for g in oncall_groups if g.strip()),
            line_groups=_group_map(line_groups, "line groups"),
            lead_groups=_group_map(lead_groups, "lead groups"),
            required_groups=frozenset(_fold(g) for g in required_groups if g.strip()),
        )

    @property
    def managed_lines(self) -> frozenset[str]:
        """Every line the mapping names: memberships of these follow the groups."""
        return frozenset().union(*self.line_groups.values(), *self.lead_groups.values())

    @property
    def known_groups(self) -> frozenset[str]:
        """Every group the mapping names (folded)."""
        return frozenset(
            self.admin_groups | self.oncall_groups | set(self.line_groups) | set(self.lead_groups)
        )


@dataclass(frozen=True)
class Grant:
    """What the groups give: one role and ``{line name: is_lead}``; ``groups`` are the
    mapped groups the user is in (for the audit record)."""

    role: str
    lines: Mapping[str, bool]
    groups: tuple[str, ...]


def grant_for(mapping: IdentityMapping, groups: Iterable[str]) -> Grant | None:
    """The role and lines of a member of ``groups``; None when ``required_groups`` is set
    and the user is in none of them (not let in)."""
    mine = {_fold(g) for g in groups if isinstance(g, str) and g.strip()}
    if mapping.required_groups and not mine & mapping.required_groups:
        return None
    lines: dict[str, bool] = {}
    for group in sorted(mine):
        for line in mapping.line_groups.get(group, ()):
            lines.setdefault(line, False)
        for line in mapping.lead_groups.get(group, ()):
            lines[line] = True
    if mine & mapping.admin_groups:
        role = ADMIN
    elif mine & mapping.oncall_groups:
        role = ONCALL
    elif any(lines.values()):
        role = TEAM_LEAD
    else:
        role = RESEARCHER
    return Grant(
        role=role,
        lines=dict(sorted(lines.items())),
        groups=tuple(sorted(mine & mapping.known_groups)),
    )


def groups_from_claim(value: object) -> list[str]:
    """The groups claim of an OpenID Connect user info as a list of names.

    Providers send a JSON list of strings (most), one string, or nothing; anything else
    (numbers, objects) is not a group and is dropped.
    """
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [item for item in value if isinstance(item, str)]
    return []
