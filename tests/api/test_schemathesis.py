"""schemathesis against the live portal (#16): every check it has, on the real web server
(``portal.web``: uvicorn, PostgreSQL, Redis), as an admin and as a researcher, and in
chains of calls as a team lead and an admin.

``test_every_operation_passes_every_check`` (schemathesis's pytest integration,
``schemathesis.pytest.from_fixture``) loads ``/api/schema/`` from the server and, for each
operation, runs the coverage phase (boundary and just-invalid values of every parameter and
field, unexpected methods) and the fuzzing phase (``SCHEMATHESIS_EXAMPLES`` generated
cases, schema-valid and schema-violating, in JSON, form and multipart bodies).
``test_chains_of_calls_pass_every_check`` runs schemathesis's stateful phase: sequences
along the links it infers from the schema (list → read → act, ask for quota → approve,
reject or withdraw it), a lead asking and an admin deciding.

Every response passes every check schemathesis has (``CHECKS``, none switched off):
server errors, status codes, content types, response schemas and headers, schema-valid
data accepted, schema-violating data rejected, missing headers, ignored auth, unsupported
methods and their Allow header, use after free, resource availability, response time.
What the test tells schemathesis, each with its reason next to the code: the refusals by
rules no schema can state (``RULES_BEYOND_THE_SCHEMA``), that names in bodies are real
ones (``_name_real_objects``), that a form has no null (``_forms_without_nulls``).

Writes are real: jobs are submitted and cancelled, nodes cordoned, drained and uncordoned,
alerts acknowledged and resolved, quota requests made and decided, the clock advanced,
faults injected, cycles run. Ids and node names in paths are real half the time, and names
in bodies (queue, line, node) always (schemathesis "dictionaries" drawn from the live
data), so actions reach real objects and not only 404s; the test checks that every write
an admin or a researcher may make reached one (accepted, or refused by its state: 409).

Bounded: ``SCHEMATHESIS_EXAMPLES`` (default 10) cases per operation and mode in the fuzzing
phase, a 10 s Hypothesis deadline and a 10 s ``max_response_time`` check per call, the
coverage phase's body cases in JSON only (``SCHEMATHESIS_FORM_COVERAGE=1`` sends them form-
encoded too), derandomized: the same cases every run. The long run of docs/security.md:
``SCHEMATHESIS_EXAMPLES=100 SCHEMATHESIS_FORM_COVERAGE=1``.
"""

from __future__ import annotations

import os
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis.errors import Flaky
from schemathesis.core.failures import FailureGroup
from schemathesis.transport.requests import (
    REQUESTS_TRANSPORT,
    multipart_serializer,
    urlencoded_serializer,
)

from tests.drills import api_tokens
from tests.reliability.conftest import child_env, web_server

# Sequences restart per test: ids are as small as on a fresh database whatever ran before
# (the "ids" dictionary mixes job, alert and request ids; in a long session they drift apart).
pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True)

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "10"))
FORM_COVERAGE = os.environ.get("SCHEMATHESIS_FORM_COVERAGE") == "1"
DEADLINE = timedelta(seconds=10)
SEED = 16
HYPOTHESIS = {
    "deadline": DEADLINE, "derandomize": True, "database": None,
    "suppress_health_check": list(HealthCheck),
}  # fmt: skip

# Every check schemathesis 4 has (``st run --checks all``); none is switched off.
CHECKS = [
    "not_a_server_error", "status_code_conformance", "content_type_conformance",
    "response_schema_conformance", "response_headers_conformance",
    "positive_data_acceptance", "negative_data_rejection", "missing_required_header",
    "ignored_auth", "unsupported_method", "allow_header_conformance", "use_after_free",
    "ensure_resource_availability", "object_level_authorization", "max_response_time",
]  # fmt: skip

