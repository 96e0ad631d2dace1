"""Bad input, generated: every POST endpoint of the OpenAPI schema (``/api/schema/``), the
PATCH ones (``PATCHES``) and the query parameters of the list endpoints and the HTML
pages, as admin and researcher (and the team lead where only a lead gets past the
permission check).

Hypothesis builds the bodies from the schema: values valid for each field mixed with
wrong types, 10^12 and 10^100, negatives, floats, NUL bytes, unicode and very long
strings, HTML/JS, null, nested objects and lists, unknown fields; plus top-level
non-objects, malformed JSON, too deep nesting, a 3 MB body, form and multipart bodies and
wrong content types. (schemathesis is not installed: this is the same idea, by hand.)

Each example runs in a savepoint rolled back afterwards, so every example meets the same
world. Asserted: no 500 (the test client re-raises a view's exception, so a crash fails
with its traceback and Hypothesis shrinks the body), and a refusal (4xx) stored nothing:
the rows and states of jobs, job events, nodes, alerts, quota requests and changes,
audit records, scheduling cycles and the simulator clock are as before. GET requests
never change anything, whatever they answer.

Examples are derandomized (the same every run) and bounded: FUZZ_EXAMPLES (default 25)
per endpoint; run with FUZZ_EXAMPLES=500 for a longer local search.
"""

from __future__ import annotations

import json
import os
import re
from urllib.parse import urlencode

import pytest
from django.db import transaction
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.models import AuditRecord
from monitoring.models import Alert
from quotas.models import BusinessLine, Queue, QuotaChange, QuotaRequest
from scheduling.models import (
    Job,
    JobArray,
    JobEvent,
    MaintenanceWindow,
    Node,
    SchedulingCycle,
    SimulatorState,
)
from tests.security.pages import World

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large, HealthCheck.filter_too_much],
)  # fmt: skip

# The POST paths of API.md: the schema must list them all (so none escapes the fuzz).
API_MD_POSTS = {
    "/api/v1/jobs/", "/api/v1/jobs/{id}/cancel/", "/api/v1/jobs/{id}/hold/",
    "/api/v1/jobs/{id}/release/", "/api/v1/nodes/{name}/cordon/",
    "/api/v1/nodes/{name}/drain/", "/api/v1/nodes/{name}/uncordon/",
    "/api/v1/alerts/{id}/ack/", "/api/v1/alerts/{id}/resolve/", "/api/v1/quota-requests/",
    "/api/v1/quota-requests/{id}/approve/", "/api/v1/quota-requests/{id}/reject/",
    "/api/v1/quota-requests/{id}/withdraw/", "/api/v1/simulator/faults/",
    "/api/v1/simulator/advance/", "/api/v1/scheduler/cycle/",
    "/api/v1/tokens/", "/api/v1/tokens/{id}/revoke/",
    "/api/v1/maintenance/", "/api/v1/maintenance/{id}/cancel/",
    "/api/v1/arrays/", "/api/v1/arrays/{id}/cancel/", "/api/v1/jobs/{id}/time-limit/",
    "/api/v1/jobs/{id}/begin-time/", "/api/v1/arrays/{id}/begin-time/", "/api/v1/jobs/{id}/top/",
    "/api/v1/jobs/{id}/move/",
}  # fmt: skip
# The other writes with a body (PATCH), fuzzed the same way.
PATCHES = ["/api/v1/arrays/{id}/"]


_schema: dict = {}


@pytest.fixture
def schema(api) -> dict:
    """The OpenAPI document as the portal serves it (fetched once, by a real admin)."""
    if not _schema:
        response = api("admin").get("/api/schema/?format=json")
        assert response.status_code == 200
        _schema.update(json.loads(response.content))
    return _schema


def post_paths() -> list[str]:
    return sorted(API_MD_POSTS)


# -- values -----------------------------------------------------------------------------

