"""The Kubernetes (Volcano) backend against recorded API responses; no API server runs here.

Every test drives the real ``kubernetes`` client (URL and query building, JSON
bodies, patch content types) down to urllib3: only the connection pool is replaced
by :class:`FakePool`, which records each request (method, path, query, JSON body,
content type) and answers it.

- :class:`Recorded` answers from ``tests/backends/data/k8s/*.json``: a NodeList, a
  PodList across namespaces, the portal namespace's PodList, a Volcano JobList and
  API ``Status`` errors, hand-built in the exact shape of API server responses and
  checked here against the client's typed models and Volcano's CRD schema. They were
  **not captured from a live cluster** (none can run here). These tests assert the
  exact calls of launch, stop, kill, cordon and uncordon, the parsed observation and
  the error mapping.
- :class:`Cluster` is an *emulation* (API server + Volcano job controller + kubelets,
  written from Volcano's controller source: pods created once the gang fits, a
  deleted pod is ``PodEvicted`` -> ``TerminateJob``, ``Terminated`` once every pod is
  gone, ``Completed`` when all succeed). It lets the shared contract suite
  (``tests/backends/contract.py``) run against this backend. Passing it shows the
  backend is consistent with that model of Volcano, not that Volcano behaves so.
"""

from __future__ import annotations

import copy
import json
import math
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest
from kubernetes import client
from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError

from scheduling.backends import volcano
from scheduling.backends.base import (
    FAILED,
    RUNNING,
    STOPPED,
    STOPPING,
    SUCCEEDED,
    ClusterBackend,
    NoOutput,
    ObservedJob,
    PermanentBackendError,
    TransientBackendError,
)
from scheduling.backends.kubernetes import (
    LIVE_POD_SELECTOR,
    KubernetesBackend,
    load_api_client,
    map_api_exception,
    normalize_gpu_model,
    pod_gpus,
)
from scheduling.engine.types import Slot
from tests.backends.contract import BackendContract, Harness, launch_request, polling_settle

DATA = Path(__file__).parent / "data" / "k8s"
NOW = 1748858400.0  # 2025-06-02T10:00:00Z, the instant of the recorded responses
NS = "gpu-portal"
HOST = "https://k8s.test:6443"
JOBS_PATH = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NS}/jobs"
COMMANDS_PATH = f"/apis/bus.volcano.sh/v1alpha1/namespaces/{NS}/commands"
PODS_PATH = f"/api/v1/namespaces/{NS}/pods"
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------
# The fake wire: urllib3's pool replaced, everything above it is the real client
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str | None


class WireResponse:
    """What urllib3 returns (status, reason, data, headers)."""

    def __init__(self, status: int, payload: Any) -> None:
        self.status = status
        self.reason = {200: "OK", 201: "Created"}.get(status, "Error")
        if isinstance(payload, bytes):  # a pod's log: text, as the API server sends it
            self.data, self.headers = payload, {"content-type": "text/plain"}
            return
        self.data = b"" if payload is None else json.dumps(payload).encode()
        self.headers = {"content-type": "application/json"}


class FakePool:
    """Stands in for ``urllib3.PoolManager``: records each request, asks ``handler``."""

    def __init__(self, handler) -> None:
        self.handler = handler
        self.calls: list[Call] = []

    def request(self, method, url, body=None, fields=None, headers=None, **_: Any):
        parts = urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}" == HOST
        call = Call(
            method=method,
            path=unquote(parts.path),
            query=dict(parse_qsl(parts.query, keep_blank_values=True)),
            body=json.loads(body) if body else None,
            content_type=(headers or {}).get("Content-Type"),
        )
        self.calls.append(call)
        out = self.handler(call)
        if isinstance(out, BaseException):
            raise out
        status, payload = out
        return WireResponse(status, payload)

    def clear(self) -> None:
        pass


def backend_on(handler, **kwargs: Any) -> tuple[KubernetesBackend, FakePool]:
    api = client.ApiClient(client.Configuration(host=HOST))
    pool = FakePool(handler)
    api.rest_client.pool_manager = pool
    defaults = dict(namespace=NS, queue="portal", grace_s=300, timeout=10, clock=lambda: NOW)
    return KubernetesBackend(api_client=api, **{**defaults, **kwargs}), pool