# Writes each role may make, every one of which must have reached a real object at least
# once: accepted (2xx), or refused by that object's state (409; in a long run the approvals
# decide every pending quota request before the rejections run), not only 400s and 404s.
WRITES = {
    "admin": {
        "POST /api/v1/jobs/", "POST /api/v1/jobs/{id}/cancel/",
        "POST /api/v1/jobs/{id}/hold/", "POST /api/v1/jobs/{id}/release/",
        "POST /api/v1/nodes/{name}/cordon/", "POST /api/v1/nodes/{name}/drain/",
        "POST /api/v1/nodes/{name}/uncordon/", "POST /api/v1/alerts/{id}/ack/",
        "POST /api/v1/alerts/{id}/resolve/", "POST /api/v1/quota-requests/{id}/approve/",
        "POST /api/v1/quota-requests/{id}/reject/", "POST /api/v1/simulator/advance/",
        "POST /api/v1/simulator/faults/", "POST /api/v1/scheduler/cycle/",
        "POST /api/v1/arrays/", "PATCH /api/v1/arrays/{id}/", "POST /api/v1/arrays/{id}/cancel/",
    },
    "researcher": {
        "POST /api/v1/jobs/", "POST /api/v1/jobs/{id}/cancel/", "POST /api/v1/jobs/{id}/hold/",
        "POST /api/v1/jobs/{id}/release/", "POST /api/v1/arrays/",
        "PATCH /api/v1/arrays/{id}/", "POST /api/v1/arrays/{id}/cancel/",
    },
}  # fmt: skip


@dataclass
class Live:
    """The running portal: its URL, a token per demo user, and the names of what exists."""

    base: str
    tokens: dict[str, str]
    ids: list[int]
    nodes: list[str]
    queues: list[str]
    lines: list[str]
    reached: Counter[str] = field(default_factory=Counter)  # write -> 2xx and 409 answers
    answers: Counter[int] = field(default_factory=Counter)


def _world(api) -> None:
    """Something of every kind to act on: pending and running jobs, an alert per node, a
    cordoned node, pending quota requests (``build_world`` and a few more)."""
    from monitoring.services import raise_alert
    from scheduling.models import Node
    from tests.security.pages import build_world

    world = build_world(api)
    for spec in ("0-3%2", "0-1"):
        made = api("researcher").post(
            "/api/v1/arrays/",
            {"name": f"st-array-{spec}", "queue": "llm-experiment", "gpus": 1, "array": spec},
            format="json",
        )  # fmt: skip
        assert made.status_code == 201, made.content
    for gpus in (1, 2, 8, 8, 16):
        made = api("researcher").post(
            "/api/v1/jobs/", {"name": f"st-{gpus}", "queue": "llm-experiment", "gpus": gpus},
            format="json",
        )  # fmt: skip
        assert made.status_code == 201, made.content
    for i, node in enumerate(Node.objects.order_by("name").values_list("name", flat=True)):
        raise_alert("node_unhealthy", "warning", node, f"schemathesis alert {i}")
    for quota in (24, 28):
        asked = api("lead").post(
            "/api/v1/quota-requests/",
            {"business_line": world.line, "quota_gpus": quota, "reason": "schemathesis"},
            format="json",
        )  # fmt: skip
        assert asked.status_code == 201, asked.content


@pytest.fixture
def live(api, demo, tmp_path) -> Iterator[Live]:
    """The portal's web server on the test database, with a world and API tokens."""
    from monitoring.models import Alert
    from quotas.models import BusinessLine, Queue, QuotaRequest
    from scheduling.models import Job, JobArray, Node

    _world(api)
    tokens = api_tokens(demo)
    ids: set[int] = set()
    for model in (Job, JobArray, Alert, QuotaRequest, Queue, BusinessLine):
        ids.update(model.objects.values_list("pk", flat=True))
    with web_server(child_env(), tmp_path / "web.log") as base:
        yield Live(
            base=base, tokens=tokens, ids=sorted(ids),
            nodes=sorted(Node.objects.values_list("name", flat=True)),
            queues=sorted(Queue.objects.values_list("name", flat=True)),
            lines=sorted(BusinessLine.objects.values_list("name", flat=True)),
        )  # fmt: skip


