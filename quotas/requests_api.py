"""REST: quota requests (``/api/v1/quota-requests/``), their impact and decisions.

Thin adapters over ``quotas.services`` (writers) and ``quotas.selectors`` (reads scoped
to the caller): a request the caller may not see is a 404 whatever the action; one
they see but may not act on is a 403; bad input is a 400 with field names.
"""

from __future__ import annotations

import django_filters
from drf_spectacular.utils import OpenApiTypes, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import AsciiIdLookup, StrictIntegerField, client_ip
from core.filters import MineFilter
from quotas import permissions, services
from quotas.models import QuotaRequest
from quotas.selectors import build_request_impact, list_requests_for_user
from scheduling.clock import cluster_now


def _reject_unknown_fields(serializer: serializers.Serializer) -> None:
    data = serializer.initial_data
    unknown = set(data) - set(serializer.fields) if hasattr(data, "keys") else set()
    if unknown:
        raise serializers.ValidationError(
            {name[:50]: ["unknown field"] for name in sorted(unknown)[:20]}
        )


class QuotaRequestCreateSerializer(serializers.Serializer):
    """POST body of API.md; types only (the rules and their messages live in the service)."""

    business_line = serializers.CharField(max_length=60, help_text="line id or name")
    queue = serializers.CharField(
        max_length=80, required=False, allow_null=True, allow_blank=True, default=None,
        help_text="queue id or name (optional): the request is for this queue of the line",
    )  # fmt: skip
    quota_gpus = StrictIntegerField(required=False, allow_null=True, default=None, min_value=0)
    guarantee_gpus = StrictIntegerField(required=False, allow_null=True, default=None, min_value=0)
    reason = serializers.CharField(max_length=services.REASON_MAX)
    starts_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    ends_at = serializers.DateTimeField(required=False, allow_null=True, default=None)

    def validate(self, attrs: dict) -> dict:
        _reject_unknown_fields(self)
        return attrs


class NoteSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=services.NOTE_MAX, allow_blank=True, required=False)

    def validate(self, attrs: dict) -> dict:
        _reject_unknown_fields(self)
        return attrs


class RejectSerializer(NoteSerializer):
    """A rejection needs a note: the requester reads it."""

    note = serializers.CharField(max_length=services.NOTE_MAX)


class ApproveSerializer(NoteSerializer):
    override_reserve = serializers.BooleanField(
        required=False, default=False,
        help_text="approve even though the guarantees would eat into the admins' reserve",
    )  # fmt: skip


class QuotaRequestSerializer(serializers.ModelSerializer):
    business_line = serializers.CharField(source="business_line.name", read_only=True)
    queue = serializers.CharField(source="queue.name", read_only=True, allow_null=True)
    requester = serializers.CharField(source="requester.username", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True
    )
    status = serializers.CharField(read_only=True)

    class Meta:
        model = QuotaRequest
        fields = [
            "id", "business_line", "queue", "requester", "quota_gpus", "guarantee_gpus",
            "reason", "starts_at", "ends_at", "state", "status", "created_at", "decided_by",
            "decided_at", "decision_note", "applied_at", "expired_at", "previous",
            "activation_note",
        ]  # fmt: skip
        read_only_fields = fields


class QuotaRequestFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=QuotaRequest.State.choices)
    business_line = django_filters.CharFilter(field_name="business_line__name")
    queue = django_filters.CharFilter(field_name="queue__name")
    mine = MineFilter("requester")

    class Meta:
        model = QuotaRequest
        fields = ["state", "business_line", "queue", "mine"]


class QuotaRequestViewSet(AsciiIdLookup,
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):  # fmt: skip
    """Quota requests visible to the caller (admins: all; others: their lines').

    POST: a team lead asks for their line or one of its queues. ``impact/`` shows what
    approving would change; ``approve/``/``reject/`` (admins, with a note) decide;
    ``withdraw/`` (the requester or the line's lead) takes a pending request back.
    """

    serializer_class = QuotaRequestSerializer
    filterset_class = QuotaRequestFilter

    def get_queryset(self):
        return list_requests_for_user(self.request.user)

    @extend_schema(request=QuotaRequestCreateSerializer, responses={201: QuotaRequestSerializer})
    def create(self, request: Request, *args, **kwargs) -> Response:
        permissions.ensure_may_request(request.user)
        incoming = QuotaRequestCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        req = services.create_quota_request(
            request.user,
            services.QuotaRequestInput(**incoming.validated_data),
            source_ip=client_ip(request),
        )
        return Response(QuotaRequestSerializer(req).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"])
    def impact(self, request: Request, pk: str | None = None) -> Response:
        req = self.get_object()
        return Response(build_request_impact(req, cluster_now()))

    def _decide(self, request: Request, service, serializer_class, allowed) -> Response:
        req = self.get_object()  # 404 for requests the caller may not see
        if not allowed(request.user, req):
            raise PermissionDenied(self.denied[self.action])
        incoming = serializer_class(data=request.data)
        incoming.is_valid(raise_exception=True)
        req = service(request.user, req.pk, source_ip=client_ip(request), **incoming.validated_data)
        return Response(QuotaRequestSerializer(req).data)

    denied = {
        "approve": "only cluster admins approve quota requests",
        "reject": "only cluster admins reject quota requests",
        "withdraw": "only the requester or the line's lead may withdraw it",
    }

    @extend_schema(request=ApproveSerializer, responses={200: QuotaRequestSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(request, services.approve_quota_request, ApproveSerializer, _admin_only)

    @extend_schema(request=RejectSerializer, responses={200: QuotaRequestSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(request, services.reject_quota_request, RejectSerializer, _admin_only)

    @extend_schema(request=NoteSerializer, responses={200: QuotaRequestSerializer})
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(
            request, services.withdraw_quota_request, NoteSerializer, permissions.may_withdraw
        )


def _admin_only(user, req: QuotaRequest) -> bool:
    return permissions.may_decide(user)
