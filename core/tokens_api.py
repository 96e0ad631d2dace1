"""``/api/v1/tokens/``: a user's own API tokens (list, create, show, revoke).

Everyone signed in manages their own tokens and nobody else's: another user's token is a
404, as if it did not exist. The secret is in the answer to the POST only. Writes go
through ``core.tokens``.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from core import tokens
from core.api import (
    LINE_NAME_NOT_BLANK,
    AsciiIdLookup,
    StrictIntegerField,
    StrictSerializer,
    client_ip,
)
from core.models import ApiToken


class ApiTokenSerializer(serializers.ModelSerializer):
    """A token as listed: never its secret nor its hash."""

    expired = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "expires_at", "last_used_at", "expired"]
        read_only_fields = fields

    def get_expired(self, token: ApiToken) -> bool:
        return tokens.describe(token)["expired"]


class CreatedTokenSerializer(ApiTokenSerializer):
    """The answer to a creation: the token and, this once, its secret."""

    token = serializers.CharField(help_text="the secret; shown once, not stored")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class TextField(serializers.CharField):
    """A CharField that takes a JSON string only (DRF's also turns ``0`` into ``"0"``)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(
    {"type": "string", "minLength": 1, "maxLength": tokens.MAX_NAME, "pattern": LINE_NAME_NOT_BLANK}
)
class TokenNameField(TextField):
    """A token's name as sent: one line, no control character (not even a trailing line
    break, which DRF would trim away before ``tokens.clean_name`` could refuse it) and no
    invisible format character; the schema's pattern says both."""

    def __init__(self, **kwargs):
        super().__init__(max_length=tokens.MAX_NAME, trim_whitespace=False, **kwargs)


class CreateTokenSerializer(StrictSerializer):
    """``{"name": "...", "expires_in_days": 1-365}`` (default 90)."""

    name = TokenNameField()
    expires_in_days = StrictIntegerField(
        min_value=tokens.MIN_DAYS, max_value=tokens.MAX_DAYS, default=tokens.DEFAULT_DAYS
    )

    def validate_name(self, value: str) -> str:
        try:
            return tokens.clean_name(value)
        except tokens.TokenError as exc:
            raise serializers.ValidationError(exc.errors["name"]) from None


class TokenConflictSerializer(serializers.Serializer):
    """The 409 envelope: ``{"errors": {"name": ["..."]}}``."""

    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))


class ApiTokenViewSet(AsciiIdLookup, viewsets.ReadOnlyModelViewSet):
    """The caller's live (not revoked) tokens, newest first."""

    serializer_class = ApiTokenSerializer
    pagination_class = None

    queryset = ApiToken.objects.none()  # for the schema; the real one is per user

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return tokens.live_tokens(self.request.user)

    def get_object(self) -> ApiToken:
        pk = str(self.kwargs.get(self.lookup_url_kwarg or self.lookup_field, ""))
        if pk.isascii() and pk.isdigit() and int(pk) > tokens.MAX_ID:
            raise NotFound()  # would overflow the query
        return super().get_object()

    @extend_schema(
        request=CreateTokenSerializer,
        responses={
            201: CreatedTokenSerializer,
            409: OpenApiResponse(
                response=TokenConflictSerializer,
                description="you already have a live token of that name; nothing changed",
            ),
        },
    )
    def create(self, request, *args, **kwargs) -> Response:
        body = CreateTokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            token, secret = tokens.create_token(
                request.user,
                body.validated_data["name"],
                body.validated_data["expires_in_days"],
                source_ip=client_ip(request),
            )
        except tokens.TokenNameTaken as exc:  # well formed; the name is in use: 409
            return Response({"errors": exc.errors}, status=status.HTTP_409_CONFLICT)
        except tokens.TokenError as exc:
            raise serializers.ValidationError(exc.errors) from None
        token.token = secret
        return Response(CreatedTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: ApiTokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk: str | None = None) -> Response:
        token = self.get_object()  # 404 for a token that is not the caller's own
        token = tokens.revoke_token(request.user, token.pk, source_ip=client_ip(request))
        return Response(ApiTokenSerializer(token).data)
