"""REST: ``/api/v1/nodes/`` (API.md): nodes with state, health and free GPUs, and the
on-call actions cordon / drain / uncordon (POST ``{"reason": "..."}``) and blast radius;
``/api/v1/maintenance/``: scheduled maintenance (list, schedule, cancel).

Thin: reads from ``scheduling.nodes.selectors``, writes through
``scheduling.nodes.services``; the actions are for ``scheduling.permissions.OperatesNodes``.
"""

from __future__ import annotations

from collections.abc import Callable

import django_filters
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import PARAMETER_TEXT, AsciiIdLookup, StrictSerializer, client_ip
from core.security import SafeJSONParser
from scheduling.api import TimeText, busy
from scheduling.cluster_lock import ClusterBusy
from scheduling.models import MaintenanceWindow, Node
from scheduling.nodes.maintenance import MAX_NODES, TIME_HELP, cancel_window, create_window
from scheduling.nodes.selectors import (
    build_blast_radius,
    free_gpus,
    list_nodes_with_usage,
    maintenance_windows,
)
from scheduling.nodes.services import REASON_MAX, cordon_node, drain_node, uncordon_node
from scheduling.permissions import OperatesNodes

OPERATOR_ACTIONS = ("cordon", "drain", "uncordon", "blast_radius")


class NodeSerializer(serializers.ModelSerializer):
    gpus_free = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["name", "rack", "block", "gpu_model", "gpu_memory_gb", "gpus_total",
                  "gpus_free", "rdma", "inference", "state", "state_reason", "health",
                  "health_detail", "residual_gpus", "inference_gpus"]  # fmt: skip

    def get_gpus_free(self, obj: Node) -> int:
        return free_gpus(obj.gpus_total, obj.gpus_allocated, obj.residual_gpus, obj.inference_gpus)


class ReasonSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=REASON_MAX)


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Nodes with their state, health and free GPUs (everyone signed in may read);
    cordon / drain / uncordon and the blast radius for on-call engineers and admins."""

    serializer_class = NodeSerializer
    lookup_field = "name"
    lookup_value_regex = r"[A-Za-z0-9._-]+"
    filterset_fields = ["state", "rack", "health", "gpu_model", "rdma"]

    def get_queryset(self):
        return list_nodes_with_usage().order_by("name")

    def get_permissions(self):
        if self.action in OPERATOR_ACTIONS:
            return [*super().get_permissions(), OperatesNodes()]
        return super().get_permissions()

    def _act(self, request: Request, service: Callable[..., Node]) -> Response:
        name = self.get_object().name
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        service(request.user, name, body.validated_data["reason"], client_ip(request))
        return Response(NodeSerializer(self.get_queryset().get(name=name)).data)

    @extend_schema(request=ReasonSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, name: str | None = None) -> Response:
        return self._act(request, cordon_node)

    @extend_schema(request=ReasonSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, name: str | None = None) -> Response:
        return self._act(request, drain_node)

    @extend_schema(request=ReasonSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def uncordon(self, request: Request, name: str | None = None) -> Response:
        return self._act(request, uncordon_node)

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"], url_path="blast-radius")
    def blast_radius(self, request: Request, name: str | None = None) -> Response:
        return Response(build_blast_radius(self.get_object().name))


# -- scheduled maintenance ------------------------------------------------------------------


class MaintenanceSerializer(serializers.ModelSerializer):
    """A maintenance window: times ISO 8601 UTC, its nodes by name, who scheduled it, and
    ``note`` (what the loop did, or left as it was)."""

    nodes = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    created_by = serializers.CharField(source="created_by.username", default="", read_only=True)

    class Meta:
        model = MaintenanceWindow
        fields = ["id", "nodes", "starts_at", "ends_at", "reason", "state", "note",
                  "created_by", "created_at"]  # fmt: skip


class MaintenanceCreateSerializer(StrictSerializer):
    """The request body of ``POST maintenance/``; the service checks every value
    (``scheduling.nodes.maintenance.create_window``)."""

    nodes = serializers.ListField(
        child=serializers.CharField(min_length=1, max_length=64, trim_whitespace=False,
                                    validators=[RegexValidator(PARAMETER_TEXT)]),
        required=False, max_length=MAX_NODES, help_text="node names (and/or rack)",
    )  # fmt: skip
    rack = serializers.CharField(
        max_length=32, required=False, allow_blank=True, help_text="every node of this rack"
    )
    starts_at = TimeText(help_text=TIME_HELP)
    ends_at = TimeText(required=False, allow_null=True, help_text=f"{TIME_HELP}; none: open-ended")
    reason = serializers.CharField(max_length=REASON_MAX)


class MaintenanceFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=MaintenanceWindow.State.choices)
    node = django_filters.CharFilter(field_name="nodes__name")

    class Meta:
        model = MaintenanceWindow
        fields = ["state", "node"]


class MaintenanceViewSet(
    AsciiIdLookup, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Scheduled maintenance (everyone signed in may read it); on-call engineers and admins
    schedule a window (POST) and cancel one (``{id}/cancel/``)."""

    serializer_class = MaintenanceSerializer
    filterset_class = MaintenanceFilter
    parser_classes = [SafeJSONParser]  # a list of nodes: JSON only (a form repeats no field)

    def get_queryset(self):
        return maintenance_windows()

    def get_permissions(self):
        if self.action in ("create", "cancel"):
            return [*super().get_permissions(), OperatesNodes()]
        return super().get_permissions()

    @extend_schema(request=MaintenanceCreateSerializer, responses={201: MaintenanceSerializer})
    def create(self, request: Request) -> Response:
        body = MaintenanceCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            window = create_window(
                request.user, **body.validated_data, source_ip=client_ip(request)
            )
        except ClusterBusy as exc:
            return busy(exc)
        return Response(MaintenanceSerializer(self.get_queryset().get(pk=window.pk)).data,
                        status=status.HTTP_201_CREATED)  # fmt: skip

    @extend_schema(request=None, responses={200: MaintenanceSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        window = self.get_object()
        try:
            cancel_window(request.user, window.pk, client_ip(request))
        except ClusterBusy as exc:
            return busy(exc)
        return Response(MaintenanceSerializer(self.get_queryset().get(pk=window.pk)).data)
