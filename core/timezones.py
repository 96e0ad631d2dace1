"""Display time zones: every time is stored in UTC; pages show it in the viewer's zone.

The zone is, in order: the user's choice (``Profile.time_zone``, set on ``/account/``),
else the browser's zone from the ``tz`` cookie that ``static/js/tz.js`` sets on the first
visit (``Intl.DateTimeFormat().resolvedOptions().timeZone``), else UTC. Any name not in
``zoneinfo.available_timezones()`` is ignored. ``TimeZoneMiddleware`` activates it with
``django.utils.timezone.activate`` for every page request, whatever its method, so a form
is read back in the zone it was shown in (the Django admin shows a user's dates in the
viewer's zone; its save read them as UTC and moved them by the zone's offset, when POSTs
were left in UTC). It leaves UTC:

- the API (``/api/``): its contract is ISO 8601 UTC (DRF would render in the active zone).

A form that takes a time reads it in that zone too and names it in its labels
(``quotas.forms.ZonedDateTimeField``, the audit page's date filters).

``core.templatetags.cluster_time`` (``|utc``, the header clock) then renders in the
active zone and names it; UTC stays written "UTC".
"""

from __future__ import annotations

import functools
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from urllib.parse import unquote

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

COOKIE = "tz"
UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"})


@functools.cache
def available() -> frozenset[str]:
    """Every IANA zone name this machine knows."""
    return frozenset(zoneinfo.available_timezones())


def valid_zone(name: object) -> str | None:
    """``name`` if it is a known IANA zone (at most 64 characters), else None."""
    if isinstance(name, str) and 0 < len(name) <= 64 and name in available():
        return name
    return None


def zone_choices() -> list[tuple[str, str]]:
    """Sorted (name, name) pairs for a select."""
    return [(name, name) for name in sorted(available())]


def browser_zone(request: HttpRequest) -> str | None:
    """The zone the browser reported in the ``tz`` cookie (URL-encoded by tz.js), if known."""
    return valid_zone(unquote(request.COOKIES.get(COOKIE, "")))


def chosen_zone(user: object) -> str | None:
    """The zone ``user`` chose on ``/account/`` (``Profile.time_zone``), if a known one."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    profile = getattr(user, "profile", None) if hasattr(user, "profile") else None
    return valid_zone(getattr(profile, "time_zone", ""))


def zone_of(request: HttpRequest) -> str:
    """The zone ``request``'s pages display in: the profile's, the cookie's, else UTC."""
    return chosen_zone(getattr(request, "user", None)) or browser_zone(request) or "UTC"


def zone_named(name: str | None) -> tzinfo:
    """The zone called ``name`` (as ``zone_of`` returns it): ``UTC`` itself for UTC, an
    empty or unknown name included."""
    known = valid_zone(name)
    return UTC if known is None or known in UTC_NAMES else zoneinfo.ZoneInfo(known)


def viewer_zone(request: HttpRequest) -> tzinfo:
    """The zone ``request``'s viewer reads times in, for a page or a page's JSON that
    builds its texts itself: the one ``TimeZoneMiddleware`` chose for it
    (``request.display_zone``), else as it would choose."""
    return zone_named(getattr(request, "display_zone", None) or zone_of(request))


def zone_of_recipient(user: object) -> tzinfo:
    """The zone to write times in to ``user`` where no browser is (mail): the zone they
    chose on ``/account/``, else UTC (a browser's cookie is no help there)."""
    return zone_named(chosen_zone(user))


def is_utc(zone: tzinfo) -> bool:
    """Whether ``zone`` is UTC itself (not merely at offset 0 today, as London in winter)."""
    return zone is UTC or getattr(zone, "key", str(zone)) in UTC_NAMES


def label(moment: datetime, zone: tzinfo) -> str:
    """The zone's short name at ``moment`` (``CET``, ``JST``, ``UTC+04`` where the zone has
    no abbreviation, ``UTC`` for UTC)."""
    if is_utc(zone):
        return "UTC"
    name = moment.astimezone(zone).tzname() or getattr(zone, "key", "")
    return f"UTC{name}" if name[:1] in "+-" else name


def written(moment: datetime, zone: tzinfo, *, seconds: bool = False) -> str:
    """``moment`` as a person reads it in ``zone``: ``2026-12-01 12:10 JST`` (``seconds``:
    ``12:10:05 JST``); ``2026-12-01 03:10 UTC`` in UTC. The one shape of a time on the
    pages (``|utc``) and in what the portal writes to a person (mail)."""
    try:
        local = moment.astimezone(UTC if is_utc(zone) else zone)
    except OverflowError:  # the year 1 west of UTC (or 9999 east): only UTC can write it
        local, zone = moment.astimezone(UTC), UTC
    fmt = "-%m-%d %H:%M:%S" if seconds else "-%m-%d %H:%M"  # the year in 4 digits (%Y: "1")
    return f"{local.year:04d}{local.strftime(fmt)} {label(local, zone)}"


def offset_labels(zone: tzinfo, year: int) -> str:
    """``"540=JST"``, ``"60=CET;120=CEST"``: each UTC offset (minutes) ``zone`` has in
    ``year`` and the next, with ``label``'s name for it. The pages hand it to their scripts
    (``<html data-tz-names>``, ``static/js/dom.js``), so a time written in the browser
    names its zone as the server does ("JST", not the browser's "GMT+9")."""
    if is_utc(zone):
        return ""
    names: dict[int, str] = {}
    for y in (year, year + 1):
        for month in range(1, 13):
            moment = datetime(y, month, 1, tzinfo=UTC).astimezone(zone)
            offset = moment.utcoffset()
            if offset is not None:
                names.setdefault(int(offset.total_seconds() // 60), label(moment, zone))
    return ";".join(f"{minutes}={name}" for minutes, name in sorted(names.items()))


class TimeZoneMiddleware:
    """Activates the viewer's zone for page requests, not the API's (module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        zone = "UTC" if request.path_info.startswith("/api/") else zone_of(request)
        request.display_zone = zone  # what the pages show (base.html hands it to the JS)
        if zone == "UTC":
            timezone.deactivate()
        else:
            timezone.activate(zoneinfo.ZoneInfo(zone))
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
