"""REST: ``/api/v1/nodes/`` (API.md): nodes with state, health and free GPUs, and the
on-call actions cordon / drain / uncordon (POST ``{"reason": "..."}``) and blast radius.

Thin: reads from ``scheduling.nodes.selectors``, writes through
``scheduling.nodes.services``; the actions are for ``scheduling.permissions.OperatesNodes``.
"""

from __future__ import annotations

from collections.abc import Callable

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import StrictSerializer, client_ip
from scheduling.models import Node
from scheduling.nodes.selectors import build_blast_radius, free_gpus, list_nodes_with_usage
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
