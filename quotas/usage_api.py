"""``GET /api/v1/usage-report/?month=YYYY-MM``: the usage report (``quotas.usage``) as
JSON, and ``/api/v1/usage-report.csv?month=YYYY-MM&by=line|queue|person`` one of its
tables as CSV (``core.csv_export``). The page ``/usage/`` shows the same numbers."""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.csv_export import CSVExportMixin, batched, csv_response
from quotas.usage import Usage, UsageRow
from quotas.usage_views import MONTH_PATTERN, MonthField, UsageQuery, month_report

TABLES = {"line": "lines", "queue": "queues", "person": "people"}
COLUMNS = ("name", "gpu_hours", "share", "quota_gpu_hours", "runs_ended", "running",
           "failed_gpu_hours", "stopped_gpu_hours")  # fmt: skip


def row_data(row: UsageRow) -> dict[str, Any]:
    """A row as the API gives it: GPU-hours to 3 places, the share as a fraction."""
    return {
        "name": row.name,
        "gpu_hours": round(row.gpu_hours, 3),
        "share": None if row.percent is None else round(row.percent / 100, 6),
        # lines and queues: the quota over the period (null: none of its own; people: null)
        "quota_gpu_hours": None if row.quota_gpu_hours is None else round(row.quota_gpu_hours, 3),
        "runs_ended": row.runs,
        "running": row.running,
        "failed_gpu_hours": round(row.wasted_gpu_hours, 3),
        "stopped_gpu_hours": round(row.stopped_gpu_hours, 3),
    }


def report_data(usage: Usage, month: str) -> dict[str, Any]:
    return {
        "month": month,
        "start": usage.start,
        "end": usage.end,
        "until": usage.until,
        "capacity_gpu_hours": round(usage.capacity_gpu_hours, 3),
        "recorded_since": usage.recorded_since,
        "counted_from": usage.counted_from,
        "total": row_data(usage.total),
        **{key: [row_data(r) for r in getattr(usage, key)] for key in TABLES.values()},
    }


def _report(request: Request, takes: tuple[str, ...]) -> tuple[Usage, str]:
    unknown = sorted(set(request.query_params) - set(takes))
    if unknown:
        raise exceptions.ValidationError(
            {name[:50]: [f"unknown filter; takes: {', '.join(takes)}"] for name in unknown[:20]}
        )
    asked = request.query_params.get("month")
    query = UsageQuery({"month": asked or ""})
    if asked == "" or not query.is_valid():  # ``?month=`` asks for no month: refused
        raise exceptions.ValidationError({"month": [MonthField.RULE]})
    usage, first = month_report(request.user, query.cleaned_data["month"])
    return usage, first.strftime("%Y-%m")


MONTH = OpenApiParameter("month", OpenApiTypes.STR, pattern=MONTH_PATTERN,
                         description="a UTC month, YYYY-MM; default the current one")  # fmt: skip


class UsageReportView(APIView):
    """GPU-hours per line, queue and person in a month, of the jobs the caller may see."""

    @extend_schema(parameters=[MONTH], responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        usage, month = _report(request, ("month",))
        return Response(report_data(usage, month))


class UsageReportCSVView(CSVExportMixin, APIView):
    """One table of the usage report as CSV: ``by`` = ``line`` (default), ``queue``,
    ``person``."""

    @extend_schema(
        operation_id="usage_report_csv",
        parameters=[MONTH, OpenApiParameter("by", OpenApiTypes.STR, enum=list(TABLES)),
                    OpenApiParameter("format", OpenApiTypes.STR, enum=["csv"])],
        responses={(200, "text/csv"): OpenApiTypes.STR},
    )  # fmt: skip
    def get(self, request: Request, **kwargs: Any) -> StreamingHttpResponse:
        by = request.query_params.get("by", "line")
        if by not in TABLES:
            raise exceptions.ValidationError({"by": [f"one of {', '.join(TABLES)}"]})
        usage, month = _report(request, ("month", "by", "format"))
        rows = [row_data(r) for r in getattr(usage, TABLES[by])]
        return csv_response(batched(rows), COLUMNS, filename=f"usage-{month}-{by}.csv")