def selected(obj: dict[str, Any], selector: str | None) -> bool:
    """Equality/existence label selectors (``a=b,c``), as the API server applies them."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        key, eq, value = term.partition("=")
        if (eq and labels.get(key) != value) or (not eq and key not in labels):
            return False
    return True


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip


# ---------------------------------------------------------------------------------------
# Recorded responses
# ---------------------------------------------------------------------------------------
class Recorded:
    """Answers from the recorded files; ``script[(method, path)]`` overrides, in order."""

    def __init__(self) -> None:
        self.nodes = load("nodes.json")
        self.live = load("pods-live.json")
        self.portal_pods = load("pods-portal.json")
        self.jobs = load("vcjobs.json")
        self.logs = {"portal-7-1-node0-0": (DATA / "log-portal-7-1-node0-0.txt").read_bytes()}
        self.script: dict[tuple[str, str], list[Any]] = {}

    def on(self, method: str, path: str, *answers: Any) -> None:
        self.script.setdefault((method, path), []).extend(answers)

    def job(self, name: str) -> dict[str, Any] | None:
        return next((j for j in self.jobs["items"] if j["metadata"]["name"] == name), None)

    def __call__(self, call: Call) -> Any:
        queued = self.script.get((call.method, call.path))
        if queued:
            return queued.pop(0)
        m, p = call.method, call.path
        if m == "GET" and p == "/api/v1/nodes":
            items = [n for n in self.nodes["items"] if selected(n, call.query.get("labelSelector"))]
            return 200, {**self.nodes, "items": items}
        if m == "GET" and p == "/api/v1/pods":
            return 200, self.live
        if m == "GET" and p == PODS_PATH:
            items = [x for x in self.portal_pods["items"]
                     if selected(x, call.query.get("labelSelector"))]  # fmt: skip
            return 200, {**self.portal_pods, "items": items}
        if m == "GET" and p == JOBS_PATH:
            return 200, self.jobs
        if m == "GET" and p.startswith(PODS_PATH + "/") and p.endswith("/log"):
            return log_answer(self.logs.get(p.split("/")[-2]), call.query)
        if p.startswith(JOBS_PATH + "/"):
            name = p.rsplit("/", 1)[1]
            job = self.job(name)
            if job is None:
                return 404, status_body(
                    404, "NotFound", f'jobs.batch.volcano.sh "{name}" not found'
                )
            if m == "GET":
                return 200, job
            if m == "PATCH":
                out = copy.deepcopy(job)
                out["metadata"]["annotations"].update(call.body["metadata"]["annotations"])
                return 200, out
            if m == "DELETE":
                return 200, job
        if m == "POST" and p == JOBS_PATH:
            created = copy.deepcopy(call.body)
            created["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=iso(NOW))
            return 201, created
        if m == "DELETE" and p.startswith(PODS_PATH + "/"):
            pod = next(
                x for x in self.portal_pods["items"] if x["metadata"]["name"] == p.rsplit("/", 1)[1]
            )
            return 200, pod
        if m == "POST" and p == COMMANDS_PATH:
            return 201, {**call.body, "metadata": {**call.body["metadata"], "name": "cmd-x1"}}
        if m == "PATCH" and p.startswith("/api/v1/nodes/"):
            name = p.rsplit("/", 1)[1]
            node = next((n for n in self.nodes["items"] if n["metadata"]["name"] == name), None)
            return (200, node) if node else (404, load("status-404-node.json"))
        return 404, status_body(404, "NotFound", f"no recorded answer for {m} {p}")


def log_answer(log: bytes | None, query: dict[str, str]) -> Any:
    """A pod's log as the API server answers ``GET .../pods/<pod>/log``: the last
    ``tailLines`` lines, then at most ``limitBytes`` of them (404: no such pod)."""
    if log is None:
        return 404, status_body(404, "NotFound", "pods not found")
    lines = log.splitlines(keepends=True)
    if "tailLines" in query:
        lines = lines[-int(query["tailLines"]) :]
    data = b"".join(lines)
    return 200, data[: int(query["limitBytes"])] if "limitBytes" in query else data


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


def calls_of(pool: FakePool) -> list[tuple[str, str, dict[str, str]]]:
    return [(c.method, c.path, c.query) for c in pool.calls]


def observe_calls() -> list[tuple[str, str, dict[str, str]]]:
    return [
        ("GET", "/api/v1/nodes", {}),
        ("GET", "/api/v1/pods", {"fieldSelector": LIVE_POD_SELECTOR}),
        ("GET", JOBS_PATH, {}),
        ("GET", PODS_PATH, {"labelSelector": volcano.LABEL_RUN_REF}),
    ]


# ---------------------------------------------------------------------------------------
# The recorded responses are shaped like the real thing
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, model",
    [("nodes.json", "V1NodeList"), ("pods-live.json", "V1PodList"),
     ("pods-portal.json", "V1PodList")]
    + [(f.name, "V1Status") for f in sorted(DATA.glob("status-*.json"))],
)  # fmt: skip
def test_recorded_core_responses_fit_the_clients_typed_models(name, model):
    assert volcano.typed_errors(load(name), model) == []


def test_recorded_volcano_objects_fit_the_crd_schemas():
    jobs = load("vcjobs.json")
    assert jobs["kind"] == "JobList" and len(jobs["items"]) == 7
    for job in jobs["items"]:
        name = job["metadata"]["name"]
        assert volcano.schema_errors(job) == [], name  # status included, unknown fields refused
        assert volcano.typed_errors(job["metadata"], "V1ObjectMeta") == [], name
        assert volcano.rule_errors(job) == [], name
    assert volcano.validate_podgroup(load("podgroup-portal-7-1.json")) == []


# ---------------------------------------------------------------------------------------
# observe
# ---------------------------------------------------------------------------------------
def test_observe_makes_four_list_calls(recorded):
    backend, pool = backend_on(recorded)
    backend.observe()
    assert calls_of(pool) == observe_calls()
    assert all(c.body is None for c in pool.calls)


def test_observe_parses_nodes(recorded):
    backend, _ = backend_on(recorded)
    obs = backend.observe()
    assert obs.now == NOW
    nodes = {n.name: n for n in obs.nodes}
    assert sorted(nodes) == ["gpu-a", "gpu-b", "gpu-c", "gpu-d"], "cp-1 has no GPUs"
    a, b, c, d = (nodes[k] for k in ("gpu-a", "gpu-b", "gpu-c", "gpu-d"))
    assert (a.rack, a.block, a.gpu_model, a.gpu_memory_gb, a.gpus_total) == (
        "r1",
        "b1",
        "H100",
        80,
        8,
    )
    assert a.rdma and not a.inference and a.health == "ok" and not a.cordoned
    # gpu-a: portal-7-1 holds 0-3, pending portal-12-1 holds 4-5 (no pods yet), and the
    # foreign Volcano job team-x-sweep 1 GPU: the highest index the portal does not hold.
    assert a.free_gpus == (6,)
    # gpu-b: portal-7-1 holds 0-3; portal-8-2 (terminating after a stop) still holds 4-5.
    assert b.free_gpus == (6, 7)
    # gpu-c: cordoned by the portal; one GPU unhealthy (allocatable 7 of 8).
    assert c.cordoned and c.health == "gpu_failure" and "1 of 8 GPUs" in c.health_detail
    assert c.free_gpus == (0, 1, 2, 3, 4, 5, 6)
    # gpu-d: kubelet stopped reporting; an inference pod holds 2 GPUs (its init
    # container only 1); no RDMA; serves inference.
    assert d.health == "down" and "Kubelet stopped posting node status" in d.health_detail
    assert d.free_gpus == (0, 1, 2, 3, 4, 5) and d.inference and not d.rdma
    assert all(n.residual_gpus == () for n in obs.nodes)
    assert obs.inference_pressure == {}


def test_observe_parses_runs(recorded):
    backend, _ = backend_on(recorded)
    obs = backend.observe()
    jobs = {j.ref: j for j in obs.jobs}
    assert sorted(jobs) == ["portal-10-1", "portal-11-1", "portal-12-1", "portal-7-1",
                            "portal-8-2", "portal-9-1", "team-x-sweep"]  # fmt: skip
    # A 2-node gang running for 4000 s from 1800 s of progress; checkpoints every 1800 s.
    assert jobs["portal-7-1"] == ObservedJob(
        ref="portal-7-1", job_id=7, state=RUNNING,
        placement=(Slot("gpu-a", (0, 1, 2, 3)), Slot("gpu-b", (0, 1, 2, 3))),
        progress_s=1800.0 + 4000.0, last_checkpoint_at=NOW - 4000 + 2 * 1800,
    )  # fmt: skip
    # Asked to checkpoint 60 s ago (deadline in 240 s): stopping.
    j8 = jobs["portal-8-2"]
    assert (j8.job_id, j8.state, j8.placement) == (8, STOPPING, (Slot("gpu-b", (4, 5)),))
    assert j8.progress_s == 600.0 + 1200.0
    # Its pods were gone 25 s after the request, before the deadline: a checkpoint.
    j9 = jobs["portal-9-1"]
    assert (j9.state, j9.end_reason, j9.progress_s) == (STOPPED, "checkpoint", 7100.0)
    assert j9.last_checkpoint_at == NOW - 100
    # Finished on its own after 2600 s (checkpoint interval 600 s: last at 2400 s).
    j10 = jobs["portal-10-1"]
    assert (j10.state, j10.progress_s, j10.last_checkpoint_at) == (
        SUCCEEDED, 2600.0, NOW - 3000 + 2400)  # fmt: skip
    assert j10.ended_at == NOW - 3000 + 2600, "its Completed transition: the job's Finished"
    assert j9.ended_at == NOW - 100 and jobs["portal-8-2"].ended_at is None
    # A rank failed; Volcano terminated the gang; the reason names the failed pod.
    j11 = jobs["portal-11-1"]
    assert j11.state == FAILED
    assert j11.end_reason == "pod portal-11-1-node1-0 on gpu-d failed: exit code 1 (Error)"
    # Launched 30 s ago; not admitted yet: it is starting, its GPUs held.
    j12 = jobs["portal-12-1"]
    assert (j12.state, j12.placement, j12.progress_s) == (RUNNING, (Slot("gpu-a", (4, 5)),), 0.0)
    # Work started outside the portal: no job id; the GPU it holds, as the portal counts it.
    assert jobs["team-x-sweep"] == ObservedJob(
        ref="team-x-sweep", job_id=None, state=RUNNING, placement=(Slot("gpu-a", (7,)),)
    )


def test_observe_narrows_nodes_by_label_selector(recorded):
    backend, pool = backend_on(recorded, node_selector="topology.kubernetes.io/rack=r1")
    obs = backend.observe()
    assert pool.calls[0].query == {"labelSelector": "topology.kubernetes.io/rack=r1"}
    assert [n.name for n in obs.nodes] == ["gpu-a", "gpu-b"]


def test_stop_deadline_passed_reads_running_so_the_loop_kills(recorded):
    backend, _ = backend_on(recorded, clock=lambda: NOW + 241)
    assert {j.ref: j.state for j in backend.observe().jobs}["portal-8-2"] == RUNNING


def test_a_stop_whose_grace_ran_out_is_stopped_without_checkpoint(recorded):
    job = recorded.job("portal-9-1")
    job["metadata"]["annotations"][volcano.ANN_STOP_DEADLINE] = f"{NOW - 110:.3f}"
    backend, _ = backend_on(recorded)
    j9 = {j.ref: j for j in backend.observe().jobs}["portal-9-1"]
    assert j9.state == STOPPED and "grace period ran out" in j9.end_reason
    assert j9.progress_s == 3 * 1800.0 and j9.last_checkpoint_at == NOW - 7200 + 3 * 1800


def test_a_killed_run_is_stopping_then_stopped(recorded):
    recorded.job("portal-7-1")["metadata"]["annotations"][volcano.ANN_KILLED_AT] = f"{NOW - 1:.3f}"
    recorded.job("portal-11-1")["metadata"]["annotations"][volcano.ANN_KILLED_AT] = (
        f"{NOW - 999:.3f}"
    )
    backend, _ = backend_on(recorded)
    jobs = {j.ref: j for j in backend.observe().jobs}
    assert jobs["portal-7-1"].state == STOPPING
    assert (jobs["portal-11-1"].state, jobs["portal-11-1"].end_reason) == (STOPPED, "killed")


def test_an_ended_run_still_holding_pods_keeps_its_gpus(recorded):
    # Terminated is reported once the pods are gone; a pod still bound keeps its claim.
    recorded.job("portal-7-1")["status"]["state"]["phase"] = "Failed"
    backend, _ = backend_on(recorded)
    nodes = {n.name: n for n in backend.observe().nodes}
    assert nodes["gpu-b"].free_gpus == (6, 7)


def test_a_node_without_the_rdma_resource_or_override_label(recorded):
    node = recorded.nodes["items"][1]  # gpu-a
    node["metadata"]["labels"]["gpu-portal.io/rdma"] = "false"
    node["status"]["allocatable"]["rdma/hca"] = "900"
    backend, _ = backend_on(recorded)
    a = next(n for n in backend.observe().nodes if n.name == "gpu-a")
    assert not a.rdma
    assert a.health == "rdma_degraded" and "900 of 1000" in a.health_detail


def test_gpu_helpers():
    assert normalize_gpu_model("NVIDIA-H100-80GB-HBM3") == "H100"
    assert normalize_gpu_model("NVIDIA-A100-SXM4-40GB") == "A100"
    assert normalize_gpu_model("Tesla-V100-SXM2-16GB") == "V100"
    assert normalize_gpu_model("Quadro-RTX-8000") == "Quadro-RTX-8000"
    assert normalize_gpu_model(None) is None
    infer = next(
        p for p in load("pods-live.json")["items"] if p["metadata"]["namespace"] == "inference"
    )
    assert pod_gpus(infer) == 2


# ---------------------------------------------------------------------------------------
# launch
# ---------------------------------------------------------------------------------------
def request(job_id: int, placement, *, attempt: int = 1, exclusive: bool = False):
    """A launch named and checkpointed as the portal names a job's (placement: node, GPUs)."""
    return launch_request(
        job_id, [Slot(n, tuple(g)) for n, g in placement], attempt=attempt, exclusive=exclusive,
        name=f"train-{job_id}", checkpoint_interval_s=1800.0,
        checkpoint_path=f"/checkpoints/job-{job_id}", duration_s=None,
    )  # fmt: skip


