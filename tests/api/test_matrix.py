"""Every API.md path x every role: allowed callers get their answer and its effect; everyone
else gets 401/403/404 (or the documented 400 for a queue they may not use) and nothing changes.

Each case runs on a fresh demo (4 uniform nodes, no workload) prepared by ``world``: a
pending job of ``researcher`` in llm-finetune, two open alerts, one cordoned node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from core.models import AuditRecord
from monitoring.models import Alert
from monitoring.services import raise_alert
from quotas.models import BusinessLine, Queue, QuotaChange, QuotaRequest
from scheduling.models import Job, JobArray, JobEvent, Node, SchedulingCycle, SimulatorState

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "researcher", "researcher2", "lead", "oncall", "admin")
EVERYONE_SIGNED_IN = {r: 200 for r in ROLES if r != "anonymous"}


@dataclass
class World:
    job: int
    nodes: list[str]
    alerts: list[int]
    quota_request: int
    array: int


@dataclass
class Case:
    """``allowed``: role -> status (or set of statuses) for callers who may; ``denied``:
    role -> status for the others (anonymous is always 401)."""

    method: str
    path: str
    allowed: dict[str, int | set[int]]
    denied: dict[str, int | set[int]] = field(default_factory=dict)
    body: dict | None = None
    effect: Callable[[World], bool] | None = None

    def url(self, world: World) -> str:
        return "/api/v1/" + self.path.format(
            job=world.job, node=world.nodes[0], cordoned=world.nodes[1],
            alert=world.alerts[0], qr=world.quota_request, array=world.array,
        )  # fmt: skip

    def expected(self, role: str) -> set[int]:
        if role == "anonymous":
            return {401}
        status = self.allowed.get(role, self.denied.get(role, 403))
        return status if isinstance(status, set) else {status}


def _state(name_or_id, model=Node, key="name", attr="state"):
    return getattr(model.objects.get(**{key: name_or_id}), attr)


OPERATORS = {"oncall": 200, "admin": 200}


def _node_action(action: str, reason: str, *, becomes: str, on: str = "node") -> Case:
    """An operator's POST nodes/<node>/<action>/ leaves that node ``becomes``.

    ``on``: ``node`` (the first node, ready) or ``cordoned`` (the second, cordoned).
    """
    index = {"node": 0, "cordoned": 1}[on]
    return Case(
        "post", f"nodes/{{{on}}}/{action}/", OPERATORS, body={"reason": reason},
        effect=lambda w: _state(w.nodes[index]) == becomes,
    )  # fmt: skip


def _alert_action(action: str, *, becomes: str) -> Case:
    """An operator's POST alerts/<first alert>/<action>/ leaves it ``becomes``."""
    return Case(
        "post", f"alerts/{{alert}}/{action}/", OPERATORS,
        effect=lambda w: _state(w.alerts[0], Alert, "pk", "status") == becomes,
    )  # fmt: skip


SUBMIT = {"name": "matrix-job", "queue": "llm-finetune", "gpus": 4}
# two days ahead of the cluster clock (the demo's runs at wall time)
BEGIN = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
SUBMIT_DENIED = 400  # API.md: "queue: must be a queue the user may submit to" -> field error

