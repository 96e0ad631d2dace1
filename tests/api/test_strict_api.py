"""What schemathesis found (#16, tests/api/test_schemathesis.py), each fixed in the shared
API plumbing (core/api.py, core/security.py, core/filters.py) or the app's serializer, and
each pinned here without the fuzzer: state conflicts are 409, text with control characters
or lone surrogates in a JSON body is refused, every 400 has the envelope's shape, empty
choices and ``limit=0`` are refused, bodies refuse unknown fields, and the schema says so."""

from __future__ import annotations

import json
import re

import pytest

from core.api import (
    BODY_NAME,
    BODY_NAME_NOT_BLANK,
    BODY_TEXT,
    BODY_TEXT_NOT_BLANK,
    LINE_NAME_NOT_BLANK,
    LINE_TEXT_NOT_BLANK,
    PARAMETER_TEXT,
)
from monitoring.services import raise_alert
from scheduling.models import Job, Node

pytestmark = pytest.mark.django_db

NODE = "r000-n00"


def job_body(**fields) -> dict:
    return {"name": "strict", "queue": "llm-experiment", "gpus": 1, **fields}


def raw(client, path: str, text: str):
    return client.post(path, data=text.encode("utf-8", "surrogatepass"),
                       content_type="application/json")  # fmt: skip


# -- 409: the object's state refuses, not the request ----------------------------------------


def test_a_second_cancel_ack_or_cordon_is_a_409_in_the_envelope(api, demo):
    researcher, admin = api("researcher"), api("admin")
    job = researcher.post("/api/v1/jobs/", job_body(), format="json").json()["id"]
    assert researcher.post(f"/api/v1/jobs/{job}/cancel/").status_code == 200
    again = researcher.post(f"/api/v1/jobs/{job}/cancel/")
    assert again.status_code == 409
    assert again.json() == {"errors": {"state": ["job is already cancelled"]}}

    alert = raise_alert("node_unhealthy", "warning", NODE, "strict").pk
    assert admin.post(f"/api/v1/alerts/{alert}/ack/").status_code == 200
    twice = admin.post(f"/api/v1/alerts/{alert}/ack/")
    assert twice.status_code == 409 and twice.json() == {
        "errors": {"status": ["alert is already acknowledged"]}
    }

    body = {"reason": "fan"}
    assert admin.post(f"/api/v1/nodes/{NODE}/cordon/", body, format="json").status_code == 200
    cordoned = admin.post(f"/api/v1/nodes/{NODE}/cordon/", body, format="json")
    assert cordoned.status_code == 409 and set(cordoned.json()["errors"]) == {"state"}


def test_bad_input_stays_a_400_even_next_to_a_state_error(api):
    from django.core.exceptions import ValidationError

    from core.api import exception_handler

    mixed = exception_handler(ValidationError({"state": ["x"], "gpus": ["y"]}), {})
    assert mixed.status_code == 400
    assert exception_handler(ValidationError({"status": ["x"]}), {}).status_code == 409
    assert exception_handler(ValidationError("no field"), {}).status_code == 400


# -- text in JSON bodies -----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        job_body(name="\x1b]0;pwned\x07job"),  # a terminal escape (#16 finding 5)
        job_body(name="a\x00b"),
        job_body(name="job", model_name="\x9b31m"),  # a C1 control
        {**job_body(), "\x1bkey": 1},  # in a key too
    ],
)
def test_control_characters_in_a_json_body_are_refused_and_nothing_is_stored(api, body):
    before = Job.objects.count()
    response = api("researcher").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "errors": {"non_field_errors": ["control characters are not allowed in the body"]}
    }
    assert Job.objects.count() == before


def test_tabs_and_line_breaks_are_text(api):
    response = api("admin").post(
        f"/api/v1/nodes/{NODE}/cordon/", {"reason": "fan\tnoise\r\nagain"}, format="json"
    )
    assert response.status_code == 200
    assert Node.objects.get(name=NODE).state_reason == "fan\tnoise\r\nagain"