def test_launch_creates_one_volcano_job_with_strict_field_validation(recorded):
    backend, pool = backend_on(recorded)
    backend.observe()
    pool.calls.clear()
    req = request(21, [("gpu-b", (6, 7))])
    backend.launch(req)
    assert calls_of(pool) == [("POST", JOBS_PATH, {"fieldValidation": "Strict"})]
    sent = pool.calls[0]
    assert sent.content_type == JSON
    assert sent.body == volcano.build_job(req, backend.job_settings)
    assert volcano.validate_job(sent.body) == []
    assert sent.body["metadata"]["namespace"] == NS and sent.body["spec"]["queue"] == "portal"
    # The same run again (a cycle that lost its commit): nothing more is sent.
    backend.launch(req)
    assert len(pool.calls) == 1
    # And the view this cycle keeps counts its GPUs as taken.
    with pytest.raises(PermanentBackendError, match="in use"):
        backend.launch(request(22, [("gpu-b", (7,))]))
    assert len(pool.calls) == 1


def test_launch_without_an_observation_reads_the_cluster_first(recorded):
    backend, pool = backend_on(recorded)
    backend.launch(request(21, [("gpu-a", (6,))]))
    assert calls_of(pool)[:4] == observe_calls()
    assert calls_of(pool)[4:] == [("POST", JOBS_PATH, {"fieldValidation": "Strict"})]