def _config(live: Live, role: str) -> schemathesis.Config:
    """Every check on (schemathesis's default), the role's token, the live names, bounds."""
    dictionaries = {
        "ids": {"values": live.ids},
        "nodes": {"values": live.nodes},
        "queues": {"values": live.queues},
        "lines": {"values": live.lines},
    }
    # Half the ids and node names in paths are real (the other half are 404s). A name in a
    # body is always a real one: "no such queue" is a 400 naming the field, which the schema
    # cannot rule out (it does not list the queues); tests/security/test_fuzz_api.py sends
    # unknown names.
    half, always = 0.5, 1.0
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "headers": {"Authorization": f"Token {live.tokens[role]}"},
            "dictionaries": dictionaries,
            "parameters": {
                "path.id": {"dictionary": "ids", "probability": half},
                "path.name": {"dictionary": "nodes", "probability": half},
                "body.queue": {"dictionary": "queues", "probability": always},
                "body.business_line": {"dictionary": "lines", "probability": always},
                "body.node": {"dictionary": "nodes", "probability": always},
            },
            "generation": {"max-examples": EXAMPLES, "deterministic": True},
            "checks": {"max_response_time": DEADLINE.total_seconds()},
        }
    )


def _load(live: Live, role: str) -> schemathesis.BaseSchema:
    """The schema as the live server serves it, with every check on."""
    from schemathesis.checks import CHECKS as REGISTRY

    loaded = schemathesis.openapi.from_url(
        f"{live.base}/api/schema/?format=json",
        config=_config(live, role), wait_for_schema=30,
    )  # fmt: skip
    assert set(REGISTRY.get_all_names()) | {"max_response_time"} == set(CHECKS)
    enabled = loaded.config.checks_config_for()
    assert [name for name in CHECKS if not enabled.get_by_name(name=name).enabled] == []
    return loaded


