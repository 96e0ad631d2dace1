"""REST: jobs (list, detail, submit, cancel) and nodes."""

from __future__ import annotations

import django_filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import SharedFieldsModelSerializer, client_ip
from quotas.models import Tier
from scheduling import limits
from scheduling.models import Job, Node
from scheduling.selectors import build_placement, list_jobs_for_user, list_nodes_with_usage
from scheduling.services import JobRequest, cancel_job, submit_job


class JobSubmitSerializer(serializers.Serializer):
    """The submission body of API.md; types and bounds only (rules live in the service)."""

    name = serializers.CharField(min_length=1, max_length=limits.NAME_MAX, trim_whitespace=True)
    queue = serializers.CharField(max_length=80, help_text="queue id or name")
    tier = serializers.ChoiceField(choices=Tier.choices, required=False)
    gpus = serializers.IntegerField(min_value=1, max_value=limits.GPUS_MAX)
    gpus_per_node = serializers.IntegerField(
        min_value=1, max_value=limits.GPUS_PER_NODE_MAX, required=False
    )
    gpu_memory_gb = serializers.IntegerField(
        min_value=1, max_value=limits.GPU_MEMORY_GB_MAX, required=False
    )
    rdma = serializers.BooleanField(required=False, allow_null=True, default=None)
    exclusive_node = serializers.BooleanField(required=False, default=False)
    avoid_inference = serializers.BooleanField(required=False, default=False)
    preemptible = serializers.BooleanField(required=False, allow_null=True, default=None)
    max_retries = serializers.IntegerField(
        min_value=0, max_value=limits.MAX_RETRIES_MAX, required=False, default=3
    )
    checkpoint_path = serializers.CharField(
        max_length=limits.CHECKPOINT_PATH_MAX, required=False, allow_blank=True, default=""
    )
    checkpoint_interval_minutes = serializers.IntegerField(
        min_value=1, max_value=limits.CHECKPOINT_INTERVAL_MAX, required=False, default=60
    )
    estimated_runtime_minutes = serializers.IntegerField(
        min_value=1, max_value=limits.RUNTIME_MAX_MINUTES, required=False
    )
    model_name = serializers.CharField(
        max_length=limits.MODEL_NAME_MAX, required=False, allow_blank=True, default=""
    )
    sim_duration_minutes = serializers.IntegerField(
        min_value=1, max_value=limits.RUNTIME_MAX_MINUTES, required=False
    )

    def validate(self, attrs: dict) -> dict:
        unknown = (
            set(self.initial_data) - set(self.fields)
            if hasattr(self.initial_data, "keys")
            else set()
        )
        if unknown:
            raise serializers.ValidationError(
                {name[:50]: ["unknown field"] for name in sorted(unknown)[:20]}
            )
        return attrs


class JobSerializer(SharedFieldsModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    queue = serializers.CharField(source="queue.name", read_only=True)
    business_line = serializers.CharField(source="queue.business_line.name", read_only=True)
    pending_reason = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id", "name", "owner", "queue", "business_line", "tier", "gpus", "gpus_per_node",
            "gpu_memory_gb", "rdma", "exclusive_node", "avoid_inference", "preemptible",
            "max_retries", "checkpoint_path", "checkpoint_interval_minutes",
            "estimated_runtime_minutes", "model_name", "state", "pending_reason",
            "queue_position", "estimated_start", "preemption_count", "retry_count",
            "progress_seconds", "last_checkpoint_at", "borrowed", "submitted_at", "started_at",
            "finished_at", "failure_reason",
        ]  # fmt: skip

    def get_pending_reason(self, obj: Job) -> dict | None:
        if obj.state != Job.State.PENDING or not obj.pending_code:
            return None
        return {
            "code": obj.pending_code,
            "message": obj.pending_message,
            "details": obj.pending_details,
            "remedy": obj.pending_remedy,
        }


class JobEventSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    kind = serializers.CharField()
    message = serializers.CharField()


class PlacementSerializer(serializers.Serializer):
    node = serializers.CharField()
    gpus = serializers.ListField(child=serializers.IntegerField())


class JobDetailSerializer(JobSerializer):
    placement = serializers.SerializerMethodField()
    events = JobEventSerializer(many=True, read_only=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "placement", "events"]

    @extend_schema(responses=PlacementSerializer(many=True))
    def get_placement(self, obj: Job) -> list[dict]:
        return build_placement(obj)


class JobFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=Job.State.choices)
    queue = django_filters.CharFilter(method="filter_queue")
    owner = django_filters.CharFilter(field_name="owner__username")
    mine = django_filters.ChoiceFilter(
        method="filter_mine", choices=[("1", "yes"), ("true", "yes"), ("0", "no"), ("false", "no")]
    )

    class Meta:
        model = Job
        fields = ["state", "queue", "owner", "mine"]

    def filter_queue(self, qs, name, value: str):
        return qs.filter(queue_id=int(value)) if value.isdigit() else qs.filter(queue__name=value)

    def filter_mine(self, qs, name, value: str):
        return qs.filter(owner=self.request.user) if value in ("1", "true") else qs


class JobViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):  # fmt: skip
    """Jobs visible to the caller; POST submits one (see API.md for the body)."""

    filterset_class = JobFilter

    def get_queryset(self):
        qs = list_jobs_for_user(self.request.user)
        if self.action == "retrieve":
            qs = qs.prefetch_related("events")
        return qs

    def get_serializer_class(self):
        if self.action == "create":
            return JobSubmitSerializer
        return JobDetailSerializer if self.action == "retrieve" else JobSerializer

    @extend_schema(request=JobSubmitSerializer, responses={201: JobDetailSerializer})
    def create(self, request: Request, *args, **kwargs) -> Response:
        incoming = JobSubmitSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        job = submit_job(request.user, JobRequest(**incoming.validated_data))
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        job = cancel_job(request.user, job.pk, source_ip=client_ip(request))
        return Response(JobDetailSerializer(job).data)


class NodeSerializer(serializers.ModelSerializer):
    gpus_free = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["name", "rack", "block", "gpu_model", "gpu_memory_gb", "gpus_total",
                  "gpus_free", "rdma", "inference", "state", "state_reason", "health",
                  "health_detail", "residual_gpus"]  # fmt: skip

    def get_gpus_free(self, obj: Node) -> int:
        return max(0, obj.gpus_total - obj.gpus_allocated - obj.residual_gpus)


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Nodes with their state, health and free GPUs (everyone signed in may read)."""

    serializer_class = NodeSerializer
    lookup_field = "name"
    lookup_value_regex = r"[A-Za-z0-9._-]+"
    filterset_fields = ["state", "rack", "health", "gpu_model", "rdma"]

    def get_queryset(self):
        return list_nodes_with_usage().order_by("name")


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=300)


class NodeActionsMixin:
    """cordon / drain / uncordon for on-call and admins (POST {"reason": "..."})."""

    def _act(self, request: Request, name: str, fn) -> Response:
        from core.api import client_ip

        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        fn(request.user, name, body.validated_data["reason"], client_ip(request))
        node = list_nodes_with_usage().get(name=name)
        return Response(NodeSerializer(node).data)


class NodeViewSetWithActions(NodeActionsMixin, NodeViewSet):
    def get_permissions(self):
        from core.api import IsOncallOrAdmin

        if self.action in ("cordon", "drain", "uncordon", "blast_radius"):
            return [*super().get_permissions(), IsOncallOrAdmin()]
        return super().get_permissions()

    @extend_schema(request=ReasonSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, name: str | None = None) -> Response:
        from scheduling.node_services import cordon_node

        return self._act(request, self.get_object().name, cordon_node)

    @extend_schema(request=ReasonSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, name: str | None = None) -> Response:
        from scheduling.node_services import drain_node

        return self._act(request, self.get_object().name, drain_node)

    @extend_schema(request=ReasonSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def uncordon(self, request: Request, name: str | None = None) -> Response:
        from scheduling.node_services import uncordon_node

        return self._act(request, self.get_object().name, uncordon_node)

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"], url_path="blast-radius")
    def blast_radius(self, request: Request, name: str | None = None) -> Response:
        from scheduling.node_services import build_blast_radius

        return Response(build_blast_radius(self.get_object().name))


class FaultSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["residual_process", "gpu_failure", "rdma_degraded", "node_down"]
    )
    node = serializers.CharField(max_length=64)


class AdvanceSerializer(serializers.Serializer):
    seconds = serializers.FloatField(min_value=1, max_value=7 * 86400)


class CycleSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    cluster_time = serializers.CharField()
    duration_ms = serializers.FloatField()
    starts = serializers.IntegerField()
    preemptions = serializers.IntegerField()
    finished = serializers.IntegerField()
    failed = serializers.IntegerField()
    requeued = serializers.IntegerField()
    pending = serializers.IntegerField()
    pending_by_reason = serializers.DictField(child=serializers.IntegerField())


def _busy_response(exc: Exception) -> Response:
    return Response({"errors": {"non_field_errors": [str(exc)]}}, status=status.HTTP_409_CONFLICT)


class SimulatorFaultView(GenericAPIView):
    """Inject a fault on a simulated node (on-call, admin; simulator backend only)."""

    serializer_class = FaultSerializer

    @extend_schema(request=FaultSerializer, responses={200: FaultSerializer})
    def post(self, request: Request) -> Response:
        from scheduling.cluster_lock import ClusterBusy
        from scheduling.sim_services import inject_fault

        body = FaultSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            result = inject_fault(request.user, body.validated_data["kind"],
                                  body.validated_data["node"], client_ip(request))  # fmt: skip
        except ClusterBusy as exc:
            return _busy_response(exc)
        return Response(result)


class SimulatorAdvanceView(GenericAPIView):
    """Move the simulated clock forward (admin; simulator backend only)."""

    serializer_class = AdvanceSerializer

    @extend_schema(request=AdvanceSerializer, responses={200: dict})
    def post(self, request: Request) -> Response:
        from scheduling.cluster_lock import ClusterBusy
        from scheduling.sim_services import advance_clock

        body = AdvanceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            result = advance_clock(request.user, body.validated_data["seconds"], client_ip(request))
        except ClusterBusy as exc:
            return _busy_response(exc)
        return Response(result)


class SchedulerCycleView(GenericAPIView):
    """Run one full loop iteration now and return its summary (admin)."""

    serializer_class = CycleSerializer

    @extend_schema(request=None, responses={200: CycleSerializer})
    def post(self, request: Request) -> Response:
        from scheduling.cluster_lock import ClusterBusy
        from scheduling.cycle import cycle_payload
        from scheduling.sim_services import run_cycle_now

        try:
            record = run_cycle_now(request.user, client_ip(request))
        except ClusterBusy as exc:
            return _busy_response(exc)
        return Response(cycle_payload(record))