def test_launch_of_a_multi_node_exclusive_run(recorded):
    recorded.live["items"] = [
        p for p in recorded.live["items"] if "portal-7-1" not in p["metadata"]["name"]
    ]
    recorded.job("portal-7-1")["status"]["state"]["phase"] = "Terminated"
    recorded.job("portal-8-2")["status"]["state"]["phase"] = "Terminated"
    recorded.live["items"] = [
        p for p in recorded.live["items"] if "portal-8-2" not in p["metadata"]["name"]
    ]
    backend, pool = backend_on(recorded)
    backend.observe()
    pool.calls.clear()
    req = request(23, [("gpu-b", (0, 1, 2, 3)), ("gpu-c", (0, 1, 2, 3))], exclusive=True)
    with pytest.raises(PermanentBackendError, match="gpu-c is cordoned"):
        backend.launch(req)
    backend.uncordon("gpu-c")
    recorded.nodes["items"][3]["spec"].pop("unschedulable")
    with pytest.raises(PermanentBackendError, match="gpu-c is not empty"):
        backend.launch(req)  # one GPU of gpu-c is unhealthy: it is never wholly free
    recorded.nodes["items"][3]["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    backend.observe()
    pool.calls.clear()
    backend.launch(req)
    body = pool.calls[-1].body
    limits = [
        t["template"]["spec"]["containers"][0]["resources"]["limits"] for t in body["spec"]["tasks"]
    ]
    assert limits == [{"nvidia.com/gpu": "8", "rdma/hca": "1"}] * 2, "every GPU of both nodes"
    assert body["metadata"]["annotations"][volcano.ANN_EXCLUSIVE] == "true"
    assert (
        volcano.decode_placement(body["metadata"]["annotations"][volcano.ANN_PLACEMENT])
        == req.placement
    )


@pytest.mark.parametrize(
    "placement, words",
    [([("gpu-z", (0,))], "unknown node gpu-z"), ([("cp-1", (0,))], "unknown node cp-1"),
     ([("gpu-a", (0, 1))], "in use"), ([("gpu-a", (8,))], "bad GPU indices"),
     ([("gpu-b", (6,)), ("gpu-b", (7,))], "listed twice"), ([("gpu-c", (0,))], "cordoned")],
)  # fmt: skip
def test_launch_refusals_are_permanent_and_send_nothing(recorded, placement, words):
    backend, pool = backend_on(recorded)
    backend.observe()
    pool.calls.clear()
    with pytest.raises(PermanentBackendError, match=words):
        backend.launch(request(30, placement))
    assert pool.calls == []


def test_launch_with_a_ref_of_another_job_is_refused(recorded):
    backend, pool = backend_on(recorded)
    backend.observe()
    bad = replace(request(5, [("gpu-a", (6,))]), job_id=6)  # portal-5-1 is not job 6's
    with pytest.raises(PermanentBackendError) as err:
        backend.launch(bad)
    assert err.value.code == "bad_ref"


def test_launch_conflict_of_the_same_live_run_is_idempotent(recorded):
    backend, pool = backend_on(recorded)
    backend.observe()
    pool.calls.clear()
    # A run the portal launched but whose commit was lost, created by someone else's
    # cycle meanwhile: the API says 409 and the Job there is this very run.
    req = request(24, [("gpu-a", (6,))])
    twin = volcano.build_job(req, backend.job_settings)
    twin["status"] = {"state": {"phase": "Running"}}
    recorded.jobs["items"].append(twin)
    backend._view.runs.pop("portal-24-1", None)
    recorded.on("POST", JOBS_PATH, (409, load("status-409-job.json")))
    backend.launch(req)
    assert calls_of(pool) == [
        ("POST", JOBS_PATH, {"fieldValidation": "Strict"}),
        ("GET", f"{JOBS_PATH}/portal-24-1", {}),
    ]


def test_launch_conflict_with_an_ended_run_of_that_name_removes_it(recorded):
    backend, pool = backend_on(recorded)
    backend.observe()
    pool.calls.clear()
    req = request(10, [("gpu-a", (6,))])  # portal-10-1 exists and Completed
    backend._view.runs.pop("portal-10-1")
    recorded.on("POST", JOBS_PATH, (409, load("status-409-job.json")))
    with pytest.raises(TransientBackendError) as err:
        backend.launch(req)
    assert err.value.code == "stale_run"
    assert calls_of(pool) == [
        ("POST", JOBS_PATH, {"fieldValidation": "Strict"}),
        ("GET", f"{JOBS_PATH}/portal-10-1", {}),
        ("DELETE", f"{JOBS_PATH}/portal-10-1", {"propagationPolicy": "Background"}),
    ]


def test_launch_conflict_with_a_different_live_run_is_permanent(recorded):
    backend, pool = backend_on(recorded)
    backend.observe()
    backend._view.runs.pop("portal-7-1")
    recorded.on("POST", JOBS_PATH, (409, load("status-409-job.json")))
    with pytest.raises(PermanentBackendError) as err:
        backend.launch(request(7, [("gpu-a", (6,))]))
    assert err.value.code == "duplicate_job"


@pytest.mark.parametrize(
    "answer, cls, code",
    [((422, "status-422-job.json"), PermanentBackendError, "k8s_refused"),
     ((400, "status-400-webhook.json"), PermanentBackendError, "k8s_refused"),
     ((403, "status-403.json"), PermanentBackendError, "forbidden"),
     ((500, "status-500.json"), TransientBackendError, "k8s_500"),
     ((503, "status-503.json"), TransientBackendError, "k8s_503"),
     ((429, "status-429.json"), TransientBackendError, "k8s_429")],
)  # fmt: skip
def test_launch_errors_map_to_transient_or_permanent(recorded, answer, cls, code):
    backend, _ = backend_on(recorded)
    backend.observe()
    status, name = answer
    recorded.on("POST", JOBS_PATH, (status, load(name)))
    with pytest.raises(cls) as err:
        backend.launch(request(25, [("gpu-a", (6,))]))
    assert err.value.code == code and type(err.value) is cls
    assert load(name)["message"][:40] in str(err.value), "the API's own words are kept"


# ---------------------------------------------------------------------------------------
# checkpoint_and_stop, kill
# ---------------------------------------------------------------------------------------
def test_checkpoint_and_stop_annotates_then_deletes_pods_with_the_grace(recorded):
    backend, pool = backend_on(recorded)
    backend.checkpoint_and_stop("portal-7-1", 120.0)
    assert calls_of(pool) == [
        ("GET", f"{JOBS_PATH}/portal-7-1", {}),
        ("PATCH", f"{JOBS_PATH}/portal-7-1", {}),
        ("GET", PODS_PATH, {"labelSelector": "gpu-portal.io/run-ref=portal-7-1"}),
        ("DELETE", f"{PODS_PATH}/portal-7-1-node0-0", {"gracePeriodSeconds": "120"}),
        ("DELETE", f"{PODS_PATH}/portal-7-1-node1-0", {"gracePeriodSeconds": "120"}),
    ]
    patch = pool.calls[1]
    assert patch.content_type == MERGE_PATCH
    assert patch.body == {
        "metadata": {"annotations": {volcano.ANN_STOP_DEADLINE: f"{NOW + 120:.3f}"}}
    }
    assert all(c.body is None for c in pool.calls[3:]), "the grace goes as a query parameter"


def test_asking_again_keeps_the_first_deadline(recorded):
    # portal-8-2 was asked 60 s ago with 300 s: its deadline is NOW + 240.
    backend, pool = backend_on(recorded)
    backend.checkpoint_and_stop("portal-8-2", 300.0)
    assert calls_of(pool) == [
        ("GET", f"{JOBS_PATH}/portal-8-2", {}),
        ("GET", PODS_PATH, {"labelSelector": "gpu-portal.io/run-ref=portal-8-2"}),
        ("DELETE", f"{PODS_PATH}/portal-8-2-node0-0", {"gracePeriodSeconds": "240"}),
    ]


def test_stopping_a_run_without_pods_sends_a_volcano_terminate_command(recorded):
    backend, pool = backend_on(recorded)
    backend.checkpoint_and_stop("portal-12-1", 300.0)
    assert calls_of(pool) == [
        ("GET", f"{JOBS_PATH}/portal-12-1", {}),
        ("PATCH", f"{JOBS_PATH}/portal-12-1", {}),
        ("GET", PODS_PATH, {"labelSelector": "gpu-portal.io/run-ref=portal-12-1"}),
        ("POST", COMMANDS_PATH, {}),
    ]
    command = pool.calls[-1].body
    assert pool.calls[-1].content_type == JSON
    uid = recorded.job("portal-12-1")["metadata"]["uid"]
    assert command["action"] == "TerminateJob" and command["target"]["uid"] == uid
    assert command["metadata"]["generateName"] == "portal-12-1-terminatejob-"
    assert command["metadata"]["ownerReferences"][0]["name"] == "portal-12-1"
    assert volcano.validate_command(command) == []


def test_stopping_an_ended_run_does_nothing_and_an_unknown_one_is_refused(recorded):
    backend, pool = backend_on(recorded)
    backend.checkpoint_and_stop("portal-10-1", 60.0)
    assert calls_of(pool) == [("GET", f"{JOBS_PATH}/portal-10-1", {})]
    with pytest.raises(PermanentBackendError) as err:
        backend.checkpoint_and_stop("portal-99-1", 60.0)
    assert err.value.code == "unknown_job"
    with pytest.raises(PermanentBackendError):
        backend.checkpoint_and_stop("portal-7-1", math.inf)


def test_kill_deletes_pods_with_one_second(recorded):
    backend, pool = backend_on(recorded)
    backend.kill("portal-7-1")
    assert calls_of(pool) == [
        ("GET", f"{JOBS_PATH}/portal-7-1", {}),
        ("PATCH", f"{JOBS_PATH}/portal-7-1", {}),
        ("GET", PODS_PATH, {"labelSelector": "gpu-portal.io/run-ref=portal-7-1"}),
        ("DELETE", f"{PODS_PATH}/portal-7-1-node0-0", {"gracePeriodSeconds": "1"}),
        ("DELETE", f"{PODS_PATH}/portal-7-1-node1-0", {"gracePeriodSeconds": "1"}),
    ]
    assert pool.calls[1].body == {
        "metadata": {"annotations": {volcano.ANN_KILLED_AT: f"{NOW:.3f}"}}
    }


def test_kill_shortens_a_graceful_stop(recorded):
    backend, pool = backend_on(recorded)
    backend.kill("portal-8-2")
    assert ("DELETE", f"{PODS_PATH}/portal-8-2-node0-0", {"gracePeriodSeconds": "1"}) in calls_of(
        pool
    )


def test_kill_of_ended_or_unknown_runs_does_nothing(recorded):
    backend, pool = backend_on(recorded)
    backend.kill("portal-9-1")
    backend.kill("portal-99-1")
    assert calls_of(pool) == [("GET", f"{JOBS_PATH}/portal-9-1", {}),
                              ("GET", f"{JOBS_PATH}/portal-99-1", {})]  # fmt: skip


def test_a_pod_already_gone_is_fine(recorded):
    backend, pool = backend_on(recorded)
    recorded.on("DELETE", f"{PODS_PATH}/portal-7-1-node0-0",
                (404, status_body(404, "NotFound", 'pods "portal-7-1-node0-0" not found')))  # fmt: skip
    backend.kill("portal-7-1")
    assert calls_of(pool)[-1][1] == f"{PODS_PATH}/portal-7-1-node1-0"


# ---------------------------------------------------------------------------------------
# cordon, uncordon, clean_residual, close
# ---------------------------------------------------------------------------------------
def test_cordon_and_uncordon_patch_spec_unschedulable(recorded):
    backend, pool = backend_on(recorded)
    backend.cordon("gpu-a", "drain for maintenance")
    backend.uncordon("gpu-a")
    assert calls_of(pool) == [("PATCH", "/api/v1/nodes/gpu-a", {})] * 2
    cordon, uncordon = pool.calls
    assert cordon.content_type == uncordon.content_type == STRATEGIC_PATCH
    assert cordon.body == {
        "metadata": {"annotations": {volcano.ANN_CORDON_REASON: "drain for maintenance"}},
        "spec": {"unschedulable": True},
    }
    assert uncordon.body == {
        "metadata": {"annotations": {volcano.ANN_CORDON_REASON: None}},
        "spec": {"unschedulable": False},
    }
    for body in (cordon.body, uncordon.body):
        assert volcano.validate_node_patch(body) == []


def test_cordon_of_an_unknown_node_is_permanent(recorded):
    backend, _ = backend_on(recorded)
    with pytest.raises(PermanentBackendError) as err:
        backend.cordon("gpu-z", "x")
    assert err.value.code == "unknown_node"


def test_cordon_updates_this_cycles_view(recorded):
    backend, pool = backend_on(recorded)
    backend.observe()
    backend.cordon("gpu-b", "x")
    pool.calls.clear()
    with pytest.raises(PermanentBackendError, match="cordoned"):
        backend.launch(request(31, [("gpu-b", (6,))]))
    assert pool.calls == []


# -- output -----------------------------------------------------------------------------------


def test_read_output_reads_the_end_of_the_rank_0_pods_log(recorded):
    backend, pool = backend_on(recorded)
    log = recorded.logs["portal-7-1-node0-0"]
    out = backend.read_output("portal-7-1", 64)
    assert calls_of(pool) == [
        ("GET", PODS_PATH, {"labelSelector": "gpu-portal.io/run-ref=portal-7-1"}),
        ("GET", f"{PODS_PATH}/portal-7-1-node0-0/log",
         {"container": "trainer", "tailLines": "100", "limitBytes": str(4 << 20)}),
    ]  # fmt: skip
    assert out.data == log[-64:] and out.truncated
    assert out.source == "pod gpu-portal/portal-7-1-node0-0, container trainer"
    whole = backend.read_output("portal-7-1", 4096)
    assert whole.data == log and not whole.truncated


def test_read_output_asks_for_fewer_lines_when_the_byte_bound_cut_the_end(recorded, monkeypatch):
    monkeypatch.setattr("scheduling.backends.kubernetes.LOG_LIMIT_BYTES", 64)
    backend, pool = backend_on(recorded)
    out = backend.read_output("portal-7-1", 20)
    asked = [c.query["tailLines"] for c in pool.calls if c.path.endswith("/log")]
    assert asked == ["100", "12", "1"]  # answers that reach the 64-byte bound lost their end
    assert out.data == b"step 300 loss 1.88\n" and out.truncated


def test_read_output_of_a_run_without_pods_says_they_are_gone(recorded):
    backend, _ = backend_on(recorded)
    out = backend.read_output("portal-12-1", 1024)  # pending: its gang was never admitted
    assert isinstance(out, NoOutput) and "pods are gone" in out.reason


def test_read_output_of_a_container_not_started_says_so(recorded):
    backend, _ = backend_on(recorded)
    recorded.on("GET", f"{PODS_PATH}/portal-7-1-node0-0/log", (400, status_body(
        400, "BadRequest", 'container "trainer" in pod "portal-7-1-node0-0" is waiting to '
        "start: ContainerCreating")))  # fmt: skip
    out = backend.read_output("portal-7-1", 1024)
    assert isinstance(out, NoOutput) and "ContainerCreating" in out.reason


def test_read_output_when_the_api_server_is_down_is_transient(recorded):
    backend, _ = backend_on(recorded)
    recorded.on("GET", f"{PODS_PATH}/portal-7-1-node0-0/log", (503, load("status-503.json")))
    with pytest.raises(TransientBackendError):
        backend.read_output("portal-7-1", 1024)


def test_clean_residual_and_close(recorded):
    backend, pool = backend_on(recorded)
    assert backend.clean_residual("gpu-a") == 0
    assert pool.calls == []
    backend.observe()
    backend.close()
    assert backend._view is None


def test_the_backend_has_the_interface():
    backend, _ = backend_on(Recorded())
    assert isinstance(backend, ClusterBackend) and backend.name == "kubernetes"


# ---------------------------------------------------------------------------------------
# Error mapping
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "status, cls, code",
    [(0, TransientBackendError, "k8s_unavailable"), (408, TransientBackendError, "k8s_408"),
     (409, TransientBackendError, "conflict"), (429, TransientBackendError, "k8s_429"),
     (500, TransientBackendError, "k8s_500"), (502, TransientBackendError, "k8s_502"),
     (504, TransientBackendError, "k8s_504"), (400, PermanentBackendError, "k8s_refused"),
     (401, PermanentBackendError, "forbidden"), (403, PermanentBackendError, "forbidden"),
     (404, PermanentBackendError, "not_found"), (410, PermanentBackendError, "k8s_refused"),
     (422, PermanentBackendError, "k8s_refused")],
)  # fmt: skip
def test_api_exceptions_map_by_status(status, cls, code):
    from kubernetes.client.exceptions import ApiException

    err = ApiException(status=status, reason="r")
    err.body = json.dumps(status_body(status, "R", f"message {status}"))
    mapped = map_api_exception(err, "do it")
    assert type(mapped) is cls and mapped.code == code
    assert f"message {status}" in str(mapped) and str(mapped).startswith("do it:")


