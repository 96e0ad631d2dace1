"""REST: business lines and queues with their contracts and live usage.

Every number comes from the one computation the pages and ``/metrics`` use:
``scheduling.selectors.build_usage`` (``borrowed_gpus``: use beyond the row's own quota,
``max(0, used - quota)``, 0 without one; ``within_quota_gpus = used - borrowed``) and the
latest rollup's eviction figures (``eviction_ratio`` over ``eviction_window_seconds``,
null while the window holds no data yet, read from the sample at ``eviction_sampled_at``).
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers, viewsets

from core.api import AsciiIdLookup
from quotas.models import BusinessLine, Queue
from scheduling.selectors import QueueUsage, build_usage


@extend_schema_field(OpenApiTypes.INT)
class UsageField(serializers.Field):
    """One number of the row's usage (the ``QueueUsage`` field of the same name), read from
    ``context["usage"]`` by the row's id: the view computes all rows' usage in one go."""

    def __init__(self) -> None:
        super().__init__(read_only=True, source="*")

    def to_representation(self, obj: BusinessLine | Queue) -> int:
        return getattr(self.context["usage"].get(obj.pk, QueueUsage()), self.field_name)


class BusinessLineSerializer(serializers.ModelSerializer):
    used_gpus = UsageField()
    borrowed_gpus = UsageField()
    within_quota_gpus = UsageField()
    pending_gpus = UsageField()
    running_jobs = UsageField()
    pending_jobs = UsageField()

    class Meta:
        model = BusinessLine
        fields = ["id", "name", "display_name", "quota_gpus", "guarantee_gpus",
                  "used_gpus", "borrowed_gpus", "within_quota_gpus", "pending_gpus",
                  "running_jobs", "pending_jobs"]  # fmt: skip


class QueueSerializer(BusinessLineSerializer):
    business_line = serializers.SlugRelatedField(slug_field="name", read_only=True)
    eviction_ratio = serializers.SerializerMethodField()
    eviction_window_seconds = serializers.SerializerMethodField()
    eviction_sampled_at = serializers.SerializerMethodField()

    class Meta:
        model = Queue
        fields = ["id", "name", "business_line", "nature", "tier", "quota_gpus", "guarantee_gpus",
                  "used_gpus", "borrowed_gpus", "within_quota_gpus", "pending_gpus",
                  "running_jobs", "pending_jobs", "eviction_ratio",
                  "eviction_window_seconds", "eviction_sampled_at", "max_time_limit_minutes",
                  "default_time_limit_minutes"]  # fmt: skip

    @extend_schema_field(serializers.FloatField(allow_null=True))  # null: no data yet
    def get_eviction_ratio(self, obj: Queue) -> float | None:
        """Evicted over delivered GPU-seconds in the window, 0..1; null: no data yet."""
        figures = self.context.get("eviction")
        return None if figures is None else figures.ratio(obj.pk)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_eviction_window_seconds(self, obj: Queue) -> int | None:
        figures = self.context.get("eviction")
        return None if figures is None else figures.window_s

    @extend_schema_field(serializers.DateTimeField(allow_null=True))  # null: no sample yet
    def get_eviction_sampled_at(self, obj: Queue) -> str | None:
        """Cluster time of the rollup sample the eviction ratio is read from (the pages'
        "as of the rollup sample at ..."), ISO 8601 UTC."""
        figures = self.context.get("eviction")
        if figures is None or figures.sampled_at is None:
            return None
        return serializers.DateTimeField().to_representation(figures.sampled_at)


class BusinessLineViewSet(AsciiIdLookup, viewsets.ReadOnlyModelViewSet):
    """Business lines with quota, guarantee and usage (everyone signed in may read)."""

    queryset = BusinessLine.objects.all()
    serializer_class = BusinessLineSerializer
    filterset_fields = ["name"]

    def get_serializer_context(self) -> dict:
        if getattr(self, "swagger_fake_view", False):  # drawing the schema reads no rows
            return {**super().get_serializer_context(), "usage": {}}
        return {**super().get_serializer_context(), "usage": build_usage().lines}


class QueueViewSet(AsciiIdLookup, viewsets.ReadOnlyModelViewSet):
    """Queues with tier, contract and usage (everyone signed in may read)."""

    queryset = Queue.objects.select_related("business_line")
    serializer_class = QueueSerializer
    filterset_fields = ["tier", "business_line__name", "name"]

    def get_serializer_context(self) -> dict:
        from monitoring.rollup import get_eviction_figures

        if getattr(self, "swagger_fake_view", False):  # drawing the schema reads no rows
            return {**super().get_serializer_context(), "usage": {}, "eviction": None}
        return {
            **super().get_serializer_context(),
            "usage": build_usage().queues,
            "eviction": get_eviction_figures(),
        }