@pytest.mark.parametrize(
    "text",
    [
        '{"\\ud800": 1, "name": "a", "queue": "llm-experiment", "gpus": 1}',  # was a 500
        '{"name": "a\\udfffb", "queue": "llm-experiment", "gpus": 1}',
    ],
)
def test_a_lone_surrogate_is_a_400_not_a_500(api, text):
    response = raw(api("researcher"), "/api/v1/jobs/", text)
    assert response.status_code == 400
    assert response.json() == {
        "errors": {"non_field_errors": ["text must be valid Unicode (a lone surrogate is not)"]}
    }


@pytest.mark.parametrize("text", ["\x00", "{", "[1,", '{"a": }'])
def test_a_body_that_is_not_json_is_a_400_in_the_envelopes_shape(api, text):
    response = raw(api("admin"), "/api/v1/simulator/advance/", text)
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert list(errors) == ["non_field_errors"]
    assert all(isinstance(message, str) for message in errors["non_field_errors"])


@pytest.mark.parametrize(
    "text,key",
    [('{"name": "a", "queue": "llm-experiment", "gpus": 1, "gpus": 900}', "gpus"),
     ('{"name": "a", "queue": "llm-core", "queue": "llm-experiment", "gpus": 1}', "queue"),
     ('{"name": "a", "queue": "llm-experiment", "gpus": 1, "x": {"y": 1, "y": 2}}', "y")],
)  # fmt: skip
def test_a_key_given_twice_in_a_json_body_is_a_400_and_nothing_is_stored(api, text, key):
    # json keeps the last value; a proxy, a log or a reviewer reading the first sees
    # another request than the one the portal runs
    response = raw(api("researcher"), "/api/v1/jobs/", text)
    assert response.status_code == 400
    assert response.json() == {
        "errors": {"non_field_errors": [f"JSON parse error - the key '{key}' is given twice"]}
    }
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "content_type,body",
    [("application/x-www-form-urlencoded",
      b"name=a&queue=llm-core&queue=llm-experiment&gpus=1"),
     ("multipart/form-data; boundary=XX",
      b'--XX\r\nContent-Disposition: form-data; name="name"\r\n\r\na\r\n'
      b'--XX\r\nContent-Disposition: form-data; name="queue"\r\n\r\nllm-core\r\n'
      b'--XX\r\nContent-Disposition: form-data; name="queue"\r\n\r\nllm-experiment\r\n'
      b'--XX\r\nContent-Disposition: form-data; name="gpus"\r\n\r\n1\r\n--XX--\r\n')],
    ids=["form", "multipart"],
)  # fmt: skip
def test_a_field_given_twice_in_a_form_body_is_a_400_and_nothing_is_stored(api, content_type, body):
    # the serializer read the last one: the job went to llm-experiment
    response = api("researcher").post("/api/v1/jobs/", data=body, content_type=content_type)
    assert response.status_code == 400
    assert response.json() == {
        "errors": {"non_field_errors": ["the field 'queue' is given 2 times"]}
    }
    assert Job.objects.count() == 0


def test_a_form_body_with_each_field_once_still_submits(api):
    body = b"name=a&queue=llm-experiment&gpus=1"
    response = api("researcher").post(
        "/api/v1/jobs/", data=body, content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 201, response.content
    assert Job.objects.get().queue.name == "llm-experiment"


# -- queries ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query,name",
    [("alerts/?status=", "status"), ("jobs/?mine=", "mine"), ("jobs/?state=", "state"),
     ("nodes/?limit=0", "limit"), ("jobs/?limit=000", "limit")],
)  # fmt: skip
def test_an_empty_choice_or_a_zero_limit_is_a_400_naming_it(api, query, name):
    response = api("admin").get(f"/api/v1/{query}")
    assert response.status_code == 400 and list(response.json()["errors"]) == [name]


