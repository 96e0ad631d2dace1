"""Times as the portal shows them: UTC, said so, and relative times against cluster now.

``{% load cluster_time %}``, then:

- ``{{ when|utc }}`` -> ``2026-12-01 03:10 UTC`` (``{{ when|utc:"s" }}`` adds seconds);
- ``{% ago when %}`` -> ``5 min ago`` / ``in 2 h 10 min``, measured from the cluster clock
  (the header's reading, ``cluster_clock``, else ``core.clock.now()``), never from the
  browser's or the server's wall clock: on the simulator they differ by hours.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import template

from core import clock

register = template.Library()


@register.filter
def utc(value: Any, precision: str = "") -> str:
    """A datetime in UTC with its zone: ``Y-m-d H:i UTC`` (``"s"``: with seconds)."""
    if not isinstance(value, datetime):
        return "" if value in (None, "") else str(value)
    fmt = "%Y-%m-%d %H:%M:%S UTC" if precision == "s" else "%Y-%m-%d %H:%M UTC"
    return value.astimezone(UTC).strftime(fmt)


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
    return f"{days} d {hours} h" if hours else f"{days} d"


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
