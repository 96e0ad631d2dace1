"""Times as the portal shows them: in the viewer's zone (UTC by default), said so, and
relative times against cluster now (``core.timezones`` picks and activates the zone).

``{% load cluster_time %}``, then:

- ``{{ when|utc }}`` -> ``2026-12-01 03:10 UTC`` (``{{ when|utc:"s" }}`` adds seconds), or
  ``2026-12-01 04:10 CET`` for a viewer in Europe/Paris;
- ``{{ text|in_zone }}`` -> the text with every ``2026-12-01 03:10 UTC`` in it (how the
  engine's verdicts write times, always UTC) shown as ``utc`` shows it;
- ``{% display_zone %}`` -> ``UTC`` or ``Europe/Paris``; ``{% display_zone_names %}`` ->
  ``60=CET;120=CEST`` (what the pages' scripts call the zone at each offset);
- ``{% ago when %}`` -> ``5 min ago`` / ``in 2 h 10 min``, measured from the cluster clock
  (the header's reading, ``cluster_clock``, else ``core.clock.now()``), never from the
  browser's or the server's wall clock: on the simulator they differ by hours.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils import timezone

from core import clock, timezones

register = template.Library()

#: A time as the verdicts write it for people (``scheduling.engine.explain.when``,
#: ``scheduling.verdict_text``): always UTC, to the minute. ``static/js/dom.js`` (``zoned``)
#: reads the same shape.
VERDICT_TIME = re.compile(r"\b(\d{4}-\d\d-\d\d) (\d\d:\d\d) UTC\b")


@register.filter
def utc(value: Any, precision: str = "") -> str:
    """A datetime in the viewer's zone, named: ``Y-m-d H:i UTC`` (``"s"``: with seconds).

    The zone is the one ``core.timezones.TimeZoneMiddleware`` activated (UTC unless the
    user chose another or their browser reported one); UTC is written "UTC"."""
    if not isinstance(value, datetime):
        return "" if value in (None, "") else str(value)
    return timezones.written(value, timezone.get_current_timezone(), seconds=precision == "s")


@register.filter
def in_zone(text: Any) -> str:
    """``text`` (a verdict's message, fact or estimate, written in UTC) with every time in it
    in the viewer's zone, as ``utc`` writes it: a page never mixes zones. UTC: unchanged."""
    if text in (None, ""):
        return ""
    if timezones.is_utc(timezone.get_current_timezone()):
        return str(text)
    return VERDICT_TIME.sub(
        lambda m: utc(datetime.fromisoformat(f"{m[1]}T{m[2]}:00+00:00")), str(text)
    )


@register.simple_tag
def display_zone_names() -> str:
    """The display zone's offsets and their names (``timezones.offset_labels``) for the
    pages' scripts; empty for UTC."""
    return timezones.offset_labels(timezone.get_current_timezone(), datetime.now(UTC).year)


@register.simple_tag
def display_zone() -> str:
    """The IANA name of the zone the page shows times in (``UTC`` by default)."""
    zone = timezone.get_current_timezone()
    return "UTC" if timezones.is_utc(zone) else getattr(zone, "key", str(zone))


def span(seconds: float) -> str:
    """A duration in words: ``45 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s} s"
    minutes = s // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days:,} d {hours} h" if hours else f"{days:,} d"


@register.filter
def minutes(value: Any) -> str:
    """A number of minutes as a duration (``span``): 240 -> ``4 h``, 90 -> ``1 h 30 min``
    (``Dom.span`` says the same on live pages); anything else as it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        return str(value)
    return span(value * 60)


def relative(value: datetime, now: datetime) -> str:
    """``value`` seen from ``now``: ``just now``, ``5 min ago`` or ``in 2 h``."""
    delta = (value - now).total_seconds()
    if abs(delta) < 60:
        return "just now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


@register.simple_tag(takes_context=True)
def ago(context: template.Context, value: Any) -> str:
    """How long ago (or in how long) ``value`` is, on the cluster clock."""
    if not isinstance(value, datetime):
        return ""
    reading = context.get("cluster_clock")
    now = getattr(reading, "now", None) or clock.now()
    return relative(value, now)