NASTY_STRINGS = [
    "", " ", "0", "-1", "1e3", "10000000000000", "null", "true", "NaN", "Infinity",
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "' OR 1=1 --",
    "\x00", "a\x00b", "日本語のジョブ", "🚀" * 60, "\u202egnp.exe", "x" * 10_001,
    "../../etc/passwd", "%00", "{{ 7*7 }}", "${jndi:ldap://x}", "llm-finetune\n",
    "LLM-FINETUNE", "1; DROP TABLE scheduling_job", "２", "١٢",
]  # fmt: skip
NASTY_SCALARS = [None, True, False, 0, -1, 1, -(10**12), 10**12, 10**100, 2**63, 1.5, -0.0,
                 1e308, 0.1, 8.0, 604801, *NASTY_STRINGS]  # fmt: skip
scalar = st.one_of(
    st.sampled_from(NASTY_SCALARS),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=120),
)
hostile = st.recursive(
    scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=4),
    max_leaves=8,
)  # fmt: skip


def resolve(schema: dict, prop: dict) -> dict:
    while "$ref" in prop:
        prop = schema["components"]["schemas"][prop["$ref"].rsplit("/", 1)[1]]
    if "allOf" in prop:
        merged: dict = {}
        for part in prop["allOf"]:
            merged.update(resolve(schema, part))
        return {**merged, **{k: v for k, v in prop.items() if k != "allOf"}}
    return prop


def valid_value(schema: dict, name: str, prop: dict, known: dict) -> st.SearchStrategy:
    """Values the schema allows for ``prop`` (plus real object names for reference fields)."""
    prop = resolve(schema, prop)
    options: list[st.SearchStrategy] = []
    if name in known:
        options.append(st.sampled_from(known[name]))
    if "enum" in prop:
        options.append(st.sampled_from([v for v in prop["enum"] if v is not None]))
    kind = prop.get("type")
    if kind == "integer":
        low, high = prop.get("minimum", -(2**31)), prop.get("maximum", 2**31)
        options.append(st.integers(low, high))
        options.append(st.integers(max(low, 0), min(high, max(low, 0) + 16)))  # plausible
    elif kind == "number":
        low, high = prop.get("minimum", -1e9), prop.get("maximum", 1e9)
        options.append(st.integers(int(low), int(high)) | st.floats(low, high))
    elif kind == "boolean":
        options.append(st.booleans())
    elif kind == "string" and prop.get("format") == "date-time":
        options.append(st.datetimes().map(lambda d: d.isoformat() + "Z"))
        options.append(st.sampled_from(["2030-01-01T00:00:00Z", "2020-02-30T00:00:00Z",
                                        "tomorrow", "9999-12-31T23:59:59Z"]))  # fmt: skip
    elif kind == "string" and "enum" not in prop:
        options.append(st.text(min_size=prop.get("minLength", 0),
                               max_size=prop.get("maxLength", 200)))  # fmt: skip
    if prop.get("nullable"):
        options.append(st.none())
    return st.one_of(options) if options else hostile


def body_schema(schema: dict, path: str, method: str = "post") -> dict:
    op = schema["paths"][path][method]
    content = op.get("requestBody", {}).get("content", {})
    if "application/json" not in content:
        return {}
    return resolve(schema, content["application/json"]["schema"])


MALFORMED = [
    ("application/json", b"{not json"),
    ("application/json", b'{"gpus": NaN, "name": "x"}'),
    ("application/json", b'{"seconds": Infinity}'),
    ("application/json", b'{"gpus": 1e999}'),
    ("application/json", b"\xff\xfe\x00\x01"),
    ("application/json", b""),
    ("application/json", b"[" * 5000 + b"]" * 5000),
    ("application/json", b'{"a":' * 3000 + b"1" + b"}" * 3000),
    ("application/json", b'{"name": "x", "name": "y"}'),
    ("application/json", b'"just a string"'),
    ("application/json", b"\xef\xbb\xbf{}"),
    ("application/json; charset=latin-1", '{"name": "é"}'.encode("latin-1")),
    ("application/json; charset=bogus-charset", b"{}"),
    ("application/json", b'{"reason": "' + b"x" * 3_000_000 + b'"}'),
    ("text/plain", b"gpus=1"),
    ("application/xml", b"<job><gpus>1</gpus></job>"),
    ("multipart/form-data", b"garbage without a boundary"),
    ("multipart/form-data; boundary=x",
     b'--x\r\nContent-Disposition: form-data; name="gpus"\r\n\r\n-1\r\n--x--\r\n'),
    ("multipart/form-data; boundary=x",
     b'--x\r\nContent-Disposition: form-data; name="f"; filename="a.bin"\r\n\r\n\x00\x01\r\n--x'),
    ("application/x-www-form-urlencoded", b"%%%=%%%&gpus=%ZZ"),
    ("application/x-www-form-urlencoded", b"&".join([b"a=1"] * 2000)),
    ("", b"{}"),
]  # fmt: skip