CASES: dict[str, Case] = {
    "business-lines list": Case("get", "business-lines/", EVERYONE_SIGNED_IN),
    "queues list": Case("get", "queues/", EVERYONE_SIGNED_IN),
    "jobs list": Case("get", "jobs/", EVERYONE_SIGNED_IN),
    "jobs submit": Case(
        "post",
        "jobs/",
        {"researcher": 201, "lead": 201, "admin": 201},
        denied={"researcher2": SUBMIT_DENIED, "oncall": SUBMIT_DENIED},
        body=SUBMIT,
        effect=lambda w: Job.objects.filter(name="matrix-job", state="pending").count() == 1,
    ),
    "job detail": Case(
        "get",
        "jobs/{job}/",
        {"researcher": 200, "lead": 200, "oncall": 200, "admin": 200},
        denied={"researcher2": 404},
    ),
    "job cancel": Case(
        "post",
        "jobs/{job}/cancel/",
        {"researcher": 200, "lead": 200, "admin": 200},
        denied={"researcher2": 404, "oncall": 403},
        effect=lambda w: _state(w.job, Job, "pk") == "cancelled",
    ),
    "job hold": Case(
        "post",
        "jobs/{job}/hold/",
        {"researcher": 200, "lead": 200, "admin": 200},
        denied={"researcher2": 404, "oncall": 403},
        body={"reason": "matrix"},
        effect=lambda w: _state(w.job, Job, "pk", "held_at") is not None,
    ),
    # the job is not held: those who may release it are told so (409), the others refused
    "job release": Case(
        "post",
        "jobs/{job}/release/",
        {"researcher": 409, "lead": 409, "admin": 409},
        denied={"researcher2": 404, "oncall": 403},
    ),
    # the people who troubleshoot it (docs/api.md, "A job's output"): a pending job has none
    "job output": Case(
        "get",
        "jobs/{job}/output/",
        {"researcher": 200, "lead": 200, "oncall": 200, "admin": 200},
        denied={"researcher2": 404},
    ),
    # job arrays (docs/api.md, "Job arrays"): seen and acted on as the jobs are
    "arrays list": Case("get", "arrays/", EVERYONE_SIGNED_IN),
    "arrays submit": Case(
        "post",
        "arrays/",
        {"researcher": 201, "lead": 201, "admin": 201},
        denied={"researcher2": SUBMIT_DENIED, "oncall": SUBMIT_DENIED},
        body={**SUBMIT, "name": "matrix-array", "array": "0-2%1"},
        effect=lambda w: Job.objects.filter(array__name="matrix-array").count() == 3,
    ),
    "array detail": Case(
        "get",
        "arrays/{array}/",
        {"researcher": 200, "lead": 200, "oncall": 200, "admin": 200},
        denied={"researcher2": 404},
    ),
    "array bound": Case(
        "patch",
        "arrays/{array}/",
        {"researcher": 200, "lead": 200, "admin": 200},
        denied={"researcher2": 404, "oncall": 403},
        body={"max_running": 2},
        effect=lambda w: _state(w.array, JobArray, "pk", "max_running") == 2,
    ),
    "array cancel": Case(
        "post",
        "arrays/{array}/cancel/",
        {"researcher": 200, "lead": 200, "admin": 200},
        denied={"researcher2": 404, "oncall": 403},
        effect=lambda w: (
            set(Job.objects.filter(array=w.array).values_list("state", flat=True)) == {"cancelled"}
        ),
    ),
    # a waiting job's and an array's waiting tasks' earliest start (docs/api.md)
    "job begin time": Case(
        "post",
        "jobs/{job}/begin-time/",
        {"researcher": 200, "lead": 200, "admin": 200},
        denied={"researcher2": 404, "oncall": 403},
        body={"begin_at": BEGIN},
        effect=lambda w: _state(w.job, Job, "pk", "begin_at") is not None,
    ),
    "job top": Case(
        "post",
        "jobs/{job}/top/",
        {"researcher": 200, "lead": 200, "admin": 200},
        denied={"researcher2": 404, "oncall": 403},
        effect=lambda w: _state(w.job, Job, "pk", "first_among_own_at") is not None,
    ),
    "job move": Case(
        "post",
        "jobs/{job}/move/",
        {"researcher": 200, "lead": 200, "admin": 200},
        denied={"researcher2": 404, "oncall": 403},
        body={"queue": "llm-urgent"},
        effect=lambda w: Job.objects.get(pk=w.job).queue.name == "llm-urgent",
    ),
    "array begin time": Case(
        "post",
        "arrays/{array}/begin-time/",
        {"researcher": 200, "lead": 200, "admin": 200},
        denied={"researcher2": 404, "oncall": 403},
        body={"begin_at": BEGIN},
        effect=lambda w: not Job.objects.filter(array=w.array, begin_at__isnull=True).exists(),
    ),
    "nodes list": Case("get", "nodes/", EVERYONE_SIGNED_IN),
    "node detail": Case("get", "nodes/{node}/", EVERYONE_SIGNED_IN),
    "node cordon": _node_action("cordon", "fan", becomes="cordoned"),
    "node drain": _node_action("drain", "fan", becomes="draining"),
    "node uncordon": _node_action("uncordon", "fixed", becomes="ready", on="cordoned"),
    "node blast radius": Case("get", "nodes/{node}/blast-radius/", OPERATORS),
    "alerts list": Case("get", "alerts/", OPERATORS),
    "alert detail": Case("get", "alerts/{alert}/", OPERATORS),
    "alert ack": _alert_action("ack", becomes="acknowledged"),
    "alert resolve": _alert_action("resolve", becomes="resolved"),
    "metrics summary": Case("get", "metrics/summary/", EVERYONE_SIGNED_IN),
    "simulator fault": Case(
        "post",
        "simulator/faults/",
        OPERATORS,
        body={"kind": "residual_process", "node": "{node}"},
        effect=lambda w: AuditRecord.objects.filter(action="simulator.fault").count() == 1,
    ),
    "simulator advance": Case(
        "post",
        "simulator/advance/",
        {"admin": 200},
        body={"seconds": 60},
        effect=lambda w: AuditRecord.objects.filter(action__startswith="simulator.").exists(),
    ),
    "scheduler cycle": Case(
        "post",
        "scheduler/cycle/",
        {"admin": 200},
        effect=lambda w: SchedulingCycle.objects.filter(kind="cycle").count() == 1,
    ),
}

