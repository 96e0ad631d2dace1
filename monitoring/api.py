"""REST: alerts for on-call (list, ack, resolve)."""

from __future__ import annotations

from collections.abc import Callable

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import AsciiIdLookup, client_ip
from monitoring.models import Alert
from monitoring.permissions import UsesOncallConsole
from monitoring.services import acknowledge_alert, resolve_alert


class AlertSerializer(serializers.ModelSerializer):
    class Meta:
        model = Alert
        fields = ["id", "kind", "severity", "status", "subject", "message", "count",
                  "created_at", "updated_at", "resolved_at"]  # fmt: skip


class AlertViewSet(AsciiIdLookup, viewsets.ReadOnlyModelViewSet):
    """Alerts (on-call engineers and admins)."""

    queryset = Alert.objects.all()
    serializer_class = AlertSerializer
    permission_classes = [UsesOncallConsole]
    filterset_fields = ["status", "kind", "severity"]

    def _change(self, request: Request, service: Callable[..., Alert]) -> Response:
        alert = service(request.user, self.get_object().pk, client_ip(request))
        return Response(AlertSerializer(alert).data)

    @extend_schema(request=None, responses={200: AlertSerializer})
    @action(detail=True, methods=["post"])
    def ack(self, request: Request, pk: str | None = None) -> Response:
        return self._change(request, acknowledge_alert)

    @extend_schema(request=None, responses={200: AlertSerializer})
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, pk: str | None = None) -> Response:
        return self._change(request, resolve_alert)
