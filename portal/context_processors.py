import logging

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from core.models import Role
from core.roles import role_of
from scheduling.clock import ClockReading, reading

log = logging.getLogger(__name__)


def role(request: HttpRequest) -> dict:
    """Expose the user's role to templates, as its code (for the menu's choices) and in
    words (for the header). Display only: checks happen on the server."""
    code = role_of(getattr(request, "user", None))
    return {
        "portal_role": code,
        "portal_role_label": Role(code).label if code in Role.values else code,
    }


def _reading() -> ClockReading | None:
    try:
        return reading()
    except Exception:  # noqa: BLE001 - the header never breaks a page (an error page without a database)
        log.warning("no cluster clock for the header", exc_info=True)
        return None


def cluster_clock(request: HttpRequest) -> dict:
    """The cluster clock for the header (badge and time): read once per page (one
    query on the simulator), and only if the page shows it."""
    return {"cluster_clock": SimpleLazyObject(_reading)}
