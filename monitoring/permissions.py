"""Who may see the dashboard and work the on-call console: the monitoring app's predicates.

Built on ``core.roles``. The dashboard pages, the on-call pages, the alerts API, the
alert services and the ``alerts`` live topic ask these; node actions on the console are
the scheduling app's (``scheduling.permissions.may_operate_nodes``).
"""

from __future__ import annotations

from typing import Any

from core.api import RolePermission
from core.models import Role
from core.roles import is_oncall_or_admin, role_of

DASHBOARD_ONLY = "cluster admins and team leads only"
ONCALL_ONLY = "on-call engineers and admins only"


def may_see_dashboard(user: Any) -> bool:
    """Cluster admins and team leads (utilization, queue pressure, eviction ratio)."""
    return role_of(user) in (Role.ADMIN, Role.TEAM_LEAD)


def may_use_oncall_console(user: Any) -> bool:
    """The console, the rack map, node pages, the alert list and the ``alerts`` topic, and
    acknowledging or resolving alerts: on-call engineers and admins."""
    return is_oncall_or_admin(user)


class UsesOncallConsole(RolePermission):
    """DRF: ``may_use_oncall_console`` (the alerts API)."""

    check = staticmethod(may_use_oncall_console)
    message = ONCALL_ONLY