# The one exclusion. Some bodies are refused (400, naming the field and the rule) by rules
# over what no schema can state: the caller's business lines, the queue's tier, another
# field's value, the cluster's size and shape (NEVER_FITS, docs/scheduling.md), the lines'
# current contracts and the guarantees' reserve, the form of a checkpoint URI (a known
# scheme, no "." or ".." segments). A schema-valid body refused with one of these messages
# is the portal answering, so ``positive_data_acceptance`` does not count that one
# response; every other check still does, and any other refusal of a schema-valid body
# still fails the test.
FITS = r"no longer valid: |the guarantees? .*(reserve|healthy|cluster)|.* Approve with override_reserve"
JOB_RULES = {
    "queue": r"you may not submit to this queue$",
    "tier": r"queue \S+ allows tiers up to '\w+', not '\w+'$",
    "gpus": r"the cluster has [\d,]+ GPUs in all; this job asks [\d,]+$",
    "gpus_per_node": r"nodes have at most \d+ GPUs$|[\d,]+ GPUs cannot be split evenly into ",
    "checkpoint_path": r"checkpoints must live on shared storage|a URI like s3://bucket/run/",
    # which jobs exist and whom they are visible to (docs/api.md, "Job dependencies")
    "after": r"unknown job \d+$|job \d+ (failed|was cancelled); a job after it could never start$"
    r"|job \d+ succeeded; a job after its failure could never start$",
    "after_arrays": r"unknown array \d+$|task \d+ of array \d+ (failed|was cancelled); a job "
    r"after it could never start$|every task of array \d+ succeeded; a job after its failure "
    r"could never start$",
    "after_condition": r"(ended|failed) needs jobs \(after\) or arrays \(after_arrays\)$|a "
    r"singleton waits for your older jobs of its name to end, whatever the outcome: (with after, "
    r"after_arrays or after_corresponding, set after_condition to ended too|it cannot wait for "
    r"them to fail)$",
    # an array's only; which arrays exist, whom they are visible to, what their tasks did
    "after_corresponding": r"for a job array only: |unknown array \d+$|task \d+ of array \d+ "
    r"(failed|was cancelled|succeeded); task \d+ of this array could never start$",
    # how many active jobs of its name the person has (docs/api.md, "One at a time by name")
    "singleton": r"you have [\d,]+ active jobs and arrays named .*; a singleton waits for at most",
    # the other field's value (docs/api.md, "Time limits")
    "estimated_runtime_minutes": r"your estimate \([\d,]+ min\) is longer than the time limit ",
    "*": r"This job could never run on this cluster, even empty: ",
}
ARRAY_SPEC_RULES = (
    r"at most [\d,]+ tasks in one array$|(index|the bound|step) \d+ is above [\d,]+$|"
    r"indices run from 0 to [\d,]+$|\S+: a range runs from low to high$|"
    r"\S+: a step is at least 1$|index \d+ is asked for twice$|%0 would run no task"
)
RULES_BEYOND_THE_SCHEMA: dict[str, dict[str, str]] = {
    # the runs a job has had (docs/api.md, "A job's output")
    "GET /api/v1/jobs/{id}/output/": {
        "attempt": r"between 1 and \d+ \(its runs so far\)$|the job has not started a run yet$",
    },
    "POST /api/v1/jobs/": JOB_RULES,
    # a job array's tasks are that job; its spec's rules beyond its grammar (docs/api.md,
    # "Job arrays"): ranges low to high, at most 1,000 tasks, each index once, no %0
    "POST /api/v1/arrays/": {**JOB_RULES, "array": ARRAY_SPEC_RULES},
    # the bound is at most the array's size, which the schema does not know
    "PATCH /api/v1/arrays/{id}/": {"max_running": r"the array has [\d,]+ tasks?; at most [\d,]+$"},
    # what the job's earliest start is now, and the cluster clock (docs/api.md, "An earliest
    # start"): the same time again, clearing one it has not, a year ahead of cluster time
    "POST /api/v1/jobs/{id}/begin-time/": {
        "begin_at": r"it has no earliest start: it already queues$|its earliest start is "
        r"already |at most 366 days ahead|too far in the past$",
    },
    # the same for an array's waiting tasks, and whether any task still waits
    "POST /api/v1/arrays/{id}/begin-time/": {
        "begin_at": r"every waiting task's earliest start is |at most 366 days ahead|too far in "
        r"the past$",
    },
    # what the owner's other jobs are: one already put first the latest is refused
    "POST /api/v1/jobs/{id}/top/": {
        "first_among_own_at": r"it is already the one put first of those jobs$"
    },
    # which queues exist and whom they are open to, the job's queue, tier, time limit
    # and array (docs/api.md, "Moving a waiting job")
    "POST /api/v1/jobs/{id}/move/": {
        "queue": r"unknown queue |you may not submit to this queue$|\S+ may not submit to queue "
        r"|it is already in queue |queue \S+ allows tiers up to |queue \S+ lets a run last at "
        r"most |a task of array \d+ stays in its array's queue$",
    },
    # whose job it is: an admin's hold of someone else's job needs a reason (docs/api.md)
    "POST /api/v1/jobs/{id}/hold/": {"reason": r"say why: an admin's hold of someone else's"},
    "POST /api/v1/quota-requests/": {
        "queue": r"queue \S+ belongs to the line \S+, not \S+$",
        "starts_at": r"at most 2 years ahead |at most 2 years ago: ",
        "ends_at": r"the end must be after the start$|the end is already past$|at most 2 years "
        r"ahead ",
        "quota_gpus": r"give a new quota, a new guarantee, or both$|[\d,]+ GPUs is more than "
        r"the cluster holds|a queue's quota \([\d,]+\) cannot be above its line's quota",
        "guarantee_gpus": r"[\d,]+ GPUs is more than the cluster holds|a guarantee of [\d,]+ "
        r"GPUs is above the current quota|the guarantee \([\d,]+\) cannot be above the quota|"
        r"a queue's guarantee \([\d,]+\) cannot be above its line's quota",
        "non_field_errors": r"already the contract of ",
    },
    "POST /api/v1/quota-requests/{id}/approve/": {
        "ends_at": r"its period has already ended; reject it$",
        "*": FITS,
    },
    # Scheduled maintenance: the cluster's nodes and racks, the cluster clock (a start past
    # or too far ahead), the other field's value and the windows already open.
    "POST /api/v1/maintenance/": {
        "nodes": r"unknown nodes? |not a node name: |name at least one node, or a rack$|\S+ "
        r"already has "
        r"maintenance #\d+ in that time$",
        "rack": r"unknown rack |not a rack name: ",
        "starts_at": r"in the past \(cluster time is |at most \d+ days ahead$|no such date or time: ",
        "ends_at": r"must be after starts_at$|at most \d+ days ahead$|no such date or time: ",
    },
    # Whether a node has an idle GPU for a stale process to hold is the simulator's state
    # at that moment (its GPUs may all run jobs or hold residue already).
    "POST /api/v1/simulator/faults/": {"node": r"no idle GPU on \S+ to hold$"},
}


