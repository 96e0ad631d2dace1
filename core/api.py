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
        if isinstance(data, str):
            digits = data.strip().removeprefix("-")
            if not (digits.isascii() and digits.isdigit()):
                self.fail("invalid")
        return super().to_internal_value(data)


class AsciiIdLookup:
    """A viewset mixin: the object's id in the path must be digits 0-9 (a JSON 404
    otherwise). The database would read ``/jobs/٢/`` as job 2."""

    def get_object(self):
        key = self.lookup_url_kwarg or self.lookup_field
        value = str(self.kwargs.get(key, ""))
        if not (value.isascii() and value.isdigit()):
            raise exceptions.NotFound()
        return super().get_object()