def bodies(schema: dict, path: str, known: dict, method: str = "post") -> st.SearchStrategy:
    """(content type, raw body) pairs for POSTs (or ``method``) to ``path``."""
    shape = body_schema(schema, path, method)
    props = shape.get("properties", {})
    required = [n for n in shape.get("required", []) if n in props]
    valid = {name: valid_value(schema, name, prop, known) for name, prop in props.items()}
    # A body valid by the schema, then the same with one field made hostile or dropped:
    # these reach the service's own rules (quotas, tiers, states) past the serializer.
    schema_valid = st.fixed_dictionaries(
        {n: valid[n] for n in required},
        optional={n: v for n, v in valid.items() if n not in required},
    )
    one_bad = st.builds(
        lambda d, key, value: {**d, key: value},
        schema_valid,
        st.sampled_from(sorted(props) or ["x"]),
        hostile,
    )
    one_missing = st.builds(lambda d, key: {k: v for k, v in d.items() if k != key},
                            schema_valid, st.sampled_from(required or ["x"]))  # fmt: skip
    field = {
        name: st.one_of(valid_value(schema, name, prop, known),
                        valid_value(schema, name, prop, known), hostile)
        for name, prop in props.items()
    }  # fmt: skip
    objects = st.builds(
        lambda fields, extra: {**extra, **fields},
        st.fixed_dictionaries({}, optional=field),
        st.dictionaries(st.sampled_from(["id", "state", "owner", "colour", "__proto__", "x" * 300]),
                        hostile, max_size=2),
    )  # fmt: skip

    def form(d: dict) -> tuple[str, bytes]:
        flat = {k: v if isinstance(v, str) else json.dumps(v) for k, v in d.items()}
        return ("application/x-www-form-urlencoded", urlencode(flat).encode())

    as_json = lambda d: ("application/json", json.dumps(d).encode())  # noqa: E731
    return st.one_of(
        schema_valid.map(as_json),
        one_bad.map(as_json),
        one_missing.map(as_json),
        objects.map(as_json),
        schema_valid.map(form),
        objects.map(form),
        hostile.map(lambda v: ("application/json", json.dumps(v).encode())),
        st.sampled_from(MALFORMED),
    )


# -- the world and what a refusal must leave alone -----------------------------------------


def fingerprint() -> tuple:
    return (
        list(Job.objects.order_by("pk").values_list("pk", "state", "name", "gpus")),
        JobEvent.objects.count(),
        list(Node.objects.order_by("name").values_list("name", "state", "health")),
        list(Alert.objects.order_by("pk").values_list("pk", "status")),
        list(QuotaRequest.objects.order_by("pk").values_list("pk", "state")),
        QuotaChange.objects.count(),
        AuditRecord.objects.count(),
        SchedulingCycle.objects.count(),
        list(SimulatorState.objects.values_list("virtual_now", flat=True)),
        list(BusinessLine.objects.order_by("pk").values_list("quota_gpus", "guarantee_gpus")),
        list(MaintenanceWindow.objects.order_by("pk").values_list("pk", "state")),
        list(JobArray.objects.order_by("pk").values_list("pk", "max_running")),
    )


def known_values(world: World) -> dict[str, list]:
    queues = list(Queue.objects.values_list("name", flat=True))
    return {
        "queue": queues + list(Queue.objects.values_list("pk", flat=True)),
        "business_line": list(BusinessLine.objects.values_list("name", flat=True)),
        "node": [world.node, world.cordoned_node, "no-such-node"],
    }