def _rule_refusal(case, response) -> bool:
    """Whether ``response`` is a 400 whose every message is one of the operation's rules
    beyond the schema (``RULES_BEYOND_THE_SCHEMA``)."""
    rules = RULES_BEYOND_THE_SCHEMA.get(case.operation.label)
    if not rules or response.status_code != 400:
        return False
    errors = response.json().get("errors", {})
    return bool(errors) and all(
        any(re.match(rules[key], message) for key in (name, "*") if key in rules)
        for name, messages in errors.items()
        for message in messages
    )


def _excluded(case, response) -> list:
    """The checks not run on ``response``: none, but ``RULES_BEYOND_THE_SCHEMA``."""
    return [schemathesis.checks.positive_data_acceptance] if _rule_refusal(case, response) else []


# Body fields that name an object, and where the real names are.
REFERENCES = {"queue": "queues", "business_line": "lines", "node": "nodes"}


def _name_real_objects(case, live: Live) -> None:
    """The coverage phase takes no dictionaries: a name in a schema-valid body that names
    nothing (``"queue": "0"``) is replaced by a real one, chosen by the name (the same run
    every time). Schema-violating cases are left alone: they are meant to be refused."""
    if (
        not isinstance(case.body, dict)
        or case.meta is None
        or case.meta.generation.mode.is_negative
    ):
        return
    for name, kind in REFERENCES.items():
        value, names = case.body.get(name), getattr(live, kind)
        if isinstance(value, str) and value not in names:
            case.body[name] = names[zlib.crc32(value.encode()) % len(names)]


def _forms_without_nulls(serialize):
    """A form has no null: OpenAPI's form style (RFC 6570) leaves an undefined value out, and
    the portal (DRF) reads an absent or empty nullable field as null. schemathesis writes the
    text ``null`` instead, which is no number (``guarantee_gpus=null`` is a 400). So in a
    schema-valid form body a null is left out; schema-violating cases are sent as made."""

    def without_nulls(ctx, value):
        case = ctx.case  # its body as generated: the form's values may be text already
        if (
            isinstance(value, dict) and isinstance(case.body, dict)
            and case.meta is not None and not case.meta.generation.mode.is_negative
        ):  # fmt: skip
            value = {name: item for name, item in value.items() if case.body.get(name) is not None}
        return serialize(ctx, value)

    return without_nulls


REQUESTS_TRANSPORT.serializer("application/x-www-form-urlencoded")(
    _forms_without_nulls(urlencoded_serializer)
)
REQUESTS_TRANSPORT.serializer("multipart/form-data")(_forms_without_nulls(multipart_serializer))


