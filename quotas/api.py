"""REST: business lines and queues with their contracts and live usage."""

from __future__ import annotations

from rest_framework import serializers, viewsets

from quotas.models import BusinessLine, Queue
from scheduling.selectors import QueueUsage, build_line_usage, build_queue_usage


class BusinessLineSerializer(serializers.ModelSerializer):
    used_gpus = serializers.SerializerMethodField()
    borrowed_gpus = serializers.SerializerMethodField()
    pending_gpus = serializers.SerializerMethodField()

    class Meta:
        model = BusinessLine
        fields = ["id", "name", "display_name", "quota_gpus", "guarantee_gpus",
                  "used_gpus", "borrowed_gpus", "pending_gpus"]  # fmt: skip

    def _usage(self, obj: BusinessLine) -> QueueUsage:
        return self.context["usage"].get(obj.pk, QueueUsage())

    def get_used_gpus(self, obj: BusinessLine) -> int:
        return self._usage(obj).used_gpus

    def get_borrowed_gpus(self, obj: BusinessLine) -> int:
        return self._usage(obj).borrowed_gpus

    def get_pending_gpus(self, obj: BusinessLine) -> int:
        return self._usage(obj).pending_gpus


class QueueSerializer(serializers.ModelSerializer):
    business_line = serializers.SlugRelatedField(slug_field="name", read_only=True)
    used_gpus = serializers.SerializerMethodField()
    borrowed_gpus = serializers.SerializerMethodField()
    pending_gpus = serializers.SerializerMethodField()
    running_jobs = serializers.SerializerMethodField()
    pending_jobs = serializers.SerializerMethodField()
    eviction_ratio = serializers.SerializerMethodField()

    class Meta:
        model = Queue
        fields = ["id", "name", "business_line", "nature", "tier", "quota_gpus", "guarantee_gpus",
                  "used_gpus", "borrowed_gpus", "pending_gpus", "running_jobs", "pending_jobs",
                  "eviction_ratio"]  # fmt: skip

    def _usage(self, obj: Queue) -> QueueUsage:
        return self.context["usage"].get(obj.pk, QueueUsage())

    def get_used_gpus(self, obj: Queue) -> int:
        return self._usage(obj).used_gpus

    def get_borrowed_gpus(self, obj: Queue) -> int:
        return self._usage(obj).borrowed_gpus

    def get_pending_gpus(self, obj: Queue) -> int:
        return self._usage(obj).pending_gpus

    def get_running_jobs(self, obj: Queue) -> int:
        return self._usage(obj).running_jobs

    def get_pending_jobs(self, obj: Queue) -> int:
        return self._usage(obj).pending_jobs

    def get_eviction_ratio(self, obj: Queue) -> float:
        return float(self.context.get("eviction", {}).get(obj.pk, 0.0))


class BusinessLineViewSet(viewsets.ReadOnlyModelViewSet):
    """Business lines with quota, guarantee and usage (everyone signed in may read)."""

    queryset = BusinessLine.objects.all()
    serializer_class = BusinessLineSerializer
    filterset_fields = ["name"]

    def get_serializer_context(self) -> dict:
        return {**super().get_serializer_context(), "usage": build_line_usage()}


class QueueViewSet(viewsets.ReadOnlyModelViewSet):
    """Queues with tier, contract and usage (everyone signed in may read)."""

    queryset = Queue.objects.select_related("business_line")
    serializer_class = QueueSerializer
    filterset_fields = ["tier", "business_line__name", "name"]

    def get_serializer_context(self) -> dict:
        from monitoring.rollup import get_eviction_ratios

        return {
            **super().get_serializer_context(),
            "usage": build_queue_usage(),
            "eviction": get_eviction_ratios(),
        }