# quota-requests/: a request the caller may not see is a 404 whatever the action; one they
# see but may not act on is a 403.
QUOTA_BODY = {"business_line": "llm", "quota_gpus": 20, "guarantee_gpus": 4,
              "reason": "more fine-tuning this quarter"}  # fmt: skip
UNSEEN = {"researcher2": 404, "oncall": 404}  # the request is the llm line's


def _request_state(w: World) -> str:
    return QuotaRequest.objects.get(pk=w.quota_request).state


QUOTA_CASES: dict[str, Case] = {
    "quota-requests list": Case("get", "quota-requests/", EVERYONE_SIGNED_IN),
    "quota-requests create": Case(
        "post", "quota-requests/", {"lead": 201}, body=QUOTA_BODY,
        effect=lambda w: len(snapshot()["quota_requests"]) == 2,
    ),
    "quota-request impact": Case(
        "get", "quota-requests/{qr}/impact/", {"researcher": 200, "lead": 200, "admin": 200},
        denied=UNSEEN,
    ),
    "quota-request approve": Case(
        "post", "quota-requests/{qr}/approve/", {"admin": 200}, body={"note": "ok for Q4"},
        denied=UNSEEN,
        effect=lambda w: _request_state(w) == "approved" and QuotaChange.objects.exists(),
    ),
    "quota-request reject": Case(
        "post", "quota-requests/{qr}/reject/", {"admin": 200}, body={"note": "not now"},
        denied=UNSEEN, effect=lambda w: _request_state(w) == "rejected",
    ),
    "quota-request withdraw": Case(
        "post", "quota-requests/{qr}/withdraw/", {"lead": 200}, body={"note": "not needed"},
        denied=UNSEEN, effect=lambda w: _request_state(w) == "withdrawn",
    ),
}  # fmt: skip


def snapshot() -> dict:
    """Everything a refused call must leave as it was."""
    return {
        "jobs": list(Job.objects.order_by("pk").values_list("pk", "state", "name", "held_at")),
        "arrays": list(JobArray.objects.order_by("pk").values_list("pk", "max_running")),
        "events": JobEvent.objects.count(),
        "nodes": list(Node.objects.order_by("name").values_list("name", "state", "health")),
        "alerts": list(Alert.objects.order_by("pk").values_list("pk", "status")),
        "audit": AuditRecord.objects.count(),
        "cycles": SchedulingCycle.objects.count(),
        "clock": list(SimulatorState.objects.values_list("virtual_now", flat=True)),
        "lines": list(BusinessLine.objects.values_list("name", "quota_gpus", "guarantee_gpus")),
        "queues": list(Queue.objects.values_list("name", "quota_gpus", "guarantee_gpus")),
        "quota_changes": QuotaChange.objects.count(),
        "quota_requests": list(QuotaRequest.objects.order_by("pk").values()),
    }


@pytest.fixture
def world(api) -> World:
    job = api("researcher").post("/api/v1/jobs/", {**SUBMIT, "name": "theirs"}, format="json")
    assert job.status_code == 201, job.data
    nodes = list(Node.objects.order_by("name").values_list("name", flat=True))
    Node.objects.filter(name=nodes[1]).update(state="cordoned", state_reason="setup")
    alerts = [
        raise_alert("node_unhealthy", "warning", nodes[2], "GPU 3 XID 79").pk,
        raise_alert("residual_process", "critical", nodes[3], "stale process").pk,
    ]
    created = api("lead").post("/api/v1/quota-requests/", QUOTA_BODY, format="json")
    assert created.status_code == 201, created.data
    array = api("researcher").post(
        "/api/v1/arrays/", {**SUBMIT, "name": "their-array", "array": "0-1"}, format="json"
    )
    assert array.status_code == 201, array.data
    return World(
        job=job.data["id"], nodes=nodes, alerts=alerts, quota_request=created.data["id"],
        array=array.data["id"],
    )  # fmt: skip