@pytest.mark.parametrize(
    "error",
    [MaxRetryError(None, "/api/v1/nodes", NewConnectionError(None, "Connection refused")),
     ReadTimeoutError(None, "/api/v1/nodes", "Read timed out."),
     ConnectionResetError(104, "Connection reset by peer")],
)  # fmt: skip
def test_connection_errors_are_transient(error):
    backend, _ = backend_on(lambda call: error)
    with pytest.raises(TransientBackendError) as err:
        backend.observe()
    assert err.value.code == "k8s_unavailable"


def test_an_unreadable_answer_is_transient():
    class Garbage(WireResponse):
        def __init__(self):
            super().__init__(200, None)
            self.data = b"<html>proxy error</html>"

    backend, pool = backend_on(lambda call: (200, None))
    pool.request = lambda *a, **k: Garbage()
    with pytest.raises(TransientBackendError) as err:
        backend.observe()
    assert err.value.code == "bad_response"


def test_forbidden_lists_say_to_check_rbac(recorded):
    recorded.on("GET", "/api/v1/nodes", (403, load("status-403.json")))
    backend, _ = backend_on(recorded)
    with pytest.raises(PermanentBackendError, match="RBAC"):
        backend.observe()


# ---------------------------------------------------------------------------------------
# Credentials and settings
# ---------------------------------------------------------------------------------------
def test_credentials_come_from_a_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        "clusters:\n- name: lab\n  cluster:\n    server: https://10.1.2.3:6443\n"
        "    insecure-skip-tls-verify: true\n"
        "users:\n- name: portal\n  user:\n    token: abc123\n"
        "contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: portal\n"
        "    namespace: gpu-portal\n"
    )
    api = load_api_client(str(config))
    assert api.configuration.host == "https://10.1.2.3:6443"
    assert "Bearer abc123" in api.configuration.api_key.values()
    backend = KubernetesBackend(kubeconfig=str(config), namespace="gpu-portal", grace_s=60)
    assert backend.job_settings.grace_s == 60 and backend.job_settings.namespace == "gpu-portal"
    backend.close()