@pytest.mark.parametrize(
    "query,name",
    [("jobs/?owner=", "owner"), ("jobs/?queue=", "queue"), ("nodes/?rack=", "rack"),
     ("queues/?name=", "name"), ("quota-requests/?business_line=", "business_line"),
     ("jobs.csv?owner=", "owner")],
)  # fmt: skip
def test_an_empty_text_filter_is_a_400_not_no_filter(api, query, name):
    # django-filter reads an empty value as "no filter": ``?owner=$USER`` with USER unset
    # listed everyone's jobs, as ``?state=`` listed every state before
    response = api("admin").get(f"/api/v1/{query}")
    assert response.status_code == 400
    assert response.json() == {"errors": {name: ["give a value, or leave the filter out"]}}


def test_an_empty_choice_names_the_choices(api):
    response = api("admin").get("/api/v1/jobs/?mine=")
    assert response.json() == {"errors": {"mine": ["one of: 1, true, 0, false"]}}


# -- bodies -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path,body",
    [
        (f"nodes/{NODE}/cordon/", {"reason": "fan", "reson": "typo"}),
        ("simulator/advance/", {"seconds": 60, "secs": 1}),
        ("simulator/faults/", {"kind": "node_down", "node": NODE, "when": "now"}),
    ],
)
def test_a_body_with_an_unknown_field_is_refused_naming_it(api, path, body):
    from core.models import AuditRecord

    records = AuditRecord.objects.count()
    response = api("admin").post(f"/api/v1/{path}", body, format="json")
    assert response.status_code == 400
    unknown = (set(body) - {"reason", "seconds", "kind", "node"}).pop()
    assert response.json() == {"errors": {unknown: ["unknown field"]}}
    assert AuditRecord.objects.count() == records
    assert Node.objects.get(name=NODE).state == "ready"


@pytest.mark.parametrize("seconds", ["٧", "７", "1_000", "６0"])
@pytest.mark.parametrize("fmt", ["json", "multipart"])
def test_seconds_to_advance_take_digits_0_9_only_and_nothing_moves(api, seconds, fmt):
    # float() reads Arabic-Indic and full-width digits and underscores: "٧" moved the
    # cluster clock 7 s, where every count in a body takes digits 0-9 only.
    from core.models import AuditRecord
    from scheduling.models import SimulatorState

    before = (list(SimulatorState.objects.values()), AuditRecord.objects.count())
    response = api("admin").post("/api/v1/simulator/advance/", {"seconds": seconds}, format=fmt)
    assert response.status_code == 400
    assert response.json() == {"errors": {"seconds": ["A valid number is required."]}}
    assert (list(SimulatorState.objects.values()), AuditRecord.objects.count()) == before


@pytest.mark.parametrize("seconds", ["60", " 60 ", "90.5", "1e2", 60, 90.5])
def test_seconds_written_in_ascii_still_advance(api, seconds):
    response = api("admin").post("/api/v1/simulator/advance/", {"seconds": seconds}, format="json")
    assert response.status_code == 200 and response.json()["advanced_s"] == float(seconds)


def test_advancing_answers_the_cluster_time_in_iso_8601_not_epoch_seconds(api):
    from datetime import datetime

    from scheduling.clock import cluster_now

    response = api("admin").post("/api/v1/simulator/advance/", {"seconds": 90}, format="json")
    assert response.status_code == 200
    answer = response.json()
    assert isinstance(answer["cluster_time"], str) and answer["cluster_time"].endswith("Z")
    moved_to = datetime.fromisoformat(answer["cluster_time"])
    assert abs((cluster_now() - moved_to).total_seconds()) < 5
    assert answer["advanced_s"] == 90.0


def test_a_rejection_needs_a_note_and_a_quota_request_a_reason(api):
    asked = api("lead").post(
        "/api/v1/quota-requests/",
        {"business_line": "llm", "quota_gpus": 20, "reason": "  "}, format="json",
    )  # fmt: skip
    assert asked.status_code == 400 and list(asked.json()["errors"]) == ["reason"]
    negative = api("lead").post(
        "/api/v1/quota-requests/",
        {"business_line": "llm", "quota_gpus": -1, "reason": "more"}, format="json",
    )  # fmt: skip
    assert negative.status_code == 400 and list(negative.json()["errors"]) == ["quota_gpus"]
    made = api("lead").post(
        "/api/v1/quota-requests/",
        {"business_line": "llm", "quota_gpus": 20, "reason": "more"}, format="json",
    ).json()["id"]  # fmt: skip
    no_note = api("admin").post(f"/api/v1/quota-requests/{made}/reject/", {}, format="json")
    assert no_note.status_code == 400 and list(no_note.json()["errors"]) == ["note"]


