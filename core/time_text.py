"""Times that people and programs send: the API's RFC 3339 text (``2026-12-01T14:00:00Z``,
a zone required) and a form's aware datetime (read in the viewer's zone), both read as UTC
by ``parse_time``. One reader for every write path that takes a time (a maintenance
window's start, a job's earliest start)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError

TIME_HELP = "ISO 8601 with a zone, e.g. 2026-12-01T14:00:00Z"
# RFC 3339 (the profile of ISO 8601 the API schema calls ``date-time``): a zone is required.
RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d{1,9})?([Zz]|[+-]\d\d:\d\d)", re.ASCII)


def parse_time(value: Any, field: str, ahead: timedelta) -> datetime:
    """An aware datetime (the form's), or RFC 3339 text (the API's), as UTC; else a
    ``ValidationError`` on ``field`` (``ahead``: the furthest the caller takes, said when a
    time is beyond what Python can even hold)."""
    if isinstance(value, str):
        if not RFC3339.fullmatch(value):
            problem = "say the zone" if RFC3339.fullmatch(value + "Z") else "not a time"
            raise ValidationError({field: [f"{problem}: {TIME_HELP}"]})
        text = re.sub(r"(\.\d{6})\d+", r"\1", value.upper())  # Python keeps microseconds
        try:
            value = datetime.fromisoformat(text)
        except ValueError as err:
            raise ValidationError({field: [f"no such date or time: {value}"]}) from err
    if not isinstance(value, datetime):
        raise ValidationError({field: [f"not a time: {TIME_HELP}"]})
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError({field: [f"say the zone: {TIME_HELP}"]})
    try:
        return value.astimezone(UTC)
    except OverflowError as err:  # past year 9999, or before year 1, once in UTC
        problem = "too far in the past" if value.year == 1 else f"at most {ahead.days} days ahead"
        raise ValidationError({field: [problem]}) from err