def url_for(path: str, world: World) -> str:
    ids = {"jobs": world.job, "alerts": world.alert, "quota-requests": world.quota_request,
           "maintenance": world.maintenance}  # fmt: skip
    resource = path.split("/")[3]
    if resource == "tokens" and "{id}" in path:
        from django.contrib.auth import get_user_model

        from core.tokens import create_token

        admin = get_user_model().objects.get(username="admin")
        ids["tokens"] = create_token(admin, "fuzzed", 30)[0].pk  # the admin's own token
    if resource == "arrays" and "{id}" in path:
        ids["arrays"] = _researchers_array()
    return path.replace("{name}", world.node).replace("{id}", str(ids.get(resource)))


def _researchers_array() -> int:
    """A job array of the researcher (4 tasks, at most 2 at once), to act on."""
    from django.contrib.auth import get_user_model

    from scheduling.array_services import submit_array
    from scheduling.services import JobRequest

    researcher = get_user_model().objects.get(username="researcher")
    req = JobRequest(name="fuzzed-array", queue="llm-experiment", gpus=1)
    return submit_array(researcher, req, "0-3%2").pk


def send(client, method: str, url: str, content_type: str, body: bytes | None = None):
    """One request inside a savepoint that is rolled back: (status, stored before, after)."""
    with transaction.atomic():
        before = fingerprint()
        if method == "GET":
            response = client.get(url)
        else:
            response = client.generic(method, url, body, content_type=content_type)
        after = fingerprint()
        transaction.set_rollback(True)
    return response, before, after


def roles_for(path: str) -> list[str]:
    # Team leads are the only ones past the permission check for creating and withdrawing
    # quota requests; on-call engineers share the admins' node and alert paths.
    if path in ("/api/v1/quota-requests/", "/api/v1/quota-requests/{id}/withdraw/"):
        return ["admin", "researcher", "lead"]
    return ["admin", "researcher"]


def test_the_schema_lists_every_post_endpoint_of_api_md(schema):
    in_schema = {p for p, ops in schema["paths"].items() if "post" in ops}
    assert in_schema >= API_MD_POSTS, API_MD_POSTS - in_schema
    assert in_schema <= API_MD_POSTS, f"new POST endpoints to add here: {in_schema - API_MD_POSTS}"


def fuzz_writes(api, world: World, schema: dict, method: str, path: str) -> None:
    """Generated bodies (valid, hostile, malformed) as every role that may reach ``path``:
    never a 500, and a refusal stores nothing."""
    clients = {role: api(role) for role in roles_for(path)}
    url = url_for(path, world)
    statuses: dict[str, set[int]] = {role: set() for role in clients}
    known = known_values(world)

    @FUZZ
    @given(role=st.sampled_from(sorted(clients)), request=bodies(schema, path, known, method))
    def fuzz(role, request):
        content_type, body = request
        response, before, after = send(clients[role], method.upper(), url, content_type, body)
        statuses[role].add(response.status_code)
        assert response.status_code < 500, (role, response.status_code, body[:300])
        if 400 <= response.status_code < 500:
            assert after == before, f"{role} got {response.status_code} but something was stored"
            if response.status_code == 400 and response["Content-Type"] == "application/json":
                assert "errors" in response.json(), response.content[:300]

    fuzz()
    print("STATUS", method.upper(), path, statuses)
    assert all(statuses.values()), statuses  # every role was tried


@pytest.mark.parametrize("path", post_paths())
def test_post_bodies_never_crash_and_refusals_store_nothing(api, world, schema, path):
    fuzz_writes(api, world, schema, "post", path)


@pytest.mark.parametrize("path", PATCHES)
def test_patch_bodies_never_crash_and_refusals_store_nothing(api, world, schema, path):
    assert "patch" in schema["paths"][path]
    fuzz_writes(api, world, schema, "patch", path)


LIST_PARAMS_EXTRA = ["format", "ordering", "search", "page", "limit", "offset", "id", "pk"]
query_value = st.one_of(
    st.sampled_from([str(v) for v in NASTY_SCALARS] + ["-5", "0", "1", "99999999999999999999"]),
    st.text(max_size=60),
)


