"""Shared API plumbing: one error shape and the base of the apps' DRF role permissions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.security import is_ascii_number


def _as_field_errors(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        return detail
    if isinstance(detail, list):
        return {"non_field_errors": detail}
    return {"non_field_errors": [detail]}


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Bad input -> 400 ``{"errors": {field: [msg]}}``; Django errors mapped like DRF's."""
    if isinstance(exc, DjangoValidationError):
        errors = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        return Response({"errors": errors}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is not None and response.status_code == 400:
        response.data = {"errors": _as_field_errors(response.data)}
    return response


class RolePermission(permissions.BasePermission):
    """A DRF permission made of an app's role predicate (``<app>/permissions.py``):
    subclasses set ``check`` (a function of the user) and ``message`` (the 403's words)."""

    check: Callable[[Any], bool]

    def has_permission(self, request, view) -> bool:
        return type(self).check(request.user)


def client_ip(request) -> str | None:
    """The caller's address for audit records (REMOTE_ADDR; proxies are not trusted)."""
    return request.META.get("REMOTE_ADDR") or None


class SharedFieldsModelSerializer(serializers.ModelSerializer):
    """An output-only ModelSerializer whose fields are built and bound once per class.

    DRF builds every field from the model each time a serializer is made: for a job's
    30 fields, about 2 ms of every submission and every job page. Here they are built
    once, bound to a context-free instance, and shared by every serializer of the class
    (reading holds no state in a field). So: output only, and no field or method may
    use ``self.context`` or the request.
    """

    @property
    def fields(self) -> dict[str, serializers.Field]:
        cls = type(self)
        shared = cls.__dict__.get("_shared_fields")
        if shared is None:
            template = cls.__new__(cls)
            serializers.ModelSerializer.__init__(template)
            shared = serializers.Serializer.fields.real_func(template)  # DRF's own build
            cls._shared_fields = shared
        return shared


class StrictIntegerField(serializers.IntegerField):
    """DRF's IntegerField, taking digits 0-9 only: Python's ``int`` also reads ``"٧"`` (7)
    and ``"０１"`` (1), which no client means."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, str) and not is_ascii_number(data.strip().removeprefix("-")):
            self.fail("invalid")
        return super().to_internal_value(data)


class AsciiIdLookup:
    """A viewset mixin: the object's id in the path must be digits 0-9 (a JSON 404
    otherwise). The database would read ``/jobs/٢/`` as job 2."""

    def get_object(self):
        key = self.lookup_url_kwarg or self.lookup_field
        if not is_ascii_number(str(self.kwargs.get(key, ""))):
            raise exceptions.NotFound()
        return super().get_object()


# -- the error answers in the OpenAPI schema -------------------------------------------------

ERROR_SCHEMAS = {
    "ErrorEnvelope": {
        "type": "object",
        "description": "Bad input: messages by field (API.md, Errors); nothing was stored.",
        "properties": {
            "errors": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "string"}},
            }
        },
        "required": ["errors"],
    },
    "ErrorDetail": {
        "type": "object",
        "description": "Refused: not signed in, not allowed, not found or too many attempts.",
        "properties": {"detail": {"type": "string"}},
        "required": ["detail"],
    },
}


def _error(schema: str, description: str) -> dict:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }


def document_errors(result: dict, generator: Any, request: Any, public: bool) -> dict:
    """drf-spectacular postprocessing hook: every operation lists the 4xx answers it can
    give, in the shapes the portal sends (``exception_handler`` above, the body limit of
    the web server, the token limiter), so a client or a fuzzer finds none undocumented."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(ERROR_SCHEMAS)
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            answers = operation.setdefault("responses", {})
            writes = method in ("post", "put", "patch")
            codes = {
                "401": _error("ErrorDetail", "not signed in, or an unknown or expired token"),
                "403": _error("ErrorDetail", "your role may not do this"),
                "429": _error("ErrorDetail", "too many failed token attempts; wait"),
            }
            if writes or operation.get("parameters"):
                codes["400"] = _error("ErrorEnvelope", "bad input or query; nothing changed")
            if "{" in path:
                codes["404"] = _error("ErrorDetail", "no such object (or not yours to see)")
            if writes:
                codes["413"] = _error("ErrorEnvelope", "the request body is too large")
            for code, answer in codes.items():
                answers.setdefault(code, answer)
    return result
