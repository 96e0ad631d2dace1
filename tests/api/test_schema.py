"""The OpenAPI schema: generated without warnings, valid OpenAPI 3, and covering every path."""

from __future__ import annotations

import json

import pytest
import yaml
from django.core.management import call_command
from drf_spectacular.validation import validate_schema

from tests.api.test_matrix import CASES, QUOTA_CASES

pytestmark = pytest.mark.django_db

PLACEHOLDERS = {"{job}": "{id}", "{node}": "{name}", "{cordoned}": "{name}", "{alert}": "{id}",
                "{qr}": "{id}", "{array}": "{id}"}  # fmt: skip


def schema_path(case_path: str) -> str:
    for specific, generic in PLACEHOLDERS.items():
        case_path = case_path.replace(specific, generic)
    return "/api/v1/" + case_path


def test_the_schema_generates_without_warnings_and_validates(tmp_path):
    out = tmp_path / "schema.yaml"
    # --fail-on-warn turns every drf-spectacular warning (unresolvable type, missing
    # serializer, ...) into an error; --validate checks it against the OpenAPI 3 JSON schema.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    assert schema["openapi"].startswith("3.")


def test_the_served_schema_validates_and_documents_every_path_with_its_methods(api, demo):
    response = api(None).get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    validate_schema(schema)
    for case in [*CASES.values(), *QUOTA_CASES.values()]:
        path = schema_path(case.path)
        assert path in schema["paths"], f"{path} missing from the schema"
        assert case.method in schema["paths"][path], f"{case.method.upper()} {path} undocumented"
    assert {"tokenAuth", "cookieAuth"} <= set(schema["components"]["securitySchemes"])
    submit = schema["components"]["schemas"]["JobSubmit"]
    assert {"name", "queue", "gpus"} <= set(submit["required"])


def test_every_routed_api_path_is_in_the_schema(api, demo):
    """No view hides from the schema: what the URL conf routes under /api/v1/ is documented."""
    from django.urls import get_resolver

    schema = json.loads(api(None).get("/api/schema/?format=json").content)
    documented = set(schema["paths"])
    routed = set()
    for pattern in get_resolver().url_patterns:
        prefix = str(pattern.pattern)
        if prefix.startswith("api/v1/") and not hasattr(pattern, "url_patterns"):
            routed.add("/" + prefix)
    assert routed and routed <= documented, routed - documented
