"""Who may request, decide, withdraw and read quota governance: the quotas app's predicates.

Built on ``core.roles``. The quota pages and API, the services and the selectors ask
these; the services re-check every one (a hidden button is never the only guard).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied

from core.roles import is_admin, led_line_ids, line_ids

if TYPE_CHECKING:
    from quotas.models import BusinessLine, QuotaRequest


def may_request(user: Any) -> bool:
    """Team leads may request, for the lines they lead."""
    return bool(led_line_ids(user))


def may_request_for_line(user: Any, line_id: int) -> bool:
    """A team lead of that line."""
    return line_id in led_line_ids(user)


def may_decide(user: Any) -> bool:
    """Approve or reject: cluster admins."""
    return is_admin(user)


def may_withdraw(user: Any, req: QuotaRequest) -> bool:
    """The requester, or a lead of the request's line."""
    return req.requester_id == getattr(user, "pk", None) or may_request_for_line(
        user, req.business_line_id
    )


def sees_all_requests(user: Any) -> bool:
    """Admins see every request; others the requests of their lines."""
    return is_admin(user)


def may_see_line_history(user: Any, line: BusinessLine) -> bool:
    """A line's contract history (with reasons): its members and admins."""
    return is_admin(user) or line.pk in line_ids(user)


def ensure_may_request(user: Any) -> None:
    """Raise ``PermissionDenied`` (403) unless ``may_request``."""
    if not may_request(user):
        raise PermissionDenied("only a team lead may request quota, for a line they lead")
