"""CSV exports of API lists (``/api/v1/jobs.csv``, ``queues.csv``, a line's ``usage.csv``).

Built on the standard library's ``csv``. ``CSVExportMixin`` makes a DRF list view answer
``.csv`` (DRF's format suffix, or ``?format=csv``) with every row its filters select,
unpaginated, up to ``MAX_ROWS``; a selection larger than that is cut at ``MAX_ROWS`` rows
and says so in the ``X-Export-Truncated`` header (narrow the filters, or page with
``limit``/``offset``, which ``CSVRenderer`` renders as one page).

An export is streamed (``csv_response``): the selection's ids are read first, then rows
are read, serialized and written ``EXPORT_BATCH`` at a time, so a 100,000-row export holds
one batch in memory, not every row's serialized form (session 31 measured 577 MiB for an
86,000-job export built whole, 56 MiB streamed). The web server
(``portal.http_threads``) joins the chunks in its pool thread and sends the bytes whole.
Every batch reads the request's one instant of the cluster clock.

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
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from django.http import StreamingHttpResponse
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer

from core import clock

MAX_ROWS = 100_000
EXPORT_BATCH = 2_000
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


def write_csv(
    rows: Iterable[Any],
    columns: Sequence[str],
    time_columns: Iterable[str] = (),
    header: bool = True,
) -> str:
    """The CSV text of ``rows`` (mappings), after a header of ``columns`` (dotted paths)
    unless ``header`` is false."""
    times = frozenset(time_columns)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    if header:
        writer.writerow([escape_formula(c) for c in columns])
    for row in rows:
        writer.writerow([cell(_lookup(row, c), is_time=c in times) for c in columns])
    return out.getvalue()


def batched(items: Iterable[Any], size: int | None = None) -> Iterator[list[Any]]:
    """``items`` in consecutive lists of ``size`` (default ``EXPORT_BATCH``), the last maybe
    shorter (Python 3.12's ``itertools.batched``); an iterator is read one batch at a time."""
    pending = iter(items)
    while chunk := list(islice(pending, size or EXPORT_BATCH)):
        yield chunk


def csv_response(
    batches: Iterable[Iterable[Any]],
    columns: Sequence[str],
    time_columns: Iterable[str] = (),
    *,
    filename: str,
    truncated: bool = False,
) -> StreamingHttpResponse:
    """A streamed CSV download: the header, then each of ``batches`` (rows as mappings,
    read lazily, one batch at a time) at the request's one cluster instant. ``truncated``:
    the selection was cut at ``MAX_ROWS``, and the ``X-Export-Truncated`` header says so."""
    at = clock.now()
    time_columns = tuple(time_columns)

    def chunks() -> Iterator[bytes]:
        yield write_csv((), columns).encode("utf-8")
        pending = iter(batches)
        while True:
            with clock.pinned(at):
                rows = next(pending, None)
                if rows is None:
                    return
                text = write_csv(rows, columns, time_columns, header=False)
            yield text.encode("utf-8")

    response = StreamingHttpResponse(chunks(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    if truncated:
        response[TRUNCATED_HEADER] = (
            f"{MAX_ROWS} rows; more matched: narrow the filters or page with limit and offset"
        )
    return response


class CSVRenderer(BaseRenderer):
    """Renders one page (``limit``/``offset`` given) or a list with the view's
    ``csv_columns``; whole selections are streamed by ``CSVExportMixin`` instead."""

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
    ``csv_filename``. The CSV is not paginated and is streamed (``csv_response``);
    ``limit``/``offset``, if given, still select one page. A refusal (400, 403, 404) is
    JSON, not a one-line CSV.
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

    def list(self, request, *args, **kwargs):
        if not self._wants_csv() or {"limit", "offset"} & set(request.query_params):
            return super().list(request, *args, **kwargs)
        queryset = self.filter_queryset(self.get_queryset())
        ids = list(queryset.values_list("pk", flat=True)[: MAX_ROWS + 1])
        serializer_class = self.get_serializer_class()
        context = self.get_serializer_context()

        def rows(chunk: Sequence[Any]) -> list:
            # in the selection's order; a row deleted since the ids were read is skipped
            objects = queryset.filter(pk__in=chunk)
            return serializer_class(objects, many=True, context=context).data

        return csv_response(
            (rows(chunk) for chunk in batched(ids[:MAX_ROWS])),
            self.csv_columns,
            self.csv_time_columns,
            filename=self.csv_filename,
            truncated=len(ids) > MAX_ROWS,
        )

    def finalize_response(self, request, response, *args, **kwargs):
        if response.status_code >= 400 and self._wants_csv():
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        response = super().finalize_response(request, response, *args, **kwargs)
        if self._wants_csv() and response.status_code < 400 and not response.streaming:
            response["Content-Disposition"] = f'attachment; filename="{self.csv_filename}"'
        return response
