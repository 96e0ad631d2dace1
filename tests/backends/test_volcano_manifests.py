"""Volcano manifests (scheduling/backends/volcano.py) against the vendored CRD schemas.

Every manifest the Kubernetes backend can send is validated three ways: Volcano's
published CRD ``openAPIV3Schema`` (``data/schemas/volcano``, unknown fields refused),
the official ``kubernetes`` client's typed models for the core objects inside it, and
the rules of Volcano's admission webhook. The broken manifests below show that each of
those checks can fail. No API server runs here: nothing is applied to a cluster.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import io
import os
import signal
import subprocess
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from scheduling.backends import volcano
from scheduling.backends.base import BACKSTOP_MARGIN_S, LaunchRequest
from scheduling.engine.types import Slot

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "data" / "schemas" / "volcano"
SHA256 = {  # as listed in data/schemas/volcano/README.md
    "batch.volcano.sh_jobs.yaml": "789680b2c6197fc99057dd46a1a6e266f371279305f64d5e88df1ffd94393361",
    "scheduling.volcano.sh_podgroups.yaml": "b8267a9d95be622fbd6200cad6cbaa7b4e68ea6394c486f2675e5473ae9b55f9",
    "scheduling.volcano.sh_queues.yaml": "6cc9f8815486d4f78081d697456941d5699ab692b27bbdbdcdeba03a69b40407",
}
SETTINGS = volcano.JobSettings(namespace="gpu-portal", queue="portal", grace_s=300)


def request(placement, *, job_id=42, attempt=3, exclusive=False, **kw) -> LaunchRequest:
    return LaunchRequest(
        ref=f"portal-{job_id}-{attempt}",
        job_id=job_id,
        name=kw.get("name", "llama-finetune"),
        placement=tuple(Slot(n, tuple(g)) for n, g in placement),
        progress_s=kw.get("progress_s", 5400.0),
        checkpoint_interval_s=kw.get("interval", 1800.0),
        checkpoint_path=kw.get("path", "/checkpoints/job-42"),
        exclusive_node=exclusive,
        sim_duration_s=kw.get("sim_duration_s"),
    )


def single() -> dict:
    return volcano.build_job(request([("gpu-a", (0, 1, 2, 3))]), SETTINGS)


def gang() -> dict:
    return volcano.build_job(
        request([("gpu-a", range(8)), ("gpu-b", range(8)), ("gpu-c", (0, 1, 2, 3))]), SETTINGS
    )


def pod_spec(job: dict, rank: int) -> dict:
    return job["spec"]["tasks"][rank]["template"]["spec"]


def env(job: dict, rank: int) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod_spec(job, rank)["containers"][0]["env"]}


def pinned_node(job: dict, rank: int) -> str:
    terms = pod_spec(job, rank)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) == 1 and len(terms[0]["matchFields"]) == 1
    field = terms[0]["matchFields"][0]
    assert (field["key"], field["operator"], len(field["values"])) == ("metadata.name", "In", 1)
    return field["values"][0]


# ---------------------------------------------------------------------------------------
# The vendored schemas
# ---------------------------------------------------------------------------------------
def test_the_vendored_schemas_are_the_published_ones():
    for name, digest in SHA256.items():
        assert hashlib.sha256((SCHEMAS / name).read_bytes()).hexdigest() == digest, name
    readme = (SCHEMAS / "README.md").read_text()
    assert "Apache" in readme and "volcano-sh/volcano" in readme
    assert all(d in readme for d in SHA256.values())
    assert (SCHEMAS / "LICENSE-Apache-2.0.txt").exists()


def test_the_schemas_are_read_from_the_repository():
    assert volcano.SCHEMA_DIR == SCHEMAS
    assert "shared" not in str(volcano.SCHEMA_DIR.relative_to(ROOT))
    for group, kind, version in [("batch.volcano.sh", "Job", "v1alpha1"),
                                 ("scheduling.volcano.sh", "PodGroup", "v1beta1"),
                                 ("scheduling.volcano.sh", "Queue", "v1beta1")]:  # fmt: skip
        schema = volcano.crd_schema(group, kind, version)
        assert schema["type"] == "object" and "spec" in schema["properties"]


# ---------------------------------------------------------------------------------------
# Valid manifests: single node, multi-node gang, exclusive, RDMA
# ---------------------------------------------------------------------------------------
def test_single_node_job():
    job = single()
    assert volcano.validate_job(job) == []
    assert (job["apiVersion"], job["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    meta, spec = job["metadata"], job["spec"]
    assert (meta["name"], meta["namespace"]) == ("portal-42-3", "gpu-portal")
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "gpu-portal",
        "gpu-portal.io/job-id": "42",
        "gpu-portal.io/run-ref": "portal-42-3",
    }
    assert volcano.decode_placement(meta["annotations"][volcano.ANN_PLACEMENT]) == (
        Slot("gpu-a", (0, 1, 2, 3)),
    )
    assert meta["annotations"][volcano.ANN_PROGRESS] == "5400"
    assert (spec["schedulerName"], spec["queue"], spec["minAvailable"]) == ("volcano", "portal", 1)
    assert "plugins" not in spec
    assert [t["name"] for t in spec["tasks"]] == ["node0"]
    task = spec["tasks"][0]
    assert (task["replicas"], task["minAvailable"]) == (1, 1)
    assert task["template"]["metadata"]["labels"]["gpu-portal.io/run-ref"] == "portal-42-3"
    assert task["template"]["metadata"]["annotations"] == {"volcano.sh/preemptable": "false"}
    ps = pod_spec(job, 0)
    assert pinned_node(job, 0) == "gpu-a" and "nodeName" not in ps
    assert (ps["restartPolicy"], ps["terminationGracePeriodSeconds"]) == ("Never", 300)
    container = ps["containers"][0]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "4"}}, "no RDMA on one node"
    assert "securityContext" not in container
    e = env(job, 0)
    assert e["PORTAL_CHECKPOINT_PATH"] == "/checkpoints/job-42"
    assert (e["PORTAL_RUN_REF"], e["PORTAL_PROGRESS_S"], e["PORTAL_GRACE_S"]) == (
        "portal-42-3", "5400", "300")  # fmt: skip
    assert (e["PORTAL_NODE_RANK"], e["PORTAL_NUM_NODES"], e["PORTAL_GPUS"]) == ("0", "1", "4")
    assert "PORTAL_MASTER_ADDR" not in e


def test_policies_leave_restarts_to_the_portal():
    spec = single()["spec"]
    assert spec["policies"] == [
        {"event": "PodEvicted", "action": "TerminateJob"},
        {"event": "PodFailed", "action": "TerminateJob"},
        {"event": "Unknown", "action": "TerminateJob"},
    ]
    actions = {p["action"] for p in spec["policies"]}
    assert not actions & {"RestartJob", "RestartTask"}
    assert all("policies" not in t for t in spec["tasks"])


def test_multi_node_gang_one_task_per_node():
    job = gang()
    assert volcano.validate_job(job) == []
    spec = job["spec"]
    assert spec["minAvailable"] == 3 == len(spec["tasks"]), "all pods or none"
    assert [t["name"] for t in spec["tasks"]] == ["node0", "node1", "node2"]
    assert all((t["replicas"], t["minAvailable"]) == (1, 1) for t in spec["tasks"])
    assert [pinned_node(job, r) for r in range(3)] == ["gpu-a", "gpu-b", "gpu-c"]
    limits = [pod_spec(job, r)["containers"][0]["resources"]["limits"] for r in range(3)]
    assert limits == [
        {"nvidia.com/gpu": "8", "rdma/hca": "1"},
        {"nvidia.com/gpu": "8", "rdma/hca": "1"},
        {"nvidia.com/gpu": "4", "rdma/hca": "1"},
    ], "each node its own GPU count, RDMA for every rank"
    for r in range(3):
        assert pod_spec(job, r)["containers"][0]["securityContext"] == {
            "capabilities": {"add": ["IPC_LOCK"]}
        }
        assert env(job, r)["PORTAL_NODE_RANK"] == str(r)
        assert env(job, r)["PORTAL_MASTER_ADDR"] == "portal-42-3-node0-0.portal-42-3"
    assert spec["plugins"] == {"svc": []}, "pods find each other by <pod>.<job>"
    assert volcano.pod_name("portal-42-3", 2) == "portal-42-3-node2-0"


def test_exclusive_job_asks_for_every_gpu_of_its_nodes():
    req = request([("gpu-a", (0, 1)), ("gpu-b", (0, 1))], exclusive=True)
    job = volcano.build_job(req, SETTINGS, {"gpu-a": 8, "gpu-b": 7})
    assert volcano.validate_job(job) == []
    assert [pod_spec(job, r)["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            for r in range(2)] == ["8", "7"]  # fmt: skip
    assert job["metadata"]["annotations"][volcano.ANN_EXCLUSIVE] == "true"
    assert volcano.decode_placement(job["metadata"]["annotations"][volcano.ANN_PLACEMENT]) == (
        req.placement
    ), "the portal's own indices are kept"
    with pytest.raises(volcano.ManifestError, match="GPU count of gpu-b"):
        volcano.build_job(req, SETTINGS, {"gpu-a": 8})


def test_rdma_resource_is_configurable_and_can_be_off():
    req = request([("gpu-a", range(8)), ("gpu-b", range(8))])
    ib = volcano.build_job(
        req, volcano.JobSettings(rdma_resource="nvidia.com/hostdev", rdma_per_pod=4)
    )
    assert volcano.validate_job(ib) == []
    assert pod_spec(ib, 1)["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "8", "nvidia.com/hostdev": "4"}  # fmt: skip
    off = volcano.build_job(req, volcano.JobSettings(rdma_resource=None))
    assert volcano.validate_job(off) == []
    assert pod_spec(off, 1)["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert "securityContext" not in pod_spec(off, 1)["containers"][0]


def test_optional_settings_validate_too():
    settings = volcano.JobSettings(
        namespace="ml", queue="training.gpu", image="registry.example/train:7",
        command=("python", "-m", "train"), image_pull_policy="Always", grace_s=600,
        ttl_after_finished_s=None, service_account="trainer", priority_class="batch-high",
        checkpoint_pvc="ckpt", checkpoint_mount="/ckpt", shared_memory=False,
    )  # fmt: skip
    job = volcano.build_job(request([("gpu-a", (0,))], sim_duration_s=6000.0), settings)
    assert volcano.validate_job(job) == []
    ps = pod_spec(job, 0)
    assert (
        ps["serviceAccountName"] == "trainer" and job["spec"]["priorityClassName"] == "batch-high"
    )
    assert ps["volumes"] == [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}}
    ]
    assert ps["containers"][0]["volumeMounts"] == [{"name": "checkpoints", "mountPath": "/ckpt"}]
    assert "ttlSecondsAfterFinished" not in job["spec"]
    assert env(job, 0)["PORTAL_REMAINING_S"] == "600"


def test_queue_manifest():
    queue = volcano.build_queue("portal", weight=4)
    assert volcano.validate_queue(queue) == []
    assert queue["spec"] == {"weight": 4, "reclaimable": False}
    assert volcano.validate_queue(volcano.build_queue("portal", weight=0)) == [
        "spec.weight: 0 is less than the minimum of 1"
    ]


def test_terminate_command_and_node_patches():
    command = volcano.build_terminate_command(
        {"metadata": {"name": "portal-42-3", "namespace": "gpu-portal", "uid": "9f1c"}}, "stop"
    )
    assert volcano.validate_command(command) == []
    assert command["target"] == command["metadata"]["ownerReferences"][0]
    broken = {**command, "actoin": "TerminateJob", "target": {"kind": "Job"}}
    errors = volcano.validate_command(broken)
    assert "actoin: not a field of Command" in errors
    assert any(e.startswith("target: V1OwnerReference.name") for e in errors)
    for patch in (volcano.node_patch(True, "maintenance"), volcano.node_patch(False)):
        assert volcano.validate_node_patch(patch) == []
    assert volcano.validate_node_patch({"spec": {"unschedulable": "yes"}}) != []
    assert volcano.validate_node_patch({"spec": {"unschedulabel": True}}) == [
        "node patch: V1Node.spec.unschedulabel: Extra inputs are not permitted"
    ]


# ---------------------------------------------------------------------------------------
# The validators can fail
# ---------------------------------------------------------------------------------------
def _set(path: str | tuple, value):
    """Set (or delete) the value at a dotted path (a tuple when keys contain dots)."""
    keys = path if isinstance(path, tuple) else tuple(path.split("."))
    keys = tuple(int(k) if isinstance(k, str) and k.isdigit() else k for k in keys)

    def mutate(job: dict) -> None:
        node = job
        for key in keys[:-1]:
            node = node[key]
        if value is _DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value

    return mutate


_DELETE = object()
T0 = "spec.tasks.0.template"


@pytest.mark.parametrize(
    "mutate, expected",
    [
        # the CRD schema
        (_set("spec.minAvaliable", 2), "spec: Additional properties are not allowed ('minAvaliable'"),
        (_set("spec.tasks.0.replicas", "1"), "spec.tasks[0].replicas: '1' is not of type 'integer'"),
        (_set("spec.tasks.0.replicas", -1), "spec.tasks[0].replicas: -1 is less than the minimum of 0"),
        (_set("spec.queue", "Portal"), "spec.queue: 'Portal' does not match"),
        (_set("spec.policies.0.event", "PodDeleted"), "spec.policies[0].event: 'PodDeleted' is not one of"),
        (_set("spec.tasks.0.name", "Node_0"), "spec.tasks[0].name: 'Node_0' does not match"),
        (_set("spec.tasks", []), "spec.tasks: [] should be non-empty"),
        (_set("apiVersion", "batch.volcano.sh/v1"), "not served by the vendored CRD"),
        (_set(("spec", "tasks", 0, "template", "spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"), "four"),
         "does not match '^(\\\\+|-)?"),
        # the typed models of the core objects (the schema catches some of these too)
        (_set(f"{T0}.spec.affinity.nodeAfinity", {}), "V1PodTemplateSpec.spec.affinity.nodeAfinity: Extra inputs are not permitted"),
        (_set(f"{T0}.spec.containers.0.name", _DELETE), "V1PodTemplateSpec.spec.containers[0].name: Field required"),
        (_set(f"{T0}.spec.terminationGracePeriodSeconds", "300"), "V1PodTemplateSpec.spec.terminationGracePeriodSeconds: Input should be a valid integer"),
        (_set(f"{T0}.spec.containers.0.env.0.valeu", "x"), "V1PodTemplateSpec.spec.containers[0].env[0].valeu: Extra inputs are not permitted"),
        (_set("metadata.labels", ["x"]), "V1ObjectMeta.labels: Input should be a valid dictionary"),
        # Volcano's admission webhook
        (_set("spec.minAvailable", 2), "spec.minAvailable: greater than the total replicas"),
        (_set("spec.tasks.0.minAvailable", 2), "spec.tasks[0].minAvailable: greater than replicas"),
        (_set("spec.policies.0.action", "RestartPod"), "spec.policies: invalid policy action 'RestartPod'"),
        (_set("spec.policies.1.event", "PodEvicted"), "spec.policies: duplicate event 'PodEvicted'"),
        (_set("spec.plugins", {"sshd": []}), "spec.plugins: unknown Volcano job plugin 'sshd'"),
        (_set("metadata.name", "portal-42-3-" + "x" * 50), "is not a DNS-1123 label"),
        (_set(("metadata", "labels", "gpu-portal.io/job-id"), "42 "), "invalid label value '42 '"),
        # Go's "$" is the end of the text; Python's also matches before a final newline
        (_set("metadata.name", "portal-42-3\n"), "metadata.name: 'portal-42-3\\n' is not a DNS-1123 label"),
        (_set(("metadata", "labels", "gpu-portal.io/job-id"), "42\n"), "invalid label value '42\\n'"),
        (_set(("spec", "tasks", 0, "template", "spec", "containers", 0, "resources", "limits", "rdma/hca"), "0.5"), "extended resource rdma/hca must be a whole number"),
    ],
)  # fmt: skip
def test_invalid_manifests_are_caught(mutate, expected):
    job = single()
    mutate(job)
    errors = volcano.validate_job(job)
    assert any(expected in e for e in errors), errors
    with pytest.raises(volcano.ManifestError):
        volcano.check(errors)


def test_duplicate_task_names_are_caught():
    job = gang()
    job["spec"]["tasks"][1]["name"] = "node0"
    assert "spec.tasks[1].name: duplicated task name 'node0'" in volcano.validate_job(job)


def test_strictness_is_what_catches_unknown_fields():
    job = single()
    job["spec"]["tasks"][0]["replica"] = 1
    assert volcano.schema_errors(job, strict=False) == [], "the bare CRD schema ignores it"
    assert volcano.schema_errors(job) == [
        "spec.tasks[0]: Additional properties are not allowed ('replica' was unexpected)"
    ]


def test_garbage_is_not_a_manifest():
    assert volcano.validate_job({}) != []
    assert volcano.schema_errors({"apiVersion": "v1", "kind": "Pod"}) == [
        "no vendored schema for Pod in v1"
    ]
    bad_group = volcano.validate_podgroup(
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
         "metadata": {"name": "pg"}, "spec": {"minMember": -1}}
    )  # fmt: skip
    assert bad_group == ["spec.minMember: -1 is less than the minimum of 0"]


@pytest.mark.parametrize(
    "req, words",
    [
        (LaunchRequest(ref="portal-1-1", job_id=2, name="x", placement=(Slot("a", (0,)),),
                       progress_s=0, checkpoint_interval_s=0, checkpoint_path=""), "does not name job 2"),
        (request([]), "placement is empty"),
        (request([("gpu-a", ())]), "no GPUs on gpu-a"),
        (request([("gpu-a", (0,)), ("gpu-a", (1,))]), "node gpu-a listed twice"),
        (request([("gpu-a", (1, 1))]), "bad GPU indices"),
    ],
)  # fmt: skip
def test_requests_that_cannot_be_built(req, words):
    with pytest.raises(volcano.ManifestError, match=words):
        volcano.build_job(req, SETTINGS)


def test_grace_must_be_at_least_one_second():
    with pytest.raises(volcano.ManifestError, match="force-delete"):
        volcano.build_job(request([("gpu-a", (0,))]), volcano.JobSettings(grace_s=0))


def test_placement_annotation_round_trip():
    slots = (Slot("gpu-a", (0, 1)), Slot("gpu-b", (4, 5)))
    text = volcano.encode_placement(slots)
    assert text == '[["gpu-a",[0,1]],["gpu-b",[4,5]]]'
    assert volcano.decode_placement(text) == slots
    for bad in (None, "", "{", "[1,2]", '[["a","b"]]', "[]"):
        assert volcano.decode_placement(bad) is None


# ---------------------------------------------------------------------------------------
# Command line and the default container's contract
# ---------------------------------------------------------------------------------------
def test_command_line_prints_valid_manifests():
    out = io.StringIO()
    with redirect_stdout(out):
        assert volcano.main(["job", "--job-id", "7", "--node", "gpu-a:8", "--node", "gpu-b:8",
                             "--namespace", "ml", "--queue", "portal"]) == 0  # fmt: skip
    job = yaml.safe_load(out.getvalue())
    assert volcano.validate_job(job) == []
    assert job["metadata"]["name"] == "portal-7-1" and job["spec"]["minAvailable"] == 2
    out = io.StringIO()
    with redirect_stdout(out):
        assert volcano.main(["queue", "portal"]) == 0
    assert volcano.validate_queue(yaml.safe_load(out.getvalue())) == []


def _demo(tmp_path: Path, remaining: str) -> subprocess.Popen:
    environment = {
        **os.environ, "PORTAL_RUN_REF": "portal-42-3", "PORTAL_NODE_RANK": "0",
        "PORTAL_NUM_NODES": "1", "PORTAL_NODE_NAME": "gpu-a", "PORTAL_PROGRESS_S": "0",
        "PORTAL_CHECKPOINT_PATH": str(tmp_path / "ckpt"), "PORTAL_REMAINING_S": remaining,
    }  # fmt: skip
    return subprocess.Popen(list(volcano.DEMO_COMMAND), env=environment, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip


def test_the_default_container_checkpoints_on_sigterm(tmp_path):
    """The stand-in trainer (run by the local /bin/sh, not in a container) honours the
    contract: on SIGTERM it writes a checkpoint and exits 0; alone it finishes."""
    proc = _demo(tmp_path, "")
    deadline = time.monotonic() + 10
    line = proc.stdout.readline()
    assert line.startswith("ready: portal-42-3 rank 0/1 on gpu-a") or time.monotonic() > deadline
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "checkpoint: portal-42-3" in out
    assert (tmp_path / "ckpt" / "checkpoint-portal-42-3").exists()
    done = _demo(tmp_path, "1")
    out, _ = done.communicate(timeout=15)
    assert done.returncode == 0 and "done: portal-42-3" in out


def test_manifests_do_not_change_between_builds():
    assert gang() == gang() and copy.deepcopy(single()) == single()


def test_a_run_with_a_time_limit_has_a_pod_deadline_as_a_backstop():
    """The loop stops a run at its limit; a pod that outlives the limit, the grace and the
    margin (the portal down) is stopped by the kubelet (``activeDeadlineSeconds``)."""
    limited = dataclasses.replace(
        request([("gpu-a", range(8)), ("gpu-b", range(8))]), time_limit_s=1800.0
    )
    job = volcano.build_job(limited, SETTINGS)
    assert volcano.validate_job(job) == []
    deadline = 1800 + SETTINGS.grace_s + BACKSTOP_MARGIN_S
    assert [pod_spec(job, rank)["activeDeadlineSeconds"] for rank in (0, 1)] == [deadline] * 2
    assert "activeDeadlineSeconds" not in pod_spec(single(), 0), "no limit, no deadline"
