"""CSV exports of API lists (``/api/v1/jobs.csv``, ``queues.csv``, a line's ``usage.csv``).

Built on the standard library's ``csv``: ``CSVRenderer`` is a DRF renderer (format ``csv``,
so DRF's format suffix ``.csv`` and ``?format=csv`` choose it) and ``CSVExportMixin`` makes
a list view export every row its filters select, unpaginated, up to ``MAX_ROWS``; a
selection larger than that is cut at ``MAX_ROWS`` rows and says so in the
``X-Export-Truncated`` header (narrow the filters, or page with ``limit``/``offset``).

Cells are safe to open in a spreadsheet: a text cell starting with ``=``, ``+``, ``-``,
``@`` (or a tab or carriage return, which some spreadsheets skip before reading a
formula) gets a leading apostrophe, as OWASP advises against formula injection. Numbers
stay numbers. Times are ISO 8601 UTC (``2026-12-01T03:10:00Z``) whatever zone the
request displays in. Errors stay JSON in the API's envelope.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response

MAX_ROWS = 100_000
TRUNCATED_HEADER = "X-Export-Truncated"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def escape_formula(text: str) -> str:
    """``text`` made inert for spreadsheets: prefixed with ``'`` if it could start a formula."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def iso_utc(value: datetime) -> str:
    """A datetime as ISO 8601 in UTC with ``Z`` (naive values are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def cell(value: Any, *, is_time: bool = False) -> str | int | float:
    """One CSV cell: numbers as numbers, times in ISO UTC, text escaped, the rest as JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return value
    if isinstance(value, datetime):
        return iso_utc(value)
    if is_time and isinstance(value, str) and value:
        try:
            return iso_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            pass
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return escape_formula(str(value))


def _lookup(row: Any, path: str) -> Any:
    """``row["a"]["b"]`` for ``path`` ``"a.b"`` (None where a part is missing)."""
    for part in path.split("."):
        if not isinstance(row, dict):
            return None
        row = row.get(part)
    return row


def write_csv(rows: Iterable[Any], columns: Sequence[str], time_columns: Iterable[str] = ()) -> str:
    """The CSV text of ``rows`` (mappings) with a header of ``columns`` (dotted paths)."""
    times = frozenset(time_columns)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([escape_formula(c) for c in columns])
    for row in rows:
        writer.writerow([cell(_lookup(row, c), is_time=c in times) for c in columns])
    return out.getvalue()


class CSVRenderer(BaseRenderer):
    """Renders a list (or a page's ``results``) with the view's ``csv_columns``."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None):
        view = (renderer_context or {}).get("view")
        rows = data.get("results", []) if isinstance(data, dict) else (data or [])
        columns = getattr(view, "csv_columns", None) or (list(rows[0]) if rows else [])
        return write_csv(rows, columns, getattr(view, "csv_time_columns", ())).encode("utf-8")


class CSVExportMixin:
    """For a DRF list view: JSON as before, plus CSV of every row the filters select.

    Set ``csv_columns`` (dotted paths into the serialized row), ``csv_time_columns`` and
    ``csv_filename``. The CSV is not paginated (``limit``/``offset`` still apply if
    given); a refusal (400, 403, 404) is JSON, not a one-line CSV.
    """

    renderer_classes = [JSONRenderer, CSVRenderer]
    csv_columns: Sequence[str] = ()
    csv_time_columns: Sequence[str] = ()
    csv_filename = "export.csv"

    def _wants_csv(self) -> bool:
        renderer = getattr(self.request, "accepted_renderer", None)
        return getattr(renderer, "format", None) == "csv"

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        # a ``.csv`` path answers CSV only: ``?format=`` anything else is a 400, not ignored
        asked = request.query_params.get("format")
        if asked is not None and asked != "csv" and self.format_kwarg == "csv":
            raise ValidationError({"format": ["this path answers csv only"]})

    def paginate_queryset(self, queryset):
        if self._wants_csv() and not {"limit", "offset"} & set(self.request.query_params):
            return None  # the whole selection, not a page
        return super().paginate_queryset(queryset)

    def filter_queryset(self, queryset):
        queryset = super().filter_queryset(queryset)
        if self._wants_csv() and hasattr(queryset, "__getitem__"):
            queryset = queryset[: MAX_ROWS + 1]  # one more: finalize_response says it was cut
        return queryset

    def finalize_response(self, request, response, *args, **kwargs):
        if response.status_code >= 400 and self._wants_csv():
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        response = super().finalize_response(request, response, *args, **kwargs)
        if self._wants_csv() and response.status_code < 400 and isinstance(response, Response):
            response["Content-Disposition"] = f'attachment; filename="{self.csv_filename}"'
            if isinstance(response.data, list) and len(response.data) > MAX_ROWS:
                response.data = response.data[:MAX_ROWS]
                response[TRUNCATED_HEADER] = (
                    f"{MAX_ROWS} rows; more matched: narrow the filters or page with limit and offset"
                )
        return response