def _skipped_for_time(case) -> bool:
    """The coverage phase's cases of a body are sent as JSON only, unless
    ``SCHEMATHESIS_FORM_COVERAGE=1``: the same cases form-encoded doubled the run. The
    fuzzing phase sends all three encodings (JSON, form, multipart) either way."""
    return (
        not FORM_COVERAGE
        and case.meta is not None
        and case.meta.phase.name.value == "coverage"
        and case.media_type not in (None, "application/json")
    )


@pytest.fixture(params=sorted(WRITES))
def role(request) -> str:
    return request.param


@pytest.fixture
def portal_schema(live: Live, role: str) -> Iterator[schemathesis.BaseSchema]:
    """The schema as the server serves it, for ``role``; afterwards, every write the role
    may make must have reached a real object (``WRITES``)."""
    yield _load(live, role)
    print(f"schemathesis as {role}: {sum(live.answers.values())} calls,", dict(live.answers))
    never = WRITES[role] - set(live.reached)
    assert not never, f"no real object reached as {role} (only 400s, 404s): {sorted(never)}"


# schemathesis 4.32 relabels the running test per operation through ``Function._nodeid``,
# which pytest 9.2 replaced with ``_id``: reads get the node id, the relabelling is dropped
# (each operation is still reported as a subtest with its label).
if not hasattr(pytest.Function, "_nodeid"):
    pytest.Function._nodeid = property(lambda node: node.nodeid, lambda node, value: None)

schema = schemathesis.pytest.from_fixture("portal_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES, **HYPOTHESIS)
def test_every_operation_passes_every_check(case, live: Live):
    if _skipped_for_time(case):
        return
    _name_real_objects(case, live)
    response = case.call()
    live.answers[response.status_code] += 1
    case.validate_response(response, excluded_checks=_excluded(case, response))
    if case.method.upper() in ("POST", "PATCH") and (
        200 <= response.status_code < 300 or response.status_code == 409
    ):
        live.reached[case.operation.label] += 1


# The stateful phase: a lead asks for quota and withdraws; an admin does everything else.
LEAD_OPERATIONS = ["POST /api/v1/quota-requests/", "POST /api/v1/quota-requests/{id}/withdraw/"]


def test_chains_of_calls_pass_every_check(live: Live):
    loaded = _load(live, "admin")
    lead = {"Authorization": f"Token {live.tokens['lead']}"}
    steps: Counter[str] = Counter()
    found: list[str] = []

    class Workflow(loaded.as_state_machine()):
        def before_call(self, case) -> None:
            _name_real_objects(case, live)

        def get_call_kwargs(self, case) -> dict:
            return {"headers": lead} if case.operation.label in LEAD_OPERATIONS else {}

        def call(self, case, **kwargs):
            try:
                return super().call(case, **kwargs)
            except Exception as exc:  # kept, then raised: a call that failed is a failure
                found.append(f"{case.operation.label}: {exc!r}")
                raise

        def validate_response(self, response, case, additional_checks=None, **kwargs) -> None:
            # As schemathesis's own (with the scenario's recorder), plus the one exclusion.
            steps[f"{case.operation.label} {response.status_code}"] += 1
            try:
                case.validate_response(
                    response, additional_checks=additional_checks,
                    excluded_checks=_excluded(case, response), transport_kwargs=kwargs or None,
                    recorder=self.recorder,
                )  # fmt: skip
            except FailureGroup as failures:
                found.append(str(failures))
                raise

    # The server keeps what each scenario did, so a scenario Hypothesis replays (to shrink a
    # failure, or exploring) may take another path: Hypothesis calls that Flaky. As
    # schemathesis's own runner does, that alone fails nothing; a failed check or call does,
    # and is kept in ``found`` as it happens.
    try:
        Workflow.run(settings=settings(max_examples=EXAMPLES, stateful_step_count=8, **HYPOTHESIS))
    except Flaky:
        assert found == [], found[0]
    print("schemathesis chains:", dict(steps))
    assert sum(steps.values()) >= 10, steps  # chains ran (a Flaky replay may end them early)
    assert any(step.startswith("POST ") and step.endswith(" 200") for step in steps), steps