def query_strings(names: list[str]) -> st.SearchStrategy[str]:
    pairs = st.lists(st.tuples(st.sampled_from(names), query_value), max_size=5)
    return pairs.map(urlencode)


def test_api_query_parameters_never_crash_or_change_anything(api, world, schema):
    lists = {}
    for path, ops in schema["paths"].items():
        if "get" in ops and "{" not in path:
            names = [p["name"] for p in ops["get"].get("parameters", []) if p["in"] == "query"]
            lists[path] = sorted(set(names + LIST_PARAMS_EXTRA))
    details = [url_for(p, world) for p in schema["paths"] if "get" in schema["paths"][p]
               and "{" in p and "quota-requests/{id}/impact" not in p]  # fmt: skip
    assert {"/api/v1/jobs/", "/api/v1/nodes/", "/api/v1/alerts/"} <= set(lists)
    clients = {role: api(role) for role in ("admin", "researcher")}

    @settings(FUZZ, max_examples=EXAMPLES * 4)
    @given(role=st.sampled_from(sorted(clients)), path=st.sampled_from(sorted(lists)),
           data=st.data())  # fmt: skip
    def fuzz(role, path, data):
        query = data.draw(query_strings(lists[path]))
        response, before, after = send(clients[role], "GET", f"{path}?{query}", "")
        assert response.status_code < 500, (role, path, query)
        assert after == before

    fuzz()

    @FUZZ
    @given(role=st.sampled_from(sorted(clients)), url=st.sampled_from(details),
           junk=st.text(max_size=40))  # fmt: skip
    def fuzz_path(role, url, junk):
        # Path parameters replaced by junk: a 404 (or 400), never a 500.
        from urllib.parse import quote

        mangled = re.sub(r"/api/v1/([a-z-]+)/[^/]+/", lambda m: f"/api/v1/{m.group(1)}/"
                         f"{quote(junk, safe='') or '%20'}/", url, count=1)  # fmt: skip
        response, before, after = send(clients[role], "GET", mangled, "")
        assert response.status_code < 500, (role, mangled)
        assert after == before

    fuzz_path()


# Query parameters the HTML pages read (request.GET in the views), plus junk names.
PAGE_PARAMS = {
    "/jobs/": ["state", "queue", "owner", "mine", "held", "name", "array", "page", "q"],
    "/jobs/new/": ["queue", "gpus", "tier", "name"],
    "/jobs/estimate/": ["params", "precision", "optimizer", "zero_stage", "data_parallel",
                        "seq_len", "micro_batch", "gpu_model", "prefix"],
    "/jobs/feasibility/": ["name", "queue", "gpus", "gpus_per_node", "tier", "gpu_memory_gb",
                           "rdma", "exclusive_node", "max_retries", "checkpoint_path", "singleton",
                           "after", "after_condition", "begin_at"],
    "/dashboard/": ["window"],
    "/dashboard/data/": ["window"],
    "/oncall/nodes/": ["name"],
    "/oncall/rack-map/cells/": ["node"],
    "/quotas/requests/": ["state", "page", "line"],
    "/quotas/requests/new/": ["business_line", "queue", "guarantee_gpus", "quota_gpus"],
    "/audit/": ["actor", "action", "target", "since", "until", "page"],
}  # fmt: skip


def test_page_query_parameters_never_crash_or_change_anything(demo, world):
    clients = {}
    for role in ("admin", "lead", "researcher"):
        clients[role] = Client()
        clients[role].force_login(demo[role])

    @settings(FUZZ, max_examples=EXAMPLES * 4)
    @given(role=st.sampled_from(sorted(clients)), page=st.sampled_from(sorted(PAGE_PARAMS)),
           data=st.data())  # fmt: skip
    def fuzz(role, page, data):
        query = data.draw(query_strings(PAGE_PARAMS[page] + ["x", "format"]))
        response, before, after = send(clients[role], "GET", f"{page}?{query}", "")
        assert response.status_code < 500, (role, page, query)
        assert after == before

    fuzz()
