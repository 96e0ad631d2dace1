"""Every 4xx the API answers is in the OpenAPI schema, in the shape it is sent (#16: 36
"undocumented status" findings of schemathesis with all checks on)."""

from __future__ import annotations

import json

import jsonschema
import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(api, demo) -> dict:
    return json.loads(api(None).get("/api/schema/?format=json").content)


def operations(schema: dict):
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            yield path, method, op


def test_every_operation_documents_the_refusals_it_can_give(schema):
    missing = []
    for path, method, op in operations(schema):
        expected = {"401", "403", "429"}
        if method in ("post", "put", "patch"):
            expected |= {"400", "413"}
        if "{" in path:
            expected.add("404")
        if op.get("parameters"):
            expected.add("400")
        lacking = expected - set(op["responses"])
        if lacking:
            missing.append(f"{method.upper()} {path}: {sorted(lacking)}")
    assert missing == []


def conforms(schema: dict, name: str, body: dict) -> None:
    jsonschema.validate(body, schema["components"]["schemas"][name])


def test_the_answers_have_the_documented_shapes(schema, api, demo):
    researcher = api("researcher")
    bad = researcher.post("/api/v1/jobs/", {"name": "", "gpus": "x"}, format="json")
    assert bad.status_code == 400
    conforms(schema, "ErrorEnvelope", bad.json())
    unknown_filter = researcher.get("/api/v1/jobs/?nope=1")
    assert unknown_filter.status_code == 400
    conforms(schema, "ErrorEnvelope", unknown_filter.json())
    missing = researcher.get("/api/v1/jobs/999999/")
    assert missing.status_code == 404
    conforms(schema, "ErrorDetail", missing.json())
    anonymous = api(None).get("/api/v1/jobs/")
    assert anonymous.status_code in (401, 403)
    conforms(schema, "ErrorDetail", anonymous.json())
    refused = researcher.post("/api/v1/scheduler/cycle/")
    assert refused.status_code == 403
    conforms(schema, "ErrorDetail", refused.json())
