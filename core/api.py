"""Shared API plumbing: one error shape and the base of the apps' DRF role permissions."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.security import INVISIBLE_CHARACTERS, is_ascii_number


def _messages(value: Any) -> list[str]:
    """Every message in a DRF error detail as a flat list of strings (the envelope's shape)."""
    if isinstance(value, list | tuple):
        return [message for item in value for message in _messages(item)]
    if isinstance(value, dict):
        return [f"{key}: {m}" for key, item in value.items() for m in _messages(item)]
    return [str(value)]


def _as_field_errors(exc: Exception, detail: Any) -> dict[str, list[str]]:
    """``{field: [messages]}``: a field's errors stay under it; anything else (a parse
    error's ``{"detail": ...}``, a list, one message) under ``non_field_errors``."""
    if isinstance(exc, exceptions.ValidationError) and isinstance(detail, dict):
        return {str(field): _messages(value) for field, value in detail.items()}
    if isinstance(detail, dict) and set(detail) == {"detail"}:
        detail = detail["detail"]
    return {"non_field_errors": _messages(detail)}


# A service refusal that names only the object's state (``{"state": ["job is already
# cancelled"]}``, an alert's ``status``): the request was well formed, the object is not in a
# state that allows it. 409 Conflict, in the same envelope (API.md, Errors).
CONFLICT_FIELDS = frozenset({"state", "status"})


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Bad input -> 400 ``{"errors": {field: [msg]}}``; a refusal by the object's state -> 409
    in the same envelope; Django errors mapped like DRF's."""
    if isinstance(exc, DjangoValidationError):
        errors = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        conflict = set(errors) <= CONFLICT_FIELDS
        code = status.HTTP_409_CONFLICT if conflict else status.HTTP_400_BAD_REQUEST
        return Response({"errors": errors}, status=code)
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is not None and response.status_code == 400:
        response.data = {"errors": _as_field_errors(exc, response.data)}
    return response


class RolePermission(permissions.BasePermission):
    """A DRF permission made of an app's role predicate (``<app>/permissions.py``):
    subclasses set ``check`` (a function of the user) and ``message`` (the 403's words)."""

    check: Callable[[Any], bool]

    def has_permission(self, request, view) -> bool:
        return type(self).check(request.user)


def client_ip(request) -> str | None:
    """The caller's address for audit records (REMOTE_ADDR; proxies are not trusted), or
    None when it is not an IP address: the web server takes it from ``X-Forwarded-For`` of
    a trusted proxy without checking it, and any other text ("unknown", "1.2.3.4:80")
    failed the audit record's inet column: a 500 on every audited action."""
    address = request.META.get("REMOTE_ADDR") or ""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


class SharedFields:
    """A serializer whose fields are built and bound once per class (mix in first).

    DRF builds (or deep-copies) every field each time a serializer is made: for a job's
    30 fields about 2 ms of every submission and every job page, a third of validating a
    submission (docs/api.md, "Throughput"). Here they are built once, bound to a
    context-free instance, and shared by every serializer of the class. So no field or
    method may keep state in a field or use ``self.context``, the request or ``partial``:
    true of reading, and of validating (each call gets the data and returns or raises).
    """

    @property
    def fields(self) -> dict[str, serializers.Field]:
        cls = type(self)
        shared = cls.__dict__.get("_shared_fields")
        if shared is None:
            template = cls.__new__(cls)
            serializers.Serializer.__init__(template)
            shared = serializers.Serializer.fields.real_func(template)  # DRF's own build
            cls._shared_fields = shared
        return shared


class SharedFieldsModelSerializer(SharedFields, serializers.ModelSerializer):
    """An output-only ModelSerializer with fields built once per class (``SharedFields``)."""


ASCII_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")


class StrictIntegerField(serializers.IntegerField):
    """DRF's IntegerField, taking digits 0-9 only: Python's ``int`` also reads ``"٧"`` (7)
    and ``"０１"`` (1), which no client means."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, str) and not is_ascii_number(data.strip().removeprefix("-")):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """DRF's FloatField, taking a decimal number in digits 0-9 only: Python's ``float``
    also reads ``"٧"`` (7), ``"７"`` and ``"1_000"``, which no client means."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, str) and not ASCII_DECIMAL.match(data.strip().removeprefix("-")):
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


# -- request bodies -------------------------------------------------------------------------


class StrictSerializer(serializers.Serializer):
    """A request body that refuses fields it does not know: 400 naming each (at most 20),
    so a misspelt field is never silently ignored. The schema says so
    (``additionalProperties: false``, ``document_errors`` below)."""

    def to_internal_value(self, data: Any) -> Any:
        if hasattr(data, "keys"):
            unknown = sorted(map(str, set(data) - set(self.fields)))
            if unknown:
                raise serializers.ValidationError(
                    {name[:50]: ["unknown field"] for name in unknown[:20]}
                )
        return super().to_internal_value(data)


# -- the OpenAPI schema ----------------------------------------------------------------------

ERROR_SCHEMAS = {
    "ErrorEnvelope": {
        "type": "object",
        "description": "Bad input, or an action the object's state does not allow: messages "
        "by field (API.md, Errors); nothing was stored.",
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

# What the portal refuses in text (API.md, Errors; core.security): any control character
# (C0, DEL, C1) in a query or path parameter; in a body's text all but tab and line breaks.
_CONTROLS = r"\x00-\x1f\x7f-\x9f"
_BODY_CONTROLS = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
# The end of the text, the same in ECMA-262 and Python: Python's ``$`` also matches before a
# final line break, so generators (Hypothesis, schemathesis) would offer "name\n" as valid.
_END = r"(?![\s\S])"
PARAMETER_TEXT = rf"^[^{_CONTROLS}]*{_END}"
BODY_TEXT = rf"^[^{_BODY_CONTROLS}]*{_END}"
# A field that may not be blank is blank when it holds only white space (DRF trims it).
BODY_TEXT_NOT_BLANK = rf"^[^{_BODY_CONTROLS}]*[^\s{_BODY_CONTROLS}][^{_BODY_CONTROLS}]*{_END}"
# A one-line name (a token's): no control character at all, and a visible one.
LINE_TEXT_NOT_BLANK = rf"^[^{_CONTROLS}]*[^\s{_CONTROLS}][^{_CONTROLS}]*{_END}"


def _as_class(chars: frozenset[str]) -> str:
    """``chars`` as the inside of a regex class, in ranges of ``\\uXXXX`` escapes (which
    ECMA-262 and Python read alike)."""
    points = sorted(map(ord, chars))
    ranges: list[list[int]] = []
    for point in points:
        if ranges and point == ranges[-1][1] + 1:
            ranges[-1][1] = point
        else:
            ranges.append([point, point])
    return "".join(f"\\u{a:04X}" if a == b else f"\\u{a:04X}-\\u{b:04X}" for a, b in ranges)


# Names (a job's, its model's, a token's) also refuse the invisible format characters
# (``core.security.invisible_character_error``): the schema names them too.
_NAME_BODY = _BODY_CONTROLS + _as_class(INVISIBLE_CHARACTERS)
_NAME_LINE = _CONTROLS + _as_class(INVISIBLE_CHARACTERS)
BODY_NAME = rf"^[^{_NAME_BODY}]*{_END}"
BODY_NAME_NOT_BLANK = rf"^[^{_NAME_BODY}]*[^\s{_NAME_BODY}][^{_NAME_BODY}]*{_END}"
LINE_NAME_NOT_BLANK = rf"^[^{_NAME_LINE}]*[^\s{_NAME_LINE}][^{_NAME_LINE}]*{_END}"
LINE_NAME = rf"^[^{_NAME_LINE}]*{_END}"


class NameField(serializers.CharField):
    """A name in a request body (a job's, its model's). The services refuse invisible
    format characters in names on every path (API, form, ``gpuctl``); with this field the
    schema's pattern says so (``document_errors``), so a client or a fuzzer knows."""


class LineTextField(serializers.CharField):
    """One line of text in a request body that the service refuses control characters
    (line breaks and tabs too) and invisible format characters in (a hold's reason); with
    this field the schema's pattern says so (``document_errors``)."""


def _error(schema: str, description: str) -> dict:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }


def _plain_text(schema: dict) -> bool:
    """A free-text string: no enum, format or pattern of its own already says what it takes."""
    return schema.get("type") == "string" and not {"enum", "format", "pattern"} & set(schema)


def _request_serializer(generator: Any, name: str) -> serializers.Serializer | None:
    """The serializer drf-spectacular made component ``name`` of (its registry keeps it)."""
    registry = getattr(getattr(generator, "registry", None), "_components", {})
    found = getattr(registry.get((name, "schemas")), "object", None)
    if isinstance(found, type) and issubclass(found, serializers.Serializer):
        return found()
    return found if isinstance(found, serializers.Serializer) else None


def _document_body(component: dict, serializer: serializers.Serializer | None) -> None:
    """A request body as the portal reads it: no unknown fields (``StrictSerializer``), no
    control characters in text, and a field that may not be blank needs a visible character."""
    component["additionalProperties"] = False
    fields = serializer.fields if serializer is not None else {}
    for name, prop in component.get("properties", {}).items():
        if not _plain_text(prop):
            continue
        field = fields.get(name)
        not_blank = (
            isinstance(field, serializers.CharField)
            and not field.allow_blank
            and field.trim_whitespace
        )
        if isinstance(field, LineTextField):
            prop["pattern"] = LINE_NAME_NOT_BLANK if not_blank else LINE_NAME
        elif isinstance(field, NameField):
            prop["pattern"] = BODY_NAME_NOT_BLANK if not_blank else BODY_NAME
        else:
            prop["pattern"] = BODY_TEXT_NOT_BLANK if not_blank else BODY_TEXT
        if not_blank:
            prop["minLength"] = max(1, prop.get("minLength", 1))


def document_errors(result: dict, generator: Any, request: Any, public: bool) -> dict:
    """drf-spectacular postprocessing hook: the schema says what the portal refuses.

    Every operation lists the 4xx answers it can give, in the shapes the portal sends
    (``exception_handler`` above, the body limit of the web server, the token limiter), so
    a client or a fuzzer finds none undocumented; free-text parameters and body fields
    carry the pattern the portal enforces (no control characters), and request bodies
    refuse unknown fields."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(ERROR_SCHEMAS)
    bodies: set[str] = set()
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
            if writes and "201" not in answers:
                codes["409"] = _error(
                    "ErrorEnvelope",
                    "the object's state does not allow this now (a job already finished, a "
                    "node already cordoned, a request already decided), or the cluster is "
                    "busy; nothing changed",
                )
            for code, answer in codes.items():
                answers.setdefault(code, answer)
            for parameter in operation.get("parameters", []):
                if parameter.get("in") in ("path", "query") and _plain_text(
                    parameter.get("schema", {})
                ):
                    parameter["schema"]["pattern"] = PARAMETER_TEXT
                    parameter["schema"]["minLength"] = 1  # empty is a 400 (core.filters)
            for media in operation.get("requestBody", {}).get("content", {}).values():
                ref = media.get("schema", {}).get("$ref", "")
                if ref.startswith("#/components/schemas/"):
                    bodies.add(ref.rsplit("/", 1)[1])
    for name in sorted(bodies):
        if name in schemas:
            _document_body(schemas[name], _request_serializer(generator, name))
    return result