# -- the schema says all of it ----------------------------------------------------------------


@pytest.fixture
def schema(api, demo) -> dict:
    return json.loads(api(None).get("/api/schema/?format=json").content)


def test_the_schema_documents_the_refusals(schema):
    components = schema["components"]["schemas"]
    bodies = set()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "limit":
                    assert parameter["schema"]["minimum"] == 1
                elif parameter["name"] == "offset":
                    assert parameter["schema"]["minimum"] == 0
                elif (
                    parameter["schema"].get("type") == "string"
                    and "enum" not in parameter["schema"]
                ):
                    assert "pattern" in parameter["schema"], (path, parameter["name"])
            if method == "post" and "201" not in operation["responses"]:  # an action
                assert "409" in operation["responses"], (method, path)
            for media in operation.get("requestBody", {}).get("content", {}).values():
                bodies.add(media["schema"]["$ref"].rsplit("/", 1)[1])
    assert {"JobSubmit", "Reason", "Note", "Approve", "Advance", "Fault"} <= bodies
    for name in bodies:
        assert components[name]["additionalProperties"] is False, name
    submit = components["JobSubmit"]["properties"]
    assert submit["name"]["pattern"] == BODY_NAME_NOT_BLANK  # no invisible characters either
    assert submit["queue"]["pattern"] == BODY_TEXT_NOT_BLANK and submit["queue"]["minLength"] == 1
    assert submit["model_name"]["pattern"] == BODY_NAME  # may be blank
    jobs = schema["paths"]["/api/v1/jobs/"]["get"]["parameters"]
    assert next(p for p in jobs if p["name"] == "queue")["schema"]["pattern"] == PARAMETER_TEXT


@pytest.mark.parametrize(
    "pattern,text,matches",
    [(PARAMETER_TEXT, "llm-core", True), (PARAMETER_TEXT, "a\tb", False),
     (BODY_TEXT, "", True), (BODY_TEXT, "a\tb\nc", True), (BODY_TEXT, "a\x1bb", False),
     (BODY_TEXT, "a\x85", False), (BODY_TEXT_NOT_BLANK, " \t ", False),
     (BODY_TEXT_NOT_BLANK, " x ", True), (BODY_TEXT_NOT_BLANK, "", False),
     # Python's ``$`` matched before a final line break: "llm-core\n" read as valid
     (PARAMETER_TEXT, "llm-core\n", False), (LINE_TEXT_NOT_BLANK, "laptop\n", False),
     (LINE_TEXT_NOT_BLANK, "東京 ✓", True), (LINE_TEXT_NOT_BLANK, " ", False),
     # names: no invisible format character either, the joiners aside
     (BODY_NAME_NOT_BLANK, "run\u200b1", False), (BODY_NAME, "\u202egnp.exe", False),
     (BODY_NAME, "", True), (BODY_NAME_NOT_BLANK, "👩\u200d💻 run", True),
     (LINE_NAME_NOT_BLANK, "ci\u00ad", False), (LINE_NAME_NOT_BLANK, "ci laptop", True)],
)  # fmt: skip
def test_the_patterns_say_what_the_portal_takes(pattern, text, matches):
    assert bool(re.match(pattern, text)) is matches


def test_a_400_from_django_itself_has_the_envelopes_shape_too(api, settings):
    """A body past Django's own limit (``DATA_UPLOAD_MAX_MEMORY_SIZE``; the web server answers
    413 before it, tests/portal/test_body_limit.py) is Django's 400, in the API's envelope:
    it was ``{"detail": "Bad request."}``."""
    big = json.dumps(job_body(name="x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)))
    response = raw(api("researcher"), "/api/v1/jobs/", big)
    assert response.status_code == 400
    assert response.json() == {"errors": {"non_field_errors": ["Bad request."]}}
