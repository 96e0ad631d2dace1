"""Volcano manifests for the Kubernetes backend: pure builders and their validators.

Nothing here talks to a cluster. :func:`build_job` turns a ``LaunchRequest`` (exact
nodes and GPU indices chosen by the portal) into a Volcano ``batch.volcano.sh/v1alpha1``
``Job``; :func:`validate_job` checks a manifest three ways:

1. against the ``openAPIV3Schema`` of Volcano's published CRD (vendored in
   ``data/schemas/volcano/``) with ``jsonschema``, unknown fields rejected (the API
   server's ``fieldValidation=Strict``, which the backend asks for);
2. every core object inside it (``metadata`` as ``V1ObjectMeta``, each task's pod
   template as ``V1PodTemplateSpec``) through the official ``kubernetes`` client's
   typed models, which know the Kubernetes field names and types;
3. the rules Volcano's admission webhook adds (task names, ``minAvailable`` against
   replicas, allowed policy events and actions, pod name lengths).

Design (``docs/backend-kubernetes.md`` explains it for operators):

- **One task per node**, ``replicas: 1`` each, so every pod can be pinned to its own
  node; ``minAvailable`` = number of pods makes the job a gang (Volcano's PodGroup,
  which the Volcano job controller derives from the Job, has ``minMember`` = that).
  One task with ``replicas: N`` cannot pin replica *i* to node *i* (all replicas
  share one template) and could not give nodes different GPU counts.
- **Pinning by node affinity, not ``nodeName``**: a pod with ``nodeName`` set skips
  the scheduler, so Volcano could not gang it. ``requiredDuringScheduling...`` with
  ``matchFields: metadata.name In [node]`` names the node exactly (node labels such
  as ``kubernetes.io/hostname`` may differ from the node name).
- **GPUs** as ``nvidia.com/gpu`` limits (the device plugin picks the physical GPUs;
  the indices the portal chose are kept in the ``gpu-portal.io/placement``
  annotation as its own bookkeeping). An exclusive run asks for every allocatable
  GPU of its nodes, so nothing else can land there. Multi-node runs also ask for an
  RDMA resource (default ``rdma/hca: 1``) and ``IPC_LOCK``.
- **Policies**: ``PodEvicted``, ``PodFailed`` and ``Unknown`` -> ``TerminateJob``.
  No ``RestartJob``/``RestartTask``: the portal decides where a broken gang runs next
  (from its checkpoint), Volcano must not restart it in place. A pod deleted by the
  portal's graceful stop is a ``PodEvicted`` event, so the rest of the gang is torn
  down with it and the Job ends ``Terminated``.
- **Graceful stop**: ``terminationGracePeriodSeconds`` is the portal's grace; the
  trainer gets SIGTERM, writes a checkpoint to ``PORTAL_CHECKPOINT_PATH`` and exits 0.
- **Time limit** (``scheduling.time_limits``): the loop asks a run at its limit to stop;
  as a backstop, each pod of a run with a limit has ``activeDeadlineSeconds`` (the limit,
  the grace and ``BACKSTOP_MARGIN_S``), so the kubelet stops one that outlives it while
  the portal is down. The pod fails (``DeadlineExceeded``), the Job terminates, and the
  portal fails the job as timed out.
- Pods are marked ``volcano.sh/preemptable: "false"`` so Volcano's own preempt and
  reclaim actions leave them alone: the portal is the one that preempts.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scheduling.backends.base import LaunchRequest, parse_run_ref, run_ref
from scheduling.backends.placement import shape_problems
from scheduling.engine.types import Slot

# API groups, versions and resources.
BATCH_GROUP = "batch.volcano.sh"
BATCH_VERSION = "v1alpha1"
JOBS = "jobs"
SCHEDULING_GROUP = "scheduling.volcano.sh"
SCHEDULING_VERSION = "v1beta1"
QUEUES = "queues"
PODGROUPS = "podgroups"
BUS_GROUP = "bus.volcano.sh"
BUS_VERSION = "v1alpha1"
COMMANDS = "commands"

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_RDMA_RESOURCE = "rdma/hca"
DEFAULT_IMAGE = "busybox:1.36"
CONTAINER_NAME = "trainer"

# Labels (on the Job and on every pod) and annotations (on the Job) the portal writes.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-portal"
LABEL_JOB_ID = "gpu-portal.io/job-id"
LABEL_RUN_REF = "gpu-portal.io/run-ref"
LABEL_NODE_RANK = "gpu-portal.io/node-rank"
ANN_PLACEMENT = "gpu-portal.io/placement"
ANN_PROGRESS = "gpu-portal.io/progress-s"
ANN_CHECKPOINT_INTERVAL = "gpu-portal.io/checkpoint-interval-s"
ANN_GRACE = "gpu-portal.io/grace-s"
ANN_EXCLUSIVE = "gpu-portal.io/exclusive"
ANN_JOB_NAME = "gpu-portal.io/job-name"
ANN_STOP_DEADLINE = "gpu-portal.io/stop-deadline"  # written by checkpoint_and_stop
ANN_KILLED_AT = "gpu-portal.io/killed-at"  # written by kill
ANN_CORDON_REASON = "gpu-portal.io/cordon-reason"  # on nodes the portal cordoned
VOLCANO_PREEMPTABLE = "volcano.sh/preemptable"

# Lifecycle policies: every way a gang can break ends the Job; the portal retries it.
POLICIES: tuple[dict[str, str], ...] = (
    {"event": "PodEvicted", "action": "TerminateJob"},
    {"event": "PodFailed", "action": "TerminateJob"},
    {"event": "Unknown", "action": "TerminateJob"},
)

# The default container: a stand-in for training that honours the portal's contract
# (on SIGTERM write a checkpoint and exit 0). PORTAL_REMAINING_S (from a job's
# sim_duration_minutes) makes it finish on its own; empty, it runs until stopped.
DEMO_SCRIPT = r"""checkpoint() {
  echo "checkpoint: $PORTAL_RUN_REF at $(date +%s)"
  case "$PORTAL_CHECKPOINT_PATH" in
    /*) mkdir -p "$PORTAL_CHECKPOINT_PATH" &&
        echo "$PORTAL_RUN_REF $(date +%s)" > "$PORTAL_CHECKPOINT_PATH/checkpoint-$PORTAL_RUN_REF" ;;
  esac
  exit 0
}
trap checkpoint TERM
echo "ready: $PORTAL_RUN_REF rank $PORTAL_NODE_RANK/$PORTAL_NUM_NODES on $PORTAL_NODE_NAME from ${PORTAL_PROGRESS_S}s"
start=$(date +%s)
while [ -z "$PORTAL_REMAINING_S" ] || [ $(( $(date +%s) - start )) -lt "$PORTAL_REMAINING_S" ]; do
  sleep 1 &
  wait $!
done
echo "done: $PORTAL_RUN_REF"
"""
DEMO_COMMAND: tuple[str, ...] = ("/bin/sh", "-c", DEMO_SCRIPT)

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "data" / "schemas" / "volcano"
CRD_FILES = {
    (BATCH_GROUP, "Job"): "batch.volcano.sh_jobs.yaml",
    (SCHEDULING_GROUP, "PodGroup"): "scheduling.volcano.sh_podgroups.yaml",
    (SCHEDULING_GROUP, "Queue"): "scheduling.volcano.sh_queues.yaml",
}

# Kubernetes' own patterns; \Z where Go's "$" is written: Python's "$" also matches
# before a final newline, which the API server refuses.
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)
# What Volcano's admission webhook accepts in policies (pkg/webhooks/admission/jobs/validate).
WEBHOOK_EVENTS = frozenset(
    {"*", "PodFailed", "PodEvicted", "Unknown", "TaskCompleted", "TaskFailed", "JobUpdated"}
)
WEBHOOK_ACTIONS = frozenset(
    {"AbortJob", "RestartJob", "RestartTask", "TerminateJob", "CompleteJob", "ResumeJob"}
)
JOB_PLUGINS = frozenset(
    {"env", "svc", "ssh", "mpi", "pytorch", "tensorflow", "ray", "hcclrank", "ringsconfigmap"}
)
TERMINATE_JOB = "TerminateJob"


class ManifestError(ValueError):
    """A manifest (or the request it is built from) is invalid; ``errors`` lists why."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(self.errors[:5]) + (" ..." if len(self.errors) > 5 else ""))


@dataclass(frozen=True)
class JobSettings:
    """Cluster-wide parts of every Job: where it goes and what its pods run."""

    namespace: str = "default"
    queue: str = "default"
    scheduler_name: str = "volcano"
    image: str = DEFAULT_IMAGE
    command: tuple[str, ...] = DEMO_COMMAND
    image_pull_policy: str | None = None
    grace_s: int = 300
    rdma_resource: str | None = DEFAULT_RDMA_RESOURCE
    rdma_per_pod: int = 1
    ttl_after_finished_s: int | None = 86400
    service_account: str | None = None
    priority_class: str | None = None
    checkpoint_pvc: str | None = None
    checkpoint_mount: str = "/checkpoints"
    shared_memory: bool = True


# ---------------------------------------------------------------------------------------
# Placement bookkeeping
# ---------------------------------------------------------------------------------------
def encode_placement(slots: Iterable[Slot]) -> str:
    """``[["node-a",[0,1]],["node-b",[0,1]]]``: the portal's GPU indices, in order."""
    return json.dumps([[s.node, list(s.gpus)] for s in slots], separators=(",", ":"))


def decode_placement(text: str | None) -> tuple[Slot, ...] | None:
    """The placement stored by :func:`encode_placement`; None when absent or malformed."""
    if not text:
        return None
    try:
        raw = json.loads(text)
        slots = tuple(
            Slot(str(node), tuple(int(g) for g in gpus))
            for node, gpus in raw
            if isinstance(node, str) and isinstance(gpus, list)
        )
    except (ValueError, TypeError):
        return None
    return slots or None


def task_name(rank: int) -> str:
    return f"node{rank}"


def pod_name(job_name: str, rank: int) -> str:
    """The name Volcano gives the pod of task ``rank`` (``<job>-<task>-<replica>``)."""
    return f"{job_name}-{task_name(rank)}-0"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


# ---------------------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------------------
def _check_request(request: LaunchRequest, settings: JobSettings) -> list[str]:
    errors = []
    parsed = parse_run_ref(request.ref)
    if parsed is None or parsed[0] != request.job_id:
        errors.append(f"run ref {request.ref!r} does not name job {request.job_id}")
    errors.extend(shape_problems(request.placement))
    if settings.grace_s < 1:
        errors.append("grace period must be at least 1 s (0 would force-delete pods)")
    if not settings.command:
        errors.append("no container command")
    return errors


def build_job(
    request: LaunchRequest,
    settings: JobSettings,
    node_gpus: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The Volcano ``Job`` that runs ``request`` on exactly its nodes (see module docstring).

    ``node_gpus`` (node -> allocatable GPUs) is needed for an exclusive run, which asks
    for every GPU of its nodes. Raises ManifestError for a request that cannot be built.
    """
    errors = _check_request(request, settings)
    if request.exclusive_node:
        missing = [s.node for s in request.placement if not (node_gpus or {}).get(s.node)]
        if missing:
            errors.append(f"an exclusive run needs the GPU count of {', '.join(missing)}")
    if errors:
        raise ManifestError(errors)
    name = request.ref
    nodes = len(request.placement)
    multi = nodes > 1
    labels = {MANAGED_BY_LABEL: MANAGED_BY, LABEL_JOB_ID: str(request.job_id), LABEL_RUN_REF: name}
    annotations = {
        ANN_PLACEMENT: encode_placement(request.placement),
        ANN_PROGRESS: _num(max(0.0, request.progress_s)),
        ANN_CHECKPOINT_INTERVAL: _num(max(0.0, request.checkpoint_interval_s)),
        ANN_GRACE: str(settings.grace_s),
        ANN_JOB_NAME: request.name,
    }
    if request.exclusive_node:
        annotations[ANN_EXCLUSIVE] = "true"
    remaining = ""
    if request.sim_duration_s:
        remaining = str(max(1, math.ceil(request.sim_duration_s - request.progress_s)))
    tasks = []
    for rank, slot in enumerate(request.placement):
        gpus = node_gpus[slot.node] if request.exclusive_node and node_gpus else len(slot.gpus)
        env = [
            {"name": "PORTAL_JOB_ID", "value": str(request.job_id)},
            {"name": "PORTAL_RUN_REF", "value": name},
            {"name": "PORTAL_JOB_NAME", "value": request.name},
            {"name": "PORTAL_PROGRESS_S", "value": _num(max(0.0, request.progress_s))},
            {"name": "PORTAL_CHECKPOINT_PATH", "value": request.checkpoint_path},
            {"name": "PORTAL_CHECKPOINT_INTERVAL_S", "value": _num(request.checkpoint_interval_s)},
            {"name": "PORTAL_GRACE_S", "value": str(settings.grace_s)},
            {"name": "PORTAL_REMAINING_S", "value": remaining},
            {"name": "PORTAL_NODE_RANK", "value": str(rank)},
            {"name": "PORTAL_NUM_NODES", "value": str(nodes)},
            {"name": "PORTAL_GPUS", "value": str(gpus)},
            {"name": "PORTAL_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            *({"name": k, "value": v} for k, v in request.array_environment().items()),
        ]
        if multi:  # the svc plugin gives every pod the DNS name <pod>.<job>
            env.append({"name": "PORTAL_MASTER_ADDR", "value": f"{pod_name(name, 0)}.{name}"})
        limits = {GPU_RESOURCE: str(gpus)}
        container: dict[str, Any] = {
            "name": CONTAINER_NAME,
            "image": settings.image,
            "command": list(settings.command),
            "env": env,
            "resources": {"limits": limits},
        }
        if settings.image_pull_policy:
            container["imagePullPolicy"] = settings.image_pull_policy
        if multi and settings.rdma_resource:
            limits[settings.rdma_resource] = str(settings.rdma_per_pod)
            container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
        mounts, volumes = [], []
        if settings.shared_memory:  # NCCL and data loaders need more than 64 MiB of /dev/shm
            mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
            volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        if settings.checkpoint_pvc:
            mounts.append({"name": "checkpoints", "mountPath": settings.checkpoint_mount})
            volumes.append(
                {"name": "checkpoints",
                 "persistentVolumeClaim": {"claimName": settings.checkpoint_pvc}}
            )  # fmt: skip
        if mounts:
            container["volumeMounts"] = mounts
        pod_spec: dict[str, Any] = {
            "schedulerName": settings.scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": settings.grace_s,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [slot.node]}
                            ]}
                        ]
                    }
                }
            },
            "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [container],
        }  # fmt: skip
        if volumes:
            pod_spec["volumes"] = volumes
        if settings.service_account:
            pod_spec["serviceAccountName"] = settings.service_account
        backstop = request.backstop_s(settings.grace_s)
        if backstop is not None:  # the kubelet stops a pod that outlives its time limit
            pod_spec["activeDeadlineSeconds"] = math.ceil(backstop)
        tasks.append(
            {
                "name": task_name(rank),
                "replicas": 1,
                "minAvailable": 1,
                "template": {
                    "metadata": {
                        "labels": {**labels, LABEL_NODE_RANK: str(rank)},
                        "annotations": {VOLCANO_PREEMPTABLE: "false"},
                    },
                    "spec": pod_spec,
                },
            }
        )
    spec: dict[str, Any] = {
        "schedulerName": settings.scheduler_name,
        "queue": settings.queue,
        "minAvailable": nodes,
        "policies": [dict(p) for p in POLICIES],
        "tasks": tasks,
    }
    if multi:
        spec["plugins"] = {"svc": []}
    if settings.ttl_after_finished_s is not None:
        spec["ttlSecondsAfterFinished"] = settings.ttl_after_finished_s
    if settings.priority_class:
        spec["priorityClassName"] = settings.priority_class
    return {
        "apiVersion": f"{BATCH_GROUP}/{BATCH_VERSION}",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def build_queue(name: str, *, weight: int = 1, reclaimable: bool = False) -> dict[str, Any]:
    """A Volcano ``Queue`` for the portal's jobs (cluster-scoped, created by an operator).

    ``reclaimable: false``: Volcano's reclaim action must not take GPUs back from it.
    No ``capability``: the portal enforces quotas itself.
    """
    return {
        "apiVersion": f"{SCHEDULING_GROUP}/{SCHEDULING_VERSION}",
        "kind": "Queue",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {"weight": weight, "reclaimable": reclaimable},
    }


def build_terminate_command(job: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """A Volcano ``bus.volcano.sh/v1alpha1`` ``Command`` that terminates ``job``.

    Used only for a run that has no pods yet (its PodGroup was never admitted), so
    there is nothing to delete: Volcano's job controller executes the command and
    the Job ends ``Terminated`` (this is what ``vcctl`` does). The Command CRD is not
    among the vendored schemas: this manifest is checked by the typed models only.
    """
    meta = job["metadata"]
    owner = {
        "apiVersion": f"{BATCH_GROUP}/{BATCH_VERSION}",
        "kind": "Job",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": f"{BUS_GROUP}/{BUS_VERSION}",
        "kind": "Command",
        "metadata": {
            "generateName": f"{meta['name']}-terminatejob-",
            "namespace": meta.get("namespace", "default"),
            "ownerReferences": [owner],
        },
        "action": TERMINATE_JOB,
        "target": dict(owner),
        "reason": "PortalStop",
        "message": reason[:1000],
    }


def node_patch(unschedulable: bool, reason: str = "") -> dict[str, Any]:
    """Strategic-merge patch of a Node: cordon (with the portal's reason) or uncordon."""
    if unschedulable:
        return {
            "metadata": {"annotations": {ANN_CORDON_REASON: reason[:1000]}},
            "spec": {"unschedulable": True},
        }
    return {
        "metadata": {"annotations": {ANN_CORDON_REASON: None}},
        "spec": {"unschedulable": False},
    }


def job_annotation_patch(annotations: Mapping[str, str]) -> dict[str, Any]:
    """JSON merge patch of a Job's annotations (the spec is immutable after creation)."""
    return {"metadata": {"annotations": dict(annotations)}}


# ---------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------
@functools.cache
def crd(group: str, kind: str) -> dict[str, Any]:
    """The vendored CustomResourceDefinition of ``kind`` in ``group``."""
    try:
        filename = CRD_FILES[(group, kind)]
    except KeyError:
        raise ManifestError([f"no vendored schema for {kind} in {group}"]) from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster on 228 kB
    with open(SCHEMA_DIR / filename, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=loader)


def crd_schema(group: str, kind: str, version: str) -> dict[str, Any]:
    """``spec.versions[version].schema.openAPIV3Schema`` of the vendored CRD."""
    for v in crd(group, kind)["spec"]["versions"]:
        if v["name"] == version and v.get("served", True):
            return v["schema"]["openAPIV3Schema"]
    raise ManifestError([f"{kind} {group}/{version} is not served by the vendored CRD"])


def _forbid_unknown(node: Any) -> Any:
    """A copy of a structural schema where objects reject fields they do not list."""
    if isinstance(node, list):
        return [_forbid_unknown(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _forbid_unknown(v) for k, v in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def _validator(group: str, kind: str, version: str, strict: bool):
    import jsonschema

    schema = copy.deepcopy(crd_schema(group, kind, version))
    if strict:
        schema = _forbid_unknown(schema)
    # OpenAPI 3.0 schema objects follow JSON Schema draft 4/5 (boolean exclusiveMinimum).
    cls = jsonschema.Draft4Validator
    cls.check_schema(schema)
    return cls(schema)


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"


def schema_errors(manifest: Mapping[str, Any], *, strict: bool = True) -> list[str]:
    """Errors of ``manifest`` against its vendored CRD schema (empty: valid).

    ``strict`` also rejects fields the schema does not list, as the API server does
    with ``fieldValidation=Strict`` (by default it would drop them silently).
    """
    api_version = str(manifest.get("apiVersion", ""))
    group, _, version = api_version.partition("/")
    kind = str(manifest.get("kind", ""))
    try:
        validator = _validator(group, kind, version, strict)
    except ManifestError as err:
        return err.errors
    errors = sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.path)))
    return [f"{_path(e.path)}: {e.message}" for e in errors]


# ---------------------------------------------------------------------------------------
# Core objects through the official client's typed models
# ---------------------------------------------------------------------------------------
@functools.cache
def _api_client():
    from kubernetes import client

    return client.ApiClient(client.Configuration())


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _differences(want: Any, got: Any, path: str) -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(want) | set(got)):
            sub = f"{path}.{key}" if path else key
            if key not in got:
                out.append(f"{sub}: not a field of the typed model")
            elif key not in want:
                out.append(f"{sub}: added by the typed model")
            else:
                out += _differences(want[key], got[key], sub)
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [e for i, (w, g) in enumerate(zip(want, got, strict=True))
                for e in _differences(w, g, f"{path}[{i}]")]  # fmt: skip
    if want == got or _same_instant(want, got):
        return []
    return [f"{path}: {want!r} became {got!r}"]


def _same_instant(a: Any, b: Any) -> bool:
    """``2025-06-02T10:00:00Z`` and ``2025-06-02T10:00:00+00:00`` (the model's spelling)."""
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    from datetime import datetime

    try:
        return datetime.fromisoformat(a.replace("Z", "+00:00")) == datetime.fromisoformat(
            b.replace("Z", "+00:00")
        )
    except ValueError:
        return False


def typed_errors(data: Mapping[str, Any], model: str, where: str = "") -> list[str]:
    """Errors of a core object against the ``kubernetes`` client's model ``model``
    (e.g. ``V1PodTemplateSpec``): unknown or misspelled fields, wrong types, missing
    required fields; then a round trip (model -> JSON) must give the input back."""
    from kubernetes import client
    from pydantic import ValidationError

    cls = getattr(client, model)
    prefix = f"{where}: " if where else ""
    try:
        obj = cls.model_validate(data)
    except ValidationError as err:
        return [
            f"{prefix}{model}.{_path(e['loc'])}: {e['msg']}" for e in err.errors(include_url=False)
        ]
    back = _api_client().sanitize_for_serialization(obj)
    return [f"{prefix}{model}.{d}" for d in _differences(_drop_nulls(dict(data)), back, "")]


# ---------------------------------------------------------------------------------------
# Volcano's admission rules (what the CRD schema cannot say)
# ---------------------------------------------------------------------------------------
def _policy_errors(policies: Sequence[Mapping[str, Any]], where: str) -> list[str]:
    errors, events = [], set()
    for p in policies:
        listed = list(p.get("events") or []) + ([p["event"]] if p.get("event") else [])
        if listed and p.get("exitCode") is not None:
            errors.append(f"{where}: must not specify event and exitCode simultaneously")
        if not listed and p.get("exitCode") is None:
            errors.append(f"{where}: either event or exitCode must be specified")
        if p.get("exitCode") == 0:
            errors.append(f"{where}: 0 is not a valid exit code")
        for event in listed:
            if event not in WEBHOOK_EVENTS:
                errors.append(f"{where}: invalid policy event {event!r}")
            if event in events:
                errors.append(f"{where}: duplicate event {event!r}")
            events.add(event)
        if p.get("action") not in WEBHOOK_ACTIONS:
            errors.append(f"{where}: invalid policy action {p.get('action')!r}")
    if "*" in events and len(events) > 1:
        errors.append(f"{where}: with '*' no other policy may be given")
    return errors


def _label_errors(labels: Mapping[str, Any] | None, where: str) -> list[str]:
    errors = []
    for key, value in (labels or {}).items():
        prefix, _, name = str(key).rpartition("/")
        if (prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix))) or not (
            len(name) <= 63 and _QUALIFIED_NAME.match(name)
        ):
            errors.append(f"{where}: invalid label key {key!r}")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(f"{where}: invalid label value {value!r} for {key}")
    return errors


def rule_errors(job: Mapping[str, Any]) -> list[str]:
    """Volcano's admission webhook rules for a Job, plus pod names usable as hostnames."""
    try:
        return _rule_errors(job)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        return [f"(admission rules not checked: malformed manifest: {err!r})"]


def _rule_errors(job: Mapping[str, Any]) -> list[str]:
    errors: list[str] = []
    name = str(job.get("metadata", {}).get("name", ""))
    if len(name) > 63 or not _DNS1123_LABEL.match(name):
        errors.append(
            f"metadata.name: {name!r} is not a DNS-1123 label (the svc plugin's subdomain)"
        )
    spec = job.get("spec", {})
    tasks = spec.get("tasks") or []
    if not tasks:
        errors.append("spec.tasks: no task")
    total, names = 0, set()
    for i, task in enumerate(tasks):
        where = f"spec.tasks[{i}]"
        tname = str(task.get("name", ""))
        replicas = int(task.get("replicas", 0) or 0)
        total += replicas
        if not _DNS1123_LABEL.match(tname):
            errors.append(f"{where}.name: {tname!r} is not a DNS-1123 label")
        if tname in names:
            errors.append(f"{where}.name: duplicated task name {tname!r}")
        names.add(tname)
        if task.get("minAvailable") is not None and task["minAvailable"] > replicas:
            errors.append(f"{where}.minAvailable: greater than replicas")
        for r in range(replicas):
            pname = f"{name}-{tname}-{r}"
            if len(pname) > 63 or not _DNS1123_LABEL.match(pname):
                errors.append(f"{where}: pod name {pname!r} is not a DNS-1123 label")
        errors += _policy_errors(task.get("policies") or [], f"{where}.policies")
        meta = task.get("template", {}).get("metadata", {})
        errors += _label_errors(meta.get("labels"), f"{where}.template.metadata.labels")
        for c, container in enumerate(
            task.get("template", {}).get("spec", {}).get("containers", [])
        ):
            res = container.get("resources", {})
            for rname, qty in (res.get("limits") or {}).items():
                if "/" in rname and not str(qty).isdigit():
                    errors.append(
                        f"{where}.containers[{c}]: extended resource {rname} must be a whole number"
                    )
                req = (res.get("requests") or {}).get(rname)
                if "/" in rname and req is not None and str(req) != str(qty):
                    errors.append(f"{where}.containers[{c}]: {rname} requests must equal limits")
    if spec.get("minAvailable", 0) > total:
        errors.append("spec.minAvailable: greater than the total replicas of the tasks")
    errors += _policy_errors(spec.get("policies") or [], "spec.policies")
    for plugin in spec.get("plugins") or {}:
        if plugin not in JOB_PLUGINS:
            errors.append(f"spec.plugins: unknown Volcano job plugin {plugin!r}")
    errors += _label_errors(job.get("metadata", {}).get("labels"), "metadata.labels")
    return errors


# ---------------------------------------------------------------------------------------
# Validators (empty list: valid)
# ---------------------------------------------------------------------------------------
def validate_job(job: Mapping[str, Any]) -> list[str]:
    """Every error of a Volcano Job manifest: CRD schema, typed core objects, webhook rules."""
    errors = schema_errors(job)
    errors += typed_errors(job.get("metadata") or {}, "V1ObjectMeta", "metadata")
    for i, task in enumerate((job.get("spec") or {}).get("tasks") or []):
        if isinstance(task, Mapping) and isinstance(task.get("template"), Mapping):
            errors += typed_errors(
                task["template"], "V1PodTemplateSpec", f"spec.tasks[{i}].template"
            )
    return errors + rule_errors(job)


def validate_queue(queue: Mapping[str, Any]) -> list[str]:
    return (
        schema_errors(queue)
        + typed_errors(queue.get("metadata") or {}, "V1ObjectMeta", "metadata")
        + _label_errors((queue.get("metadata") or {}).get("labels"), "metadata.labels")
    )


def validate_podgroup(podgroup: Mapping[str, Any]) -> list[str]:
    return schema_errors(podgroup) + typed_errors(
        podgroup.get("metadata") or {}, "V1ObjectMeta", "metadata"
    )


def validate_command(command: Mapping[str, Any]) -> list[str]:
    """No vendored schema for Command: its fields are checked here and by the typed models."""
    errors = []
    if (
        command.get("apiVersion") != f"{BUS_GROUP}/{BUS_VERSION}"
        or command.get("kind") != "Command"
    ):
        errors.append("not a bus.volcano.sh/v1alpha1 Command")
    unknown = set(command) - {
        "apiVersion",
        "kind",
        "metadata",
        "action",
        "target",
        "reason",
        "message",
    }
    errors += [f"{k}: not a field of Command" for k in sorted(unknown)]
    if command.get("action") not in WEBHOOK_ACTIONS:
        errors.append(f"action: {command.get('action')!r} is not a Volcano job action")
    errors += typed_errors(command.get("metadata") or {}, "V1ObjectMeta", "metadata")
    errors += typed_errors(command.get("target") or {}, "V1OwnerReference", "target")
    return errors


def validate_node_patch(patch: Mapping[str, Any]) -> list[str]:
    """A strategic-merge patch of a Node, as a partial ``V1Node`` (nulls delete keys)."""
    return typed_errors(_drop_nulls(dict(patch)), "V1Node", "node patch")


def check(errors: list[str]) -> None:
    if errors:
        raise ManifestError(errors)


# ---------------------------------------------------------------------------------------
# Command line: print manifests (e.g. for `kubectl apply --dry-run=server -f -`)
# ---------------------------------------------------------------------------------------
def _parse_slot(text: str) -> Slot:
    node, _, gpus = text.rpartition(":")
    if not node:
        raise argparse.ArgumentTypeError(f"expected NODE:GPUS, got {text!r}")
    count = int(gpus)
    return Slot(node, tuple(range(count)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduling.backends.volcano",
        description="Print the Volcano manifests the Kubernetes backend would create.",
    )
    sub = parser.add_subparsers(dest="what", required=True)
    job = sub.add_parser("job", help="a Job for a placement")
    job.add_argument("--job-id", type=int, default=1)
    job.add_argument("--attempt", type=int, default=1)
    job.add_argument("--node", type=_parse_slot, action="append", required=True,
                     help="NODE:GPUS, once per node")  # fmt: skip
    job.add_argument("--namespace", default="default")
    job.add_argument("--queue", default="default")
    job.add_argument("--image", default=DEFAULT_IMAGE)
    job.add_argument("--grace", type=int, default=300)
    job.add_argument("--exclusive", action="store_true")
    queue = sub.add_parser("queue", help="a Queue")
    queue.add_argument("name")
    queue.add_argument("--weight", type=int, default=1)
    args = parser.parse_args(argv)
    if args.what == "queue":
        manifest = build_queue(args.name, weight=args.weight)
        errors = validate_queue(manifest)
    else:
        request = LaunchRequest(
            ref=run_ref(args.job_id, args.attempt), job_id=args.job_id, name=f"job-{args.job_id}",
            placement=tuple(args.node), progress_s=0.0, checkpoint_interval_s=3600.0,
            checkpoint_path="", exclusive_node=args.exclusive,
        )  # fmt: skip
        settings = JobSettings(
            namespace=args.namespace, queue=args.queue, image=args.image, grace_s=args.grace
        )
        node_gpus = {s.node: len(s.gpus) for s in request.placement}
        manifest = build_job(request, settings, node_gpus)
        errors = validate_job(manifest)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    yaml.safe_dump(manifest, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