def call(api, role: str, case: Case, world: World):
    client = api(None if role == "anonymous" else role)
    body = case.body
    if body is not None:
        body = {k: v.format(node=world.nodes[0]) if isinstance(v, str) else v
                for k, v in body.items()}  # fmt: skip
    return getattr(client, case.method)(case.url(world), body, format="json")


def check(api, role: str, case: Case, world: World) -> None:
    before = snapshot()
    response = call(api, role, case, world)
    assert response.status_code in case.expected(role), (role, response.status_code, response.data)
    assert response.status_code != 500
    if role in case.allowed:
        if case.effect is not None:
            assert case.effect(world), f"{role}: {case.method} {case.path} had no effect"
    else:
        assert snapshot() == before, f"{role} changed something through {case.path}"
        if response.status_code == 400:
            assert "errors" in response.data


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", list(CASES))
def test_each_path_answers_each_role_as_specified(api, world, name, role):
    check(api, role, CASES[name], world)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", list(QUOTA_CASES))
def test_quota_request_paths_answer_each_role(api, world, name, role):
    check(api, role, QUOTA_CASES[name], world)


def test_unknown_objects_are_404_for_those_allowed_to_act(api, world):
    admin = api("admin")
    assert admin.get("/api/v1/jobs/999999/").status_code == 404
    assert admin.post("/api/v1/jobs/999999/cancel/").status_code == 404
    assert admin.post("/api/v1/jobs/999999/hold/", {"reason": "x"}).status_code == 404
    assert admin.post("/api/v1/jobs/999999/release/").status_code == 404
    assert admin.get("/api/v1/nodes/no-such-node/").status_code == 404
    assert admin.post("/api/v1/nodes/no-such-node/cordon/", {"reason": "x"}).status_code == 404
    assert admin.post("/api/v1/alerts/999999/ack/").status_code == 404
    assert admin.get("/api/v1/queues/999999/").status_code == 404
    assert admin.get("/api/v1/arrays/999999/").status_code == 404
    assert admin.patch("/api/v1/arrays/999999/", {"max_running": 1}).status_code == 404
    assert admin.post("/api/v1/arrays/999999/cancel/").status_code == 404


def test_refused_writes_with_bad_bodies_still_store_nothing(api, world):
    before = snapshot()
    oncall = api("oncall")
    assert oncall.post(f"/api/v1/nodes/{world.nodes[0]}/cordon/", {}).status_code == 400
    assert (
        oncall.post(f"/api/v1/nodes/{world.nodes[0]}/cordon/", {"reason": " "}).status_code == 400
    )
    bad_fault = {"kind": "meteor", "node": world.nodes[0]}
    assert oncall.post("/api/v1/simulator/faults/", bad_fault, format="json").status_code == 400
    assert api("admin").post("/api/v1/simulator/advance/", {"seconds": -5}).status_code == 400
    assert snapshot() == before


def test_the_matrix_covers_every_api_md_path(world):
    """The case tables above name every resource path of API.md (v1 prefix)."""
    documented = {
        "business-lines/", "queues/", "jobs/", "jobs/{id}/", "jobs/{id}/cancel/",
        "jobs/{id}/hold/", "jobs/{id}/release/", "nodes/",
        "nodes/{name}/cordon/", "nodes/{name}/drain/", "nodes/{name}/uncordon/", "alerts/",
        "alerts/{id}/ack/", "alerts/{id}/resolve/", "quota-requests/",
        "quota-requests/{id}/impact/", "quota-requests/{id}/approve/",
        "quota-requests/{id}/reject/", "quota-requests/{id}/withdraw/", "metrics/summary/",
        "simulator/faults/", "simulator/advance/", "scheduler/cycle/",
    }  # fmt: skip
    generic = {
        "{job}": "{id}", "{node}": "{name}", "{cordoned}": "{name}", "{alert}": "{id}",
        "{qr}": "{id}", "{array}": "{id}",
    }  # fmt: skip
    covered = set()
    for case in [*CASES.values(), *QUOTA_CASES.values()]:
        path = case.path
        for specific, name in generic.items():
            path = path.replace(specific, name)
        covered.add(path)
    assert documented <= covered, documented - covered
