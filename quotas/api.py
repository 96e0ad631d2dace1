"""REST: business lines and queues with their contracts and live usage."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers, viewsets

from core.api import AsciiIdLookup
from quotas.models import BusinessLine, Queue
from scheduling.selectors import QueueUsage, build_line_usage, build_queue_usage


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
    pending_gpus = UsageField()

    class Meta:
        model = BusinessLine
        fields = ["id", "name", "display_name", "quota_gpus", "guarantee_gpus",
                  "used_gpus", "borrowed_gpus", "pending_gpus"]  # fmt: skip


class QueueSerializer(BusinessLineSerializer):
    business_line = serializers.SlugRelatedField(slug_field="name", read_only=True)
    running_jobs = UsageField()
    pending_jobs = UsageField()
    eviction_ratio = serializers.SerializerMethodField()

    class Meta:
        model = Queue
        fields = ["id", "name", "business_line", "nature", "tier", "quota_gpus", "guarantee_gpus",
                  "used_gpus", "borrowed_gpus", "pending_gpus", "running_jobs", "pending_jobs",
                  "eviction_ratio"]  # fmt: skip

    def get_eviction_ratio(self, obj: Queue) -> float:
        return float(self.context.get("eviction", {}).get(obj.pk, 0.0))


class BusinessLineViewSet(AsciiIdLookup, viewsets.ReadOnlyModelViewSet):
    """Business lines with quota, guarantee and usage (everyone signed in may read)."""

    queryset = BusinessLine.objects.all()
    serializer_class = BusinessLineSerializer
    filterset_fields = ["name"]

    def get_serializer_context(self) -> dict:
        if getattr(self, "swagger_fake_view", False):  # drawing the schema reads no rows
            return {**super().get_serializer_context(), "usage": {}}
        return {**super().get_serializer_context(), "usage": build_line_usage()}


class QueueViewSet(AsciiIdLookup, viewsets.ReadOnlyModelViewSet):
    """Queues with tier, contract and usage (everyone signed in may read)."""

    queryset = Queue.objects.select_related("business_line")
    serializer_class = QueueSerializer
    filterset_fields = ["tier", "business_line__name", "name"]

    def get_serializer_context(self) -> dict:
        from monitoring.rollup import get_eviction_ratios

        if getattr(self, "swagger_fake_view", False):  # drawing the schema reads no rows
            return {**super().get_serializer_context(), "usage": {}, "eviction": {}}
        return {
            **super().get_serializer_context(),
            "usage": build_queue_usage(),
            "eviction": get_eviction_ratios(),
        }
