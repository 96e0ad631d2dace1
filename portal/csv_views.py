"""The API's CSV exports (#18): the jobs list, the queues and a line's usage history.

``/api/v1/jobs.csv`` and ``/api/v1/queues.csv`` are the JSON lists' own views with
``core.csv_export.CSVExportMixin``: the same visibility, the same filters (an unknown one
is a 400), every selected row. ``/api/v1/business-lines/{id}/usage.csv`` is the line's
usage samples (the line's total and each of its queues, one row a minute, cluster time)
over ``?days=`` (1-90, default the quota policy's ``usage_days``; samples are kept 30
days, ``quotas.services.USAGE_RETENTION``), every sample of the period. The pages'
"Download CSV" links point here with the page's filters. Each is streamed
(``core.csv_export.csv_response``).
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import F
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.views import APIView

from core.csv_export import EXPORT_BATCH, CSVExportMixin, batched, csv_response
from core.security import is_ascii_number
from quotas.api import QueueViewSet
from quotas.models import BusinessLine, QuotaPolicy, UsageSample
from scheduling.api import JobViewSet
from scheduling.clock import cluster_now

MAX_DAYS = 90


# A ``.csv`` path answers CSV only: its ``format`` parameter takes ``csv`` alone.
CSV_ONLY = OpenApiParameter("format", OpenApiTypes.STR, enum=["csv"], required=False)


class UsageQuery(serializers.Serializer):
    """The usage export's query: ``days``."""

    days = serializers.IntegerField(
        min_value=1, max_value=MAX_DAYS, required=False, help_text="default: usage_days"
    )


def _csv_schema(
    operation_id: str, description: str, parameters=(), filters: bool = True
) -> extend_schema:
    return extend_schema(
        operation_id=operation_id,
        description=description,
        filters=filters,
        parameters=[CSV_ONLY, *parameters],
        responses={(200, "text/csv"): OpenApiTypes.STR},
    )


@extend_schema_view(
    list=_csv_schema("jobs_csv", "The jobs list as CSV: same filters, every row, times in UTC.")
)
class JobCSVViewSet(CSVExportMixin, JobViewSet):
    """``GET /api/v1/jobs.csv``: the jobs the caller may see, filtered as ``jobs/``."""

    csv_filename = "jobs.csv"
    csv_columns = (
        "id", "name", "owner", "queue", "business_line", "tier", "state", "gpus",
        "gpus_per_node", "preemptible", "pending_reason.code", "pending_reason.message",
        "queue_position", "estimated_start", "preemption_count", "retry_count",
        "submitted_at", "started_at", "finished_at", "failure_reason", "model_name",
    )  # fmt: skip
    csv_time_columns = ("estimated_start", "submitted_at", "started_at", "finished_at")


@extend_schema_view(list=_csv_schema("queues_csv", "The queues as CSV: same filters, every row."))
class QueueCSVViewSet(CSVExportMixin, QueueViewSet):
    """``GET /api/v1/queues.csv``: every queue with its contract and use, as ``queues/``."""

    csv_filename = "queues.csv"
    csv_columns = (
        "id", "name", "business_line", "tier", "quota_gpus", "guarantee_gpus", "used_gpus",
        "borrowed_gpus", "pending_gpus", "running_jobs", "pending_jobs", "eviction_ratio",
        "eviction_window_seconds",
    )  # fmt: skip


@extend_schema_view(
    get=_csv_schema(
        "business_lines_usage_csv",
        "A line's usage samples (line total and each queue, one a minute) as CSV.",
        parameters=[
            OpenApiParameter("id", OpenApiTypes.STR, OpenApiParameter.PATH, pattern="^[0-9]+$"),
            UsageQuery,
        ],
        filters=False,
    )
)
class LineUsageCSVView(CSVExportMixin, APIView):
    """``GET /api/v1/business-lines/{id}/usage.csv?days=N``: the line's usage history."""

    csv_columns = ("at", "business_line", "queue", "used_gpus", "borrowed_gpus", "pending_gpus")
    csv_time_columns = ("at",)

    def get(self, request: Request, pk: str, **kwargs) -> StreamingHttpResponse:
        unknown = sorted(set(request.query_params) - {"days", "format"})
        if unknown:
            raise exceptions.ValidationError(
                {name[:50]: ["unknown filter; takes: days"] for name in unknown[:20]}
            )
        if not is_ascii_number(pk) or len(pk) > 18:
            raise exceptions.NotFound()
        line = BusinessLine.objects.filter(pk=int(pk)).first()
        if line is None:
            raise exceptions.NotFound()
        days_text = request.query_params.get("days")
        if days_text is None:
            days = QuotaPolicy.load().usage_days
        elif is_ascii_number(days_text) and len(days_text) <= 6 and 1 <= int(days_text) <= MAX_DAYS:
            days = int(days_text)
        else:
            raise exceptions.ValidationError({"days": [f"whole days from 1 to {MAX_DAYS}"]})
        now = cluster_now()
        samples = (
            UsageSample.objects.filter(
                business_line=line, at__gte=now - timedelta(days=days), at__lte=now
            )
            .order_by("at", F("queue__name").asc(nulls_first=True), "id")
            .values_list("at", "queue__name", "used_gpus", "borrowed_gpus", "pending_gpus")
        )
        # Every sample of the period: at most USAGE_RETENTION of minutes per series, so no
        # row cap (a cap kept the oldest 100,000 rows: under 14 days of a four-queue line).
        rows = (
            {"at": at, "business_line": line.name, "queue": queue or "", "used_gpus": used,
             "borrowed_gpus": borrowed, "pending_gpus": pending}
            for at, queue, used, borrowed, pending in samples.iterator(chunk_size=EXPORT_BATCH)
        )  # fmt: skip
        return csv_response(
            batched(rows),
            self.csv_columns,
            self.csv_time_columns,
            filename=f"usage-{line.name}.csv",
        )