def test_missing_credentials_are_a_permanent_error(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(PermanentBackendError) as err:
        load_api_client(str(tmp_path / "nope"))
    assert err.value.code == "bad_config"


def test_settings_from_the_environment(monkeypatch, recorded):
    monkeypatch.setenv("KUBERNETES_VOLCANO_QUEUE", "training")
    monkeypatch.setenv("KUBERNETES_JOB_IMAGE", "registry.example/trainer:7")
    monkeypatch.setenv("KUBERNETES_JOB_COMMAND", "python -m train --resume")
    monkeypatch.setenv("KUBERNETES_RDMA_RESOURCE", "")
    monkeypatch.setenv("KUBERNETES_RACK_LABEL", "example.com/rack")
    backend, _ = backend_on(recorded, queue=None)
    s = backend.job_settings
    assert (s.queue, s.image, s.command) == ("training", "registry.example/trainer:7",
                                             ("python", "-m", "train", "--resume"))  # fmt: skip
    assert s.rdma_resource is None and backend.labels.rack == "example.com/rack"
    nodes = {n.name: n for n in backend.observe().nodes}
    assert nodes["gpu-a"].rack == "default", "the configured label is absent on the nodes"


# ---------------------------------------------------------------------------------------
# The shared contract suite, on an emulated cluster
# ---------------------------------------------------------------------------------------
def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """JSON merge patch (RFC 7386); also right for the strategic-merge patches sent here."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _quantity(value: Any) -> int:
    text = str(value)
    return int(text[:-1]) * 1000 if text.endswith("k") else int(text)


class Cluster:
    """An emulated API server + Volcano job controller + kubelets (see the module docstring).

    Virtual time: ``now`` moves only by ``advance``. The emulated trainer checkpoints
    and exits ``CHECKPOINT_S`` after SIGTERM (or is killed at the end of its grace),
    and finishes on its own after ``PORTAL_REMAINING_S`` if that is set.
    """

    CHECKPOINT_S = 3.0

    def __init__(self, names=("gpu-a", "gpu-b", "gpu-c", "gpu-d"), start: float = NOW) -> None:
        self.now = start
        template = next(n for n in load("nodes.json")["items"] if n["metadata"]["name"] == "gpu-a")
        self.nodes: dict[str, dict[str, Any]] = {}
        for i, name in enumerate(names):
            node = copy.deepcopy(template)
            node["metadata"]["name"] = name
            node["metadata"]["uid"] = str(uuid.uuid4())
            node["metadata"]["labels"]["kubernetes.io/hostname"] = name
            node["metadata"]["labels"]["topology.kubernetes.io/rack"] = f"r{i // 2 + 1}"
            self.nodes[name] = node
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.gone: dict[str, float] = {}  # job -> when its last pod went away

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.sync()

    # -- the controllers ------------------------------------------------------------
    def _transition(self, job: dict[str, Any], phase: str, at: float) -> None:
        st = job["status"]
        st["state"] = {"phase": phase, "lastTransitionTime": iso(at)}
        st.setdefault("conditions", []).append({"status": phase, "lastTransitionTime": iso(at)})

    def _pods_of(self, name: str) -> list[dict[str, Any]]:
        return [p for p in self.pods.values()
                if p["metadata"]["labels"].get("volcano.sh/job-name") == name]  # fmt: skip

    def _used(self, node: str) -> dict[str, int]:
        used: dict[str, int] = {}
        for p in self.pods.values():
            if p["spec"]["nodeName"] == node and p["status"]["phase"] in ("Pending", "Running"):
                for res, qty in p["spec"]["containers"][0]["resources"]["limits"].items():
                    used[res] = used.get(res, 0) + _quantity(qty)
        return used

    def _delete_pod(self, pod: dict[str, Any], grace: float) -> None:
        meta = pod["metadata"]
        deadline = self.now + grace
        if "deletionTimestamp" in meta:
            deadline = min(deadline, pod["_deadline"])
            exits = min(pod["_exits"], deadline)
        else:
            exits = min(deadline, self.now + self.CHECKPOINT_S)
        meta["deletionTimestamp"] = iso(deadline)
        meta["deletionGracePeriodSeconds"] = int(grace)
        pod["_deadline"], pod["_exits"] = deadline, exits

    def _create_pods(self, job: dict[str, Any]) -> bool:
        wanted = []
        for task in job["spec"]["tasks"]:
            tmpl = task["template"]
            term = tmpl["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
            node = term["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
            wanted.append((task, node))
        for task, node_name in wanted:  # the gang: all pods fit, or none is created
            node = self.nodes.get(node_name)
            if node is None or node["spec"].get("unschedulable"):
                return False
            used = self._used(node_name)
            for res, qty in task["template"]["spec"]["containers"][0]["resources"][
                "limits"
            ].items():
                have = _quantity(node["status"]["allocatable"].get(res, "0"))
                if used.get(res, 0) + _quantity(qty) > have:
                    return False
        for task, node_name in wanted:
            tmpl = copy.deepcopy(task["template"])
            name = f"{job['metadata']['name']}-{task['name']}-0"
            labels = {**tmpl["metadata"].get("labels", {}),
                      "volcano.sh/job-name": job["metadata"]["name"]}  # fmt: skip
            env = {e["name"]: e.get("value") for e in tmpl["spec"]["containers"][0]["env"]}
            remaining = float(env["PORTAL_REMAINING_S"]) if env.get("PORTAL_REMAINING_S") else None
            self.pods[name] = {
                "metadata": {"name": name, "namespace": NS, "uid": str(uuid.uuid4()),
                             "labels": labels, "annotations": tmpl["metadata"].get("annotations", {}),
                             "creationTimestamp": iso(self.now)},
                "spec": {**tmpl["spec"], "nodeName": node_name},
                "status": {"phase": "Running", "startTime": iso(self.now)},
                "_ends": self.now + remaining if remaining else None,
            }  # fmt: skip
        return True

    def sync(self) -> None:
        for name, pod in list(self.pods.items()):
            if "_exits" in pod and self.now >= pod["_exits"]:
                job = pod["metadata"]["labels"]["volcano.sh/job-name"]
                self.gone[job] = max(self.gone.get(job, 0.0), pod["_exits"])
                del self.pods[name]
            elif (
                pod.get("_ends") is not None
                and self.now >= pod["_ends"]
                and pod["status"]["phase"] == "Running"
            ):
                pod["status"]["phase"] = "Succeeded"
                pod["_ended"] = pod["_ends"]
        for name, job in self.jobs.items():
            phase = job["status"]["state"]["phase"]
            pods = self._pods_of(name)
            if phase == "Pending" and self._create_pods(job):
                self._transition(job, "Running", self.now)
            elif phase == "Running":
                if any("deletionTimestamp" in p["metadata"] or p["status"]["phase"] == "Failed" for p in pods) \
                        or len(pods) < len(job["spec"]["tasks"]):  # fmt: skip
                    self._terminate(job)  # PodEvicted / PodFailed -> TerminateJob
                elif pods and all(p["status"]["phase"] == "Succeeded" for p in pods):
                    self._transition(job, "Completed", max(p["_ended"] for p in pods))
            if job["status"]["state"]["phase"] == "Terminating" and not [
                p for p in self._pods_of(name) if p["status"]["phase"] in ("Pending", "Running")
            ]:
                self._transition(job, "Terminated", self.gone.get(name, self.now))

    def _terminate(self, job: dict[str, Any]) -> None:
        for pod in self._pods_of(job["metadata"]["name"]):
            if "deletionTimestamp" not in pod["metadata"] and pod["status"]["phase"] == "Running":
                self._delete_pod(pod, pod["spec"]["terminationGracePeriodSeconds"])
        self._transition(job, "Terminating", self.now)

    # -- the API server ---------------------------------------------------------------
    def public(self, obj: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if not k.startswith("_")}

    def __call__(self, call: Call) -> Any:
        self.sync()
        out = self._handle(call)
        self.sync()
        return out

    def _handle(self, call: Call) -> Any:
        m, p, q = call.method, call.path, call.query
        if m == "GET" and p == "/api/v1/nodes":
            return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                         "items": list(self.nodes.values())}  # fmt: skip
        if m == "PATCH" and p.startswith("/api/v1/nodes/"):
            node = self.nodes.get(p.rsplit("/", 1)[1])
            if node is None:
                return 404, status_body(404, "NotFound", "node not found")
            assert call.content_type == STRATEGIC_PATCH
            merge(node, call.body)
            return 200, node
        if m == "GET" and p == "/api/v1/pods":
            assert q == {"fieldSelector": LIVE_POD_SELECTOR}
            items = [
                self.public(x)
                for x in self.pods.values()
                if x["status"]["phase"] in ("Pending", "Running")
            ]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        if m == "GET" and p == PODS_PATH:
            items = [
                self.public(x) for x in self.pods.values() if selected(x, q.get("labelSelector"))
            ]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        if m == "GET" and p.startswith(PODS_PATH + "/") and p.endswith("/log"):
            pod = self.pods.get(p.split("/")[-2])
            text = (
                None if pod is None else f"ready: {p.split('/')[-2]} on {pod['spec']['nodeName']}\n"
            )
            return log_answer(None if text is None else text.encode(), q)
        if m == "DELETE" and p.startswith(PODS_PATH + "/"):
            pod = self.pods.get(p.rsplit("/", 1)[1])
            if pod is None:
                return 404, status_body(404, "NotFound", "pod not found")
            self._delete_pod(
                pod,
                float(q.get("gracePeriodSeconds", pod["spec"]["terminationGracePeriodSeconds"])),
            )
            return 200, self.public(pod)
        if m == "GET" and p == JOBS_PATH:
            return 200, {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "JobList",
                         "metadata": {}, "items": list(self.jobs.values())}  # fmt: skip
        if m == "POST" and p == JOBS_PATH:
            assert call.content_type == JSON
            name = call.body["metadata"]["name"]
            if name in self.jobs:
                return 409, load("status-409-job.json")
            errors = volcano.schema_errors(
                call.body
            )  # the CRD's validation, fieldValidation=Strict
            if errors or q.get("fieldValidation") != "Strict":
                return 422, status_body(422, "Invalid", "; ".join(errors))
            job = copy.deepcopy(call.body)
            job["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=iso(self.now))
            job["status"] = {"state": {"phase": "Pending", "lastTransitionTime": iso(self.now)},
                             "conditions": [{"status": "Pending", "lastTransitionTime": iso(self.now)}]}  # fmt: skip
            self.jobs[name] = job
            return 201, job
        if p.startswith(JOBS_PATH + "/"):
            name = p.rsplit("/", 1)[1]
            job = self.jobs.get(name)
            if job is None:
                return 404, status_body(
                    404, "NotFound", f'jobs.batch.volcano.sh "{name}" not found'
                )
            if m == "GET":
                return 200, job
            if m == "PATCH":
                assert call.content_type == MERGE_PATCH
                merge(job, call.body)
                return 200, job
            if m == "DELETE":
                del self.jobs[name]
                return 200, job
        if m == "POST" and p == COMMANDS_PATH:
            job = self.jobs.get(call.body["target"]["name"])
            if job is not None and call.body["action"] == "TerminateJob":
                self._terminate(job)
            return 201, call.body
        return 404, status_body(404, "NotFound", f"{m} {p}")


@pytest.fixture
def harness() -> Harness:
    cluster = Cluster()
    backend, _ = backend_on(cluster, clock=lambda: cluster.now, grace_s=20)

    return Harness(
        backend=backend,
        nodes=tuple(cluster.nodes),
        settle=polling_settle(
            backend, clock=lambda: cluster.now, wait=lambda: cluster.advance(1.0), unit="virtual s"
        ),
        grace_s=20.0,
        short_run_s=30.0,
    )


class TestKubernetesContractOnEmulatedVolcano(BackendContract):
    """Every promise of the backend interface, against the emulated cluster above."""


def test_the_emulated_cluster_reports_a_stop_like_the_recorded_one():
    """The emulator's Job after a graceful stop matches the recorded portal-9-1 in shape."""
    cluster = Cluster()
    backend, _ = backend_on(cluster, clock=lambda: cluster.now, grace_s=20)
    backend.launch(request(40, [("gpu-a", (0,))]))
    cluster.advance(10)
    backend.checkpoint_and_stop("portal-40-1", 20)
    cluster.advance(5)
    job = cluster.jobs["portal-40-1"]
    assert [c["status"] for c in job["status"]["conditions"]] == [
        c["status"] for c in load("vcjobs.json")["items"][2]["status"]["conditions"]
    ]
    assert volcano.schema_errors(job) == []


# ---------------------------------------------------------------------------------------
# The documented RBAC allows every call the backend makes
# ---------------------------------------------------------------------------------------
DOCS = Path(__file__).resolve().parents[2] / "docs" / "backend-kubernetes.md"


def documented_manifests() -> list[dict[str, Any]]:
    import re

    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def required_permission(call: Call) -> tuple[str, str, str, bool]:
    """(API group, resource, verb, namespaced) an API call needs."""
    parts = call.path.strip("/").split("/")
    if parts[0] == "api":  # /api/v1/[namespaces/<ns>/]<resource>[/<name>]
        group, rest = "", parts[2:]
    else:  # /apis/<group>/<version>/...
        group, rest = parts[1], parts[3:]
    namespaced = rest[0] == "namespaces"
    if namespaced:
        rest = rest[2:]
    resource, named = rest[0], len(rest) > 1
    if len(rest) > 2:  # a subresource: pods/log
        resource = f"{rest[0]}/{rest[2]}"
    verb = {"GET": "get" if named else "list", "POST": "create", "PATCH": "patch",
            "DELETE": "delete"}[call.method]  # fmt: skip
    return group, resource, verb, namespaced


def test_the_documented_rbac_allows_every_call(recorded):
    backend, pool = backend_on(recorded)
    backend.observe()
    backend.launch(request(50, [("gpu-b", (6,))]))
    backend.checkpoint_and_stop("portal-7-1", 60)
    backend.checkpoint_and_stop("portal-12-1", 60)  # no pods: a Volcano command
    backend.kill("portal-8-2")
    backend.cordon("gpu-a", "x")
    backend.uncordon("gpu-a")
    backend.read_output("portal-7-1", 1024)
    recorded.on("POST", JOBS_PATH, (409, load("status-409-job.json")))
    backend._view.runs.pop("portal-10-1")
    with pytest.raises(TransientBackendError):
        backend.launch(request(10, [("gpu-a", (6,))]))  # deletes a stale Job
    docs = {d["kind"]: d for d in documented_manifests()}
    assert volcano.typed_errors(docs["ClusterRole"], "V1ClusterRole") == []
    assert volcano.typed_errors(docs["Role"], "V1Role") == []
    cluster_wide = {(g, r, v) for rule in docs["ClusterRole"]["rules"] for g in rule["apiGroups"]
                    for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    in_namespace = {(g, r, v) for rule in docs["Role"]["rules"] for g in rule["apiGroups"]
                    for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    needed = {required_permission(c) for c in pool.calls}
    assert {("batch.volcano.sh", "jobs", "delete", True), ("bus.volcano.sh", "commands",
            "create", True), ("", "pods", "list", False), ("", "pods/log", "get", True)} <= needed  # fmt: skip
    for group, resource, verb, namespaced in needed:
        allowed = cluster_wide | (in_namespace if namespaced else set())
        assert (group, resource, verb) in allowed, (group, resource, verb)


def test_the_documented_manifests_validate():
    docs = documented_manifests()
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ClusterRole", "Role", "Queue", "Job"]
    for doc in docs:
        if doc["kind"] == "Queue":
            assert volcano.validate_queue(doc) == [] and doc == volcano.build_queue("portal")
        if doc["kind"] == "Job":  # abbreviated in the docs, but every field it shows is right
            assert volcano.schema_errors(doc) == []


# ---------------------------------------------------------------------------------------
# The scheduling loop on this backend (emulated cluster, real database)
# ---------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_scheduling_loop_drives_the_emulated_cluster(api, monkeypatch):
    """Submit, start, preempt gracefully (checkpoint, requeue), cancel: the loop's
    allocations and the cluster's Volcano Jobs agree at every step."""
    import time as _time

    from quotas.models import BusinessLine, Queue
    from scheduling.cycle import run as cycle_run
    from scheduling.cycle import run_cycle
    from scheduling.models import Allocation, Job, Node

    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    names = list(Node.objects.order_by("name").values_list("name", flat=True))
    cluster = Cluster(names=names, start=_time.time())
    monkeypatch.setattr(
        cycle_run, "get_backend",
        lambda wall_now=None: backend_on(cluster, clock=lambda: cluster.now, grace_s=60)[0],
    )  # fmt: skip
    me, lead = api("researcher"), api("lead")

    def submit(client, **body) -> int:
        payload = {"name": "job", "queue": "llm-experiment", "gpus": 8, **body}
        response = client.post("/api/v1/jobs/", payload, format="json")
        assert response.status_code == 201, response.data
        return response.data["id"]

    def agree() -> None:
        """Every running job's allocations are its Volcano Job's placement annotation."""
        for job in Job.objects.filter(state__in=["running", "preempting"]):
            held = sorted(Allocation.objects.filter(job=job).values_list("node__name", "gpu_index"))
            vc = cluster.jobs[job.backend_ref]
            placement = volcano.decode_placement(
                vc["metadata"]["annotations"][volcano.ANN_PLACEMENT]
            )
            assert held == sorted((s.node, g) for s in placement for g in s.gpus), job.backend_ref

    experiments = [submit(me, name=f"exp{i}") for i in range(len(names))]
    run_cycle()
    assert Job.objects.filter(state="running").count() == len(names)
    assert {j["status"]["state"]["phase"] for j in cluster.jobs.values()} == {"Running"}
    agree()
    cluster.advance(600)
    run_cycle()
    assert Job.objects.get(pk=experiments[0]).progress_seconds >= 599
    urgent = submit(lead, name="hotfix", queue="llm-urgent")
    run_cycle()
    victims = list(Job.objects.filter(state="preempting"))
    assert len(victims) == 1
    victim = victims[0]
    assert victim.backend_ref in cluster.jobs
    assert cluster.jobs[victim.backend_ref]["status"]["state"]["phase"] == "Terminating"
    assert Job.objects.get(pk=urgent).state == "pending"
    cluster.advance(10)  # the emulated trainer checkpoints in 3 s
    run_cycle()
    victim.refresh_from_db()
    assert victim.state == "pending" and victim.preemption_count == 1
    assert victim.progress_seconds >= 600, "the checkpoint kept the progress"
    assert Job.objects.get(pk=urgent).state == "running"
    agree()
    running = Job.objects.filter(state="running", pk__in=experiments).first()
    assert me.post(f"/api/v1/jobs/{running.pk}/cancel/").status_code == 200
    run_cycle()  # the loop kills the run: its pods get a 1 s grace
    assert cluster.jobs[running.backend_ref]["metadata"]["annotations"][volcano.ANN_KILLED_AT]
    cluster.advance(2)
    run_cycle()
    assert cluster.jobs[running.backend_ref]["status"]["state"]["phase"] == "Terminated"
    assert not Allocation.objects.filter(job=running).exists(), "its GPUs are free again"
    agree()
