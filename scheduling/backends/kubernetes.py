"""Kubernetes with Volcano as a backend: the portal decides, Volcano executes what it is told.

Every run the portal starts is one Volcano ``Job`` (``batch.volcano.sh/v1alpha1``) named
after its run ref (``portal-<job>-<attempt>``) in one namespace, built by
:mod:`scheduling.backends.volcano`: one task per node, each pod pinned to its node by
node affinity, ``minAvailable`` = number of pods (a gang), ``nvidia.com/gpu`` limits, an
RDMA resource for multi-node runs, ``terminationGracePeriodSeconds`` = the portal's
grace, and no Volcano restart policy (the portal retries from the checkpoint itself).
The official ``kubernetes`` client makes every call: ``CustomObjectsApi`` for Volcano
objects, ``CoreV1Api`` for nodes and pods. Nothing is kept between cycles except what
the cluster stores: the run's bookkeeping lives in the Job's annotations
(``gpu-portal.io/placement``, ``progress-s``, ``checkpoint-interval-s``, and
``stop-deadline``/``killed-at`` written just before the portal stops or kills it).

Observation (``observe``):

- Nodes: those with an ``nvidia.com/gpu`` capacity (optionally narrowed by a label
  selector). ``gpus_total`` = capacity; rack, block, GPU model and memory, RDMA and
  inference come from node labels (names configurable, see ``NodeLabels``);
  ``cordoned`` = ``spec.unschedulable``; health from conditions and resources: Ready
  not True or NetworkUnavailable -> ``down``; allocatable GPUs below capacity (the
  device plugin reports a GPU unhealthy) -> ``gpu_failure``; the RDMA resource below
  its capacity -> ``rdma_degraded``.
- GPU indices are not visible through the API (the device plugin picks the physical
  GPUs). The *count* of free GPUs is exact: capacity minus what bound, unfinished
  pods request (any namespace) minus unhealthy GPUs. Which indices are free is the
  portal's own bookkeeping: a portal run holds the indices in its placement
  annotation; everything else (foreign pods, extra GPUs of an exclusive run,
  unhealthy GPUs) takes the highest indices the portal does not hold. So the indices
  agree with the portal's allocations and free counts agree with the kubelet's.
- Runs: every Volcano Job in the namespace. State mapping (``status.state.phase``):
  Pending/Running/Restarting/Completing -> ``running`` (a pinned Pending run is
  starting: its GPUs are held); between a checkpoint request and its deadline, or
  after a kill, ``stopping`` (after the deadline it reads ``running`` again, so the
  loop kills it); Terminating/Aborting -> ``stopping``; Completed -> ``succeeded`` (or
  ``stopped`` after a checkpoint request); Terminated/Aborted/Failed after a portal
  stop or kill -> ``stopped``, otherwise -> ``failed`` with the failed pod's reason.
- Kubernetes knows nothing of training progress: progress is the start progress plus
  the time since the gang started (the Job's ``Running`` condition), and the last
  checkpoint is estimated from the checkpoint interval; a run whose pods were gone
  before its stop deadline counts as checkpointed at its end.
- ``inference_pressure`` is always empty and ``residual_gpus`` always none: neither
  is visible through the API.

Stopping: ``checkpoint_and_stop`` deletes the run's pods with ``gracePeriodSeconds`` =
the remaining grace: the kubelet sends SIGTERM, the trainer checkpoints and exits, and
SIGKILL follows at the deadline. Volcano sees ``PodEvicted`` and (policy
``TerminateJob``) tears the gang down; the Job ends ``Terminated``. ``kill`` does the
same with a 1 s grace (0 would force-delete the pod object while its containers may
still hold the GPUs). A run that has no pods yet is ended with a Volcano
``TerminateJob`` ``Command``. ``cordon``/``uncordon`` patch ``spec.unschedulable``.

Errors: HTTP 5xx, 408, 429, 409 (on anything but creating a run), status 0 and
connection errors -> ``TransientBackendError``; other 4xx -> ``PermanentBackendError``.
``docs/backend-kubernetes.md`` says what was and was not run against a live cluster.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Self

from scheduling.backends import volcano
from scheduling.backends.base import (
    DEFAULT_BLOCK,
    DEFAULT_GPU_MODEL,
    DEFAULT_GRACE_S,
    DEFAULT_RACK,
    ENDED,
    FAILED,
    HEALTH_DOWN,
    HEALTH_GPU_FAILURE,
    HEALTH_OK,
    HEALTH_RDMA_DEGRADED,
    RUNNING,
    STOPPED,
    STOPPING,
    SUCCEEDED,
    BackendError,
    ClusterBackend,
    LaunchRequest,
    NoOutput,
    Observation,
    ObservedJob,
    ObservedNode,
    OutputAnswer,
    OutputTail,
    PermanentBackendError,
    TransientBackendError,
    parse_run_ref,
    tail_bytes,
)
from scheduling.backends.config import BackendConfig, BackendContext
from scheduling.backends.placement import NodeCapacity, check_placement, launch_ref, take_gpus
from scheduling.engine.types import Slot

GPU = volcano.GPU_RESOURCE
JSON = "application/json"  # the client sets no Content-Type on creates; say it
# Pod logs: lines asked for per byte wanted (short lines), at least; and the byte bound.
LOG_BYTES_PER_LINE = 16
LOG_MIN_LINES = 100
LOG_LIMIT_BYTES = 4 << 20
KILL_GRACE_S = 1  # `kubectl delete --now`; 0 means force deletion for pods
CHECKPOINT_SLACK_S = 2.0  # pods gone this close to the deadline still count as checkpointed
DB_TEXT = 32  # Node.rack/block/gpu_model are CharField(max_length=32)

FINAL_PHASES = frozenset({"Completed", "Terminated", "Aborted", "Failed"})
TEARDOWN_PHASES = frozenset({"Terminating", "Aborting"})
LIVE_POD_PHASES = frozenset({"Pending", "Running", "Unknown"})
# Pods that hold resources on a node: bound and not finished.
LIVE_POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

_MODEL = re.compile(
    r"(gh200|gb200|h100|h200|h800|h20|b100|b200|a100|a800|a10g|a10|a30|a40|a6000|l40s|l40|l4|"
    r"v100|t4|p100|mi210|mi250x|mi250|mi300x|mi325x)",
    re.IGNORECASE,
)


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")


def default_namespace(config: BackendConfig) -> str:
    """``KUBERNETES_NAMESPACE``, else the pod's own namespace in-cluster, else ``default``."""
    configured = config.get("KUBERNETES_NAMESPACE")
    if configured:
        return str(configured)
    if in_cluster():
        try:
            with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as fh:
                return fh.read().strip() or "default"
        except OSError:
            pass
    return "default"


def load_api_client(kubeconfig: str | None = None, context: str | None = None):
    """An ``ApiClient`` from a kubeconfig (``KUBECONFIG`` or ``~/.kube/config``) or, inside
    a pod without ``KUBECONFIG``, from the pod's service account."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        if kubeconfig or context or not in_cluster():
            config.load_kube_config(config_file=kubeconfig, context=context,
                                    client_configuration=cfg, persist_config=False)  # fmt: skip
        else:
            config.load_incluster_config(client_configuration=cfg)
    except (config.ConfigException, OSError, TypeError, ValueError) as err:
        raise PermanentBackendError(
            f"cannot load Kubernetes credentials ({kubeconfig or 'KUBECONFIG / in-cluster'}): "
            f"{err}",
            code="bad_config",
        ) from err
    return client.ApiClient(cfg)


@dataclass(frozen=True)
class NodeLabels:
    """Node label names the backend reads (each overridable, see the docs).

    Rack and block labels are not Kubernetes well-known labels: the operator puts
    them on nodes (or points these settings at labels the cluster already has). GPU
    model and memory default to NVIDIA GPU Feature Discovery's labels; RDMA defaults
    to Node Feature Discovery's, and is also true where the node offers the RDMA
    resource.
    """

    rack: str = "topology.kubernetes.io/rack"
    block: str = "topology.kubernetes.io/block"
    gpu_model: str = "nvidia.com/gpu.product"
    gpu_memory: str = "nvidia.com/gpu.memory"  # MiB
    rdma: str = "feature.node.kubernetes.io/rdma.capable"
    rdma_override: str = "gpu-portal.io/rdma"
    inference: str = "gpu-portal.io/inference"


# ---------------------------------------------------------------------------------------
# Small parsers of API objects (plain JSON dicts, camelCase as on the wire)
# ---------------------------------------------------------------------------------------
_SUFFIXES = {
    "": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]*)$")


def _count(quantity: Any) -> int:
    """A resource quantity as a whole number ("8", 8, "1k" -> 1000); malformed counts 0."""
    if quantity is None:
        return 0
    m = _QUANTITY.match(str(quantity).strip())
    if not m or m.group(2) not in _SUFFIXES:
        return 0
    return max(0, int(float(m.group(1)) * _SUFFIXES[m.group(2)]))


def _ts(text: Any) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """GPUs a pod holds: the larger of its containers' sum and its largest init container."""

    def of(container: Mapping[str, Any]) -> int:
        res = container.get("resources") or {}
        return max(_count((res.get("requests") or {}).get(GPU)),
                   _count((res.get("limits") or {}).get(GPU)))  # fmt: skip

    spec = pod.get("spec") or {}
    main = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def normalize_gpu_model(product: str | None) -> str | None:
    """``NVIDIA-H100-80GB-HBM3`` -> ``H100``; other values are kept (at most 32 characters)."""
    if not product:
        return None
    m = _MODEL.search(product)
    return m.group(1).upper() if m else product[:DB_TEXT]


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _api_message(err: Any) -> str:
    body = getattr(err, "body", None)
    if body:
        try:
            data = json.loads(body)
            if isinstance(data, dict) and data.get("message"):
                return str(data["message"])
        except (TypeError, ValueError):
            pass
    return str(getattr(err, "reason", "") or "no message")


def map_api_exception(err: Any, what: str) -> BackendError:
    """The backend error for an ``ApiException`` (see the module docstring)."""
    status = int(getattr(err, "status", 0) or 0)
    message = f"{what}: Kubernetes API {status or 'error'}: {_api_message(err)}"
    if status == 0 or status in (408, 429) or status >= 500:
        return TransientBackendError(message, code=f"k8s_{status or 'unavailable'}")
    if status == 409:
        return TransientBackendError(message, code="conflict")
    if status == 404:
        return PermanentBackendError(message, code="not_found")
    if status in (401, 403):
        return PermanentBackendError(
            message + " (check the portal's credentials and RBAC, docs/backend-kubernetes.md)",
            code="forbidden",
        )
    return PermanentBackendError(message, code="k8s_refused")


# ---------------------------------------------------------------------------------------
# The view of one observation
# ---------------------------------------------------------------------------------------
@dataclass
class _View:
    now: float
    nodes: dict[str, dict[str, Any]]  # GPU nodes by name (raw Node objects)
    free: dict[str, list[int]]  # node -> free GPU indices, ascending
    runs: dict[str, dict[str, Any]]  # Volcano Job objects by name
    run_pods: dict[str, list[dict[str, Any]]]  # portal run -> its pods (every phase)
    foreign: dict[str, list[Slot]] = field(default_factory=dict)  # foreign job -> GPUs


class KubernetesBackend(ClusterBackend):
    """A Kubernetes cluster with Volcano behind the backend interface (one instance per cycle).

    Configuration (keyword arguments, else ``config``: the Django settings the factory
    passes, else the environment):
    ``KUBECONFIG`` (else in-cluster credentials), ``KUBERNETES_CONTEXT``,
    ``KUBERNETES_NAMESPACE``, ``KUBERNETES_VOLCANO_QUEUE``, ``KUBERNETES_SCHEDULER_NAME``,
    ``KUBERNETES_JOB_IMAGE``, ``KUBERNETES_JOB_COMMAND`` (shell words),
    ``KUBERNETES_RDMA_RESOURCE`` (``""`` disables), ``KUBERNETES_NODE_SELECTOR``,
    ``KUBERNETES_*_LABEL`` (see :class:`NodeLabels`), ``KUBERNETES_SERVICE_ACCOUNT``,
    ``KUBERNETES_PRIORITY_CLASS``, ``KUBERNETES_CHECKPOINT_PVC`` and
    ``KUBERNETES_CHECKPOINT_MOUNT``, ``KUBERNETES_JOB_TTL_SECONDS``,
    ``KUBERNETES_TIMEOUT`` (seconds per API call), ``KUBERNETES_DEFAULT_GPU_MODEL`` and
    ``PREEMPTION_GRACE_SECONDS`` (``terminationGracePeriodSeconds``).
    """

    name = "kubernetes"

    def __init__(
        self,
        *,
        api_client: Any = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        queue: str | None = None,
        scheduler_name: str | None = None,
        image: str | None = None,
        command: tuple[str, ...] | list[str] | str | None = None,
        rdma_resource: str | None = None,
        node_selector: str | None = None,
        labels: NodeLabels | None = None,
        grace_s: float | None = None,
        timeout: float | None = None,
        job_ttl_s: int | None = None,
        service_account: str | None = None,
        priority_class: str | None = None,
        checkpoint_pvc: str | None = None,
        checkpoint_mount: str | None = None,
        default_gpu_model: str | None = None,
        clock: Callable[[], float] = time.time,
        config: BackendConfig | None = None,
    ) -> None:
        import shlex

        from kubernetes import client

        cfg = config or BackendConfig()
        self._owns_client = api_client is None
        if api_client is None:
            api_client = load_api_client(
                cfg.pick(kubeconfig, "KUBECONFIG"), cfg.pick(context, "KUBERNETES_CONTEXT")
            )
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.namespace = namespace or default_namespace(cfg)
        grace = float(cfg.pick(grace_s, "PREEMPTION_GRACE_SECONDS", DEFAULT_GRACE_S))
        cmd = cfg.pick(command, "KUBERNETES_JOB_COMMAND")
        if isinstance(cmd, str):
            cmd = shlex.split(cmd)
        rdma = cfg.pick(rdma_resource, "KUBERNETES_RDMA_RESOURCE", keep_empty=True)
        ttl = cfg.pick(job_ttl_s, "KUBERNETES_JOB_TTL_SECONDS", 86400)
        self.job_settings = volcano.JobSettings(
            namespace=self.namespace,
            queue=str(cfg.pick(queue, "KUBERNETES_VOLCANO_QUEUE", "default")),
            scheduler_name=str(cfg.pick(scheduler_name, "KUBERNETES_SCHEDULER_NAME", "volcano")),
            image=str(cfg.pick(image, "KUBERNETES_JOB_IMAGE", volcano.DEFAULT_IMAGE)),
            command=tuple(cmd) if cmd else volcano.DEMO_COMMAND,
            grace_s=max(1, math.ceil(grace)),
            rdma_resource=(
                volcano.DEFAULT_RDMA_RESOURCE if rdma is None else str(rdma).strip() or None
            ),
            ttl_after_finished_s=int(ttl) if str(ttl) != "" else None,
            service_account=cfg.pick(service_account, "KUBERNETES_SERVICE_ACCOUNT"),
            priority_class=cfg.pick(priority_class, "KUBERNETES_PRIORITY_CLASS"),
            checkpoint_pvc=cfg.pick(checkpoint_pvc, "KUBERNETES_CHECKPOINT_PVC"),
            checkpoint_mount=str(
                cfg.pick(checkpoint_mount, "KUBERNETES_CHECKPOINT_MOUNT", "/checkpoints")
            ),
        )
        self.node_selector = cfg.pick(node_selector, "KUBERNETES_NODE_SELECTOR")
        if labels is None:
            base = NodeLabels()
            labels = NodeLabels(
                **{
                    f: str(cfg.get(f"KUBERNETES_{f.upper()}_LABEL", getattr(base, f)))
                    for f in ("rack", "block", "gpu_model", "gpu_memory", "rdma", "inference")
                },
                rdma_override=base.rdma_override,
            )
        self.labels = labels
        self.timeout = float(cfg.pick(timeout, "KUBERNETES_TIMEOUT", 30.0))
        self.default_gpu_model = str(
            cfg.pick(default_gpu_model, "KUBERNETES_DEFAULT_GPU_MODEL", DEFAULT_GPU_MODEL)
        )
        self.clock = clock
        self._view: _View | None = None

    @classmethod
    def open(cls, context: BackendContext) -> Self:
        return cls(config=context.config)

    # -- plumbing -------------------------------------------------------------------------
    def _request(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the client (raw JSON, no typed response models) and map its errors."""
        data = self._raw_request(what, fn, *args, **kwargs)
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError as err:
            raise TransientBackendError(
                f"{what}: unreadable response from the Kubernetes API", code="bad_response"
            ) from err

    def _raw_request(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
        """Call the client and return the response body as it came (errors mapped)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs["_preload_content"] = False
        if self.timeout:
            kwargs["_request_timeout"] = self.timeout
        try:
            response = fn(*args, **kwargs)
        except ApiException as err:
            raise map_api_exception(err, what) from err
        except (HTTPError, OSError) as err:
            raise TransientBackendError(
                f"{what}: cannot reach the Kubernetes API: {err}", code="k8s_unavailable"
            ) from err
        except ValueError as err:  # the client refused the arguments (pydantic)
            raise PermanentBackendError(f"{what}: {err}", code="invalid_argument") from err
        return getattr(response, "data", b"") or b""

    def _vc(self, what: str, verb: str, *args: Any, **kwargs: Any) -> Any:
        """A Volcano Job call in the backend's namespace."""
        fn = getattr(self.custom, f"{verb}_namespaced_custom_object")
        return self._request(what, fn, volcano.BATCH_GROUP, volcano.BATCH_VERSION,
                             self.namespace, volcano.JOBS, *args, **kwargs)  # fmt: skip

    # -- observe ----------------------------------------------------------------------------
    def _refresh(self) -> _View:
        node_kwargs = {"label_selector": self.node_selector} if self.node_selector else {}
        nodes = self._request("list nodes", self.core.list_node, **node_kwargs)
        live = self._request("list pods", self.core.list_pod_for_all_namespaces,
                             field_selector=LIVE_POD_SELECTOR)  # fmt: skip
        jobs = self._vc("list Volcano jobs", "list")
        mine = self._request("list portal pods", self.core.list_namespaced_pod, self.namespace,
                             label_selector=volcano.LABEL_RUN_REF)  # fmt: skip
        now = self.clock()
        gpu_nodes = {
            _name(n): n
            for n in nodes.get("items") or []
            if _count(((n.get("status") or {}).get("capacity") or {}).get(GPU)) > 0
        }
        runs = {_name(j): j for j in jobs.get("items") or []}
        run_pods: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for p in mine.get("items") or []:
            run_pods[_labels(p).get(volcano.LABEL_RUN_REF, "")].append(p)
        view = _View(now=now, nodes=gpu_nodes, free={}, runs=runs, run_pods=dict(run_pods))
        self._account(view, live.get("items") or [])
        self._view = view
        return view

    def _placement(self, job: Mapping[str, Any]) -> tuple[Slot, ...] | None:
        if parse_run_ref(_name(job)) is None:
            return None
        return volcano.decode_placement(_annotations(job).get(volcano.ANN_PLACEMENT))

    def _account(self, view: _View, live_pods: list[dict[str, Any]]) -> None:
        """Free GPU indices per node (see the module docstring)."""
        usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        holding: set[str] = set()
        for p in live_pods:
            node = (p.get("spec") or {}).get("nodeName")
            meta = p.get("metadata") or {}
            own_ns = meta.get("namespace") == self.namespace
            run = _labels(p).get(volcano.LABEL_RUN_REF) if own_ns else None
            if run and run in view.runs:
                holding.add(run)
            gpus = pod_gpus(p)
            if not node or node not in view.nodes or not gpus:
                continue
            vc_job = _labels(p).get("volcano.sh/job-name") if own_ns else None
            owner = run or (
                f"job:{vc_job}" if vc_job else f"pod:{meta.get('namespace')}/{_name(p)}"
            )
            usage[node][owner] += gpus
        claims: dict[str, dict[str, tuple[int, ...]]] = defaultdict(dict)
        for name, job in view.runs.items():
            phase = ((job.get("status") or {}).get("state") or {}).get("phase", "Pending")
            placement = self._placement(job)
            if placement is None or (phase in FINAL_PHASES and name not in holding):
                continue
            for slot in placement:
                if slot.node in view.nodes:
                    claims[slot.node][name] = slot.gpus
        for node_name, node in view.nodes.items():
            status = node.get("status") or {}
            total = _count((status.get("capacity") or {}).get(GPU))
            healthy = _count((status.get("allocatable") or {}).get(GPU))
            held = {g for gpus in claims[node_name].values() for g in gpus if 0 <= g < total}
            free = [g for g in range(total) if g not in held]
            # GPUs held without portal indices (foreign pods, the extra GPUs of an
            # exclusive run) and unhealthy GPUs take the highest indices the portal does
            # not hold, owner by owner in name order so the attribution is stable.
            unknown: list[tuple[str, int]] = []
            for owner, gpus in sorted(usage[node_name].items()):
                claimed = len(claims[node_name].get(owner, ()))
                extra = gpus - claimed if owner in claims[node_name] else gpus
                if extra > 0:
                    unknown.append((owner, extra))
            taken = sum(n for _, n in unknown) + max(0, total - healthy)
            keep = max(0, len(free) - taken)
            top = free[keep:]
            view.free[node_name] = free[:keep]
            for owner, n in unknown:
                if owner.startswith("job:") and top:
                    view.foreign.setdefault(owner[4:], []).append(Slot(node_name, tuple(top[:n])))
                top = top[n:]

    def observe(self) -> Observation:
        view = self._refresh()
        nodes = tuple(self._observed_node(n, view) for _, n in sorted(view.nodes.items()))
        jobs = []
        for name, job in sorted(view.runs.items()):
            o = self._observed_job(name, job, view)
            if o is not None:
                jobs.append(o)
        return Observation(now=view.now, nodes=nodes, jobs=tuple(jobs))

    def _observed_node(self, node: Mapping[str, Any], view: _View) -> ObservedNode:
        name = _name(node)
        labels = _labels(node)
        status = node.get("status") or {}
        capacity = status.get("capacity") or {}
        total = _count(capacity.get(GPU))
        rdma_res = self.job_settings.rdma_resource
        override = labels.get(self.labels.rdma_override, "").lower()
        if override in ("true", "false"):
            rdma = override == "true"
        else:
            rdma = labels.get(self.labels.rdma, "").lower() == "true" or bool(
                rdma_res and _count(capacity.get(rdma_res)) > 0
            )
        memory_mib = _count(labels.get(self.labels.gpu_memory))
        health, detail = self._health(status, total, rdma_res)
        return ObservedNode(
            name=name,
            rack=(labels.get(self.labels.rack) or DEFAULT_RACK)[:DB_TEXT],
            block=(labels.get(self.labels.block) or DEFAULT_BLOCK)[:DB_TEXT],
            gpu_model=normalize_gpu_model(labels.get(self.labels.gpu_model))
            or self.default_gpu_model,
            gpu_memory_gb=round(memory_mib / 1024) if memory_mib else 0,
            gpus_total=total,
            rdma=rdma,
            inference=labels.get(self.labels.inference, "").lower() == "true",
            health=health,
            health_detail=detail[:300],
            cordoned=bool((node.get("spec") or {}).get("unschedulable")),
            free_gpus=tuple(view.free.get(name, ())),
        )  # fmt: skip

    @staticmethod
    def _health(status: Mapping[str, Any], total: int, rdma_res: str | None) -> tuple[str, str]:
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        ready = conditions.get("Ready")
        if ready is None or ready.get("status") != "True":
            if ready is None:
                return HEALTH_DOWN, "kubelet: no Ready condition reported"
            why = ": ".join(x for x in (ready.get("reason"), ready.get("message")) if x)
            return HEALTH_DOWN, f"kubelet: Ready={ready.get('status')}" + (
                f" ({why})" if why else ""
            )
        network = conditions.get("NetworkUnavailable")
        if network is not None and network.get("status") == "True":
            why = network.get("message") or network.get("reason") or ""
            return HEALTH_DOWN, "node network unavailable" + (f" ({why})" if why else "")
        healthy = _count((status.get("allocatable") or {}).get(GPU))
        if healthy < total:
            return HEALTH_GPU_FAILURE, (
                f"{total - healthy} of {total} GPUs reported unhealthy by the device plugin "
                "(allocatable < capacity)"
            )
        if rdma_res:
            cap = _count((status.get("capacity") or {}).get(rdma_res))
            alloc = _count((status.get("allocatable") or {}).get(rdma_res))
            if cap > 0 and alloc < cap:
                return HEALTH_RDMA_DEGRADED, f"{rdma_res}: {alloc} of {cap} allocatable"
        return HEALTH_OK, ""

    def _observed_job(self, name: str, job: Mapping[str, Any], view: _View) -> ObservedJob | None:
        parsed = parse_run_ref(name)
        status = job.get("status") or {}
        state = status.get("state") or {}
        phase = state.get("phase") or "Pending"
        if parsed is None:  # foreign work: shown only while it holds GPUs
            if name not in view.foreign:
                return None
            return ObservedJob(ref=name, job_id=None, state=RUNNING,
                               placement=tuple(view.foreign.get(name, ())))  # fmt: skip
        ann = _annotations(job)
        placement = self._placement(job) or ()
        base = max(0.0, _float(ann.get(volcano.ANN_PROGRESS)) or 0.0)
        every = _float(ann.get(volcano.ANN_CHECKPOINT_INTERVAL)) or None
        deadline = _float(ann.get(volcano.ANN_STOP_DEADLINE))
        killed = _float(ann.get(volcano.ANN_KILLED_AT))
        requested = deadline is not None or killed is not None
        start = self._started_at(job, view.run_pods.get(name, []))
        end = _ts(state.get("lastTransitionTime")) if phase in FINAL_PHASES else None
        now = view.now

        def ran(until: float) -> float:
            return max(0.0, until - start) if start is not None else 0.0

        def checkpointed(until: float) -> tuple[float, float | None]:
            if not every or start is None:
                return base, None
            n = math.floor(ran(until) / every)
            if n < 1:
                return base, None
            return base + n * every, start + n * every

        def run(state_: str, progress: float, ckpt: float | None, reason: str = "") -> ObservedJob:
            ended = end if state_ in ENDED else None  # the final phase's transition time
            return ObservedJob(ref=name, job_id=parsed[0], state=state_, placement=placement,
                               progress_s=progress, last_checkpoint_at=ckpt,
                               end_reason=reason, ended_at=ended)  # fmt: skip

        if phase not in FINAL_PHASES:
            progress, ckpt = base + ran(now), checkpointed(now)[1]
            if killed is not None:
                return run(STOPPING, progress, ckpt)
            if deadline is not None:
                return run(STOPPING if now < deadline else RUNNING, progress, ckpt)
            if phase in TEARDOWN_PHASES:
                return run(STOPPING, progress, ckpt)
            return run(RUNNING, progress, ckpt)
        end = end if end is not None else now
        cold, cold_at = checkpointed(end)
        if requested and start is None:
            return run(STOPPED, base, None, "stopped before it started")
        if killed is not None:
            return run(STOPPED, cold, cold_at, "killed")
        if deadline is not None:
            if phase == "Completed" or end <= deadline + CHECKPOINT_SLACK_S:
                return run(STOPPED, base + ran(end), end, "checkpoint")
            return run(STOPPED, cold, cold_at,
                       "stopped without a checkpoint (the grace period ran out)")  # fmt: skip
        if phase == "Completed":
            return run(SUCCEEDED, base + ran(end), cold_at)
        return run(FAILED, cold, cold_at, self._failure(phase, state, view.run_pods.get(name, [])))

    @staticmethod
    def _started_at(job: Mapping[str, Any], pods: list[dict[str, Any]]) -> float | None:
        """When the gang started: the Job's first ``Running`` condition (Volcano appends one
        per phase change), else (no conditions recorded) its pods' earliest start."""
        status = job.get("status") or {}
        for c in status.get("conditions") or []:
            if c.get("status") == "Running" and _ts(c.get("lastTransitionTime")) is not None:
                return _ts(c.get("lastTransitionTime"))
        state = status.get("state") or {}
        if state.get("phase") == "Running" and _ts(state.get("lastTransitionTime")):
            return _ts(state.get("lastTransitionTime"))
        if state.get("phase", "Pending") == "Pending":
            return None  # pods may run, but the gang has not started
        starts = [_ts((p.get("status") or {}).get("startTime")) for p in pods]
        started = [s for s in starts if s is not None]
        return min(started) if started else None

    @staticmethod
    def _failure(phase: str, state: Mapping[str, Any], pods: list[dict[str, Any]]) -> str:
        for p in sorted(pods, key=_name):
            st = p.get("status") or {}
            if st.get("phase") != "Failed":
                continue
            where = f"pod {_name(p)}" + (
                f" on {(p.get('spec') or {}).get('nodeName')}"
                if (p.get("spec") or {}).get("nodeName")
                else ""
            )
            for cs in st.get("containerStatuses") or []:
                term = (cs.get("state") or {}).get("terminated")
                if term:
                    why = term.get("reason") or "Error"
                    return f"{where} failed: exit code {term.get('exitCode')} ({why})"
            if st.get("reason") or st.get("message"):
                return f"{where} failed: " + ": ".join(
                    x for x in (st.get("reason"), st.get("message")) if x
                )
            return f"{where} failed"
        why = ": ".join(x for x in (state.get("reason"), state.get("message")) if x)
        words = {
            "Terminated": "Volcano terminated the gang (a pod was evicted, failed or deleted "
            "outside the portal)",
            "Aborted": "aborted outside the portal (Volcano command)",
            "Failed": "Volcano reports the job failed",
        }[phase]
        return words + (f": {why}" if why else "")

    # -- launch -------------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> None:
        """Create the run's Volcano Job; nothing if the same run is already there."""
        view = self._view or self._refresh()
        launch_ref(request)
        existing = view.runs.get(request.ref)
        if existing is not None and self._same_live_run(existing, request):
            return
        self._validate(view, request)
        node_gpus = None
        if request.exclusive_node:
            node_gpus = {
                s.node: _count(((view.nodes[s.node].get("status") or {}).get("allocatable") or {})
                               .get(GPU))
                for s in request.placement
            }  # fmt: skip
        try:
            manifest = volcano.build_job(request, self.job_settings, node_gpus)
            volcano.check(volcano.validate_job(manifest))
        except volcano.ManifestError as err:
            raise PermanentBackendError(
                f"invalid Volcano job: {err}", code="invalid_manifest"
            ) from err
        try:
            created = self._vc(
                f"create {request.ref}",
                "create",
                manifest,
                field_validation="Strict",
                _headers={"Content-Type": JSON},
            )
        except TransientBackendError as err:
            if err.code != "conflict":
                raise
            created = self._existing(request)
        view.runs[request.ref] = created or manifest
        take_gpus(view.free, request)

    def _same_live_run(self, job: Mapping[str, Any], request: LaunchRequest) -> bool:
        phase = ((job.get("status") or {}).get("state") or {}).get("phase", "Pending")
        ann = _annotations(job)
        return (
            phase not in FINAL_PHASES
            and ann.get(volcano.ANN_STOP_DEADLINE) is None
            and ann.get(volcano.ANN_KILLED_AT) is None
            and self._placement(job) == tuple(request.placement)
        )

    def _existing(self, request: LaunchRequest) -> dict[str, Any]:
        """A Job named ``request.ref`` already exists (409): adopt it if it is this very run."""
        job = self._vc(f"read {request.ref}", "get", request.ref)
        if self._same_live_run(job, request):
            return job
        phase = ((job.get("status") or {}).get("state") or {}).get("phase", "Pending")
        if phase in FINAL_PHASES:
            # A run of this name that ended before the portal recorded it (a lost commit):
            # remove it so that the next cycle can launch this attempt for real.
            self._vc(f"delete stale {request.ref}", "delete", request.ref,
                     propagation_policy="Background")  # fmt: skip
            raise TransientBackendError(
                f"{request.ref} already existed and had ended ({phase}); removed it, "
                "launch again next cycle",
                code="stale_run",
            )
        where = self._placement(job)
        raise PermanentBackendError(
            f"{request.ref} already exists ({phase}) on "
            f"{volcano.encode_placement(where) if where else 'unknown GPUs'}",
            code="duplicate_job",
        )

    def _validate(self, view: _View, request: LaunchRequest) -> None:
        """Refuse what the cluster could not run exactly as asked (by the last observation)."""
        capacity = {}
        for name in {s.node for s in request.placement} & view.nodes.keys():
            node = view.nodes[name]
            cordoned = (node.get("spec") or {}).get("unschedulable")
            capacity[name] = NodeCapacity(
                gpus_total=_count(((node.get("status") or {}).get("capacity") or {}).get(GPU)),
                free_gpus=view.free.get(name, []),
                refusal=(
                    PermanentBackendError(f"node {name} is cordoned", code="node_cordoned")
                    if cordoned else None
                ),
            )  # fmt: skip
        selected = f" or not selected by {self.node_selector})" if self.node_selector else ")"
        check_placement(request, capacity, unknown_hint=f" (no {GPU} capacity{selected}")

    # -- stop, kill -----------------------------------------------------------------------------
    def _job(self, ref: str) -> dict[str, Any] | None:
        try:
            return self._vc(f"read {ref}", "get", ref)
        except PermanentBackendError as err:
            if err.code == "not_found":
                return None
            raise

    def _annotate(self, ref: str, annotations: Mapping[str, str]) -> None:
        self._vc(f"annotate {ref}", "patch", ref, volcano.job_annotation_patch(annotations))
        if self._view is not None and ref in self._view.runs:
            job = self._view.runs[ref]
            meta = job.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}

    def _delete_pods(self, job: Mapping[str, Any], grace: int, reason: str) -> None:
        """Delete the run's unfinished pods with ``grace`` seconds; no pods: a Volcano command."""
        ref = _name(job)
        pods = self._request(f"list pods of {ref}", self.core.list_namespaced_pod, self.namespace,
                             label_selector=f"{volcano.LABEL_RUN_REF}={ref}")  # fmt: skip
        items = pods.get("items") or []
        if not items:
            command = volcano.build_terminate_command(job, reason)
            volcano.check(volcano.validate_command(command))
            self._request(f"terminate {ref}", self.custom.create_namespaced_custom_object,
                          volcano.BUS_GROUP, volcano.BUS_VERSION, self.namespace,
                          volcano.COMMANDS, command, _headers={"Content-Type": JSON})  # fmt: skip
            return
        for pod in sorted(items, key=_name):
            if (pod.get("status") or {}).get("phase") not in LIVE_POD_PHASES:
                continue
            try:
                self._request(f"delete pod {_name(pod)}", self.core.delete_namespaced_pod,
                              _name(pod), self.namespace, grace_period_seconds=grace)  # fmt: skip
            except PermanentBackendError as err:
                if err.code != "not_found":  # already gone: fine
                    raise

    def checkpoint_and_stop(self, ref: str, grace_s: float) -> None:
        """SIGTERM now, SIGKILL at the deadline: delete the run's pods with the grace period.

        The first deadline is kept when asked again (the pods are deleted again with the
        grace that remains, which never lengthens it). An ended run: nothing to do.
        """
        if not (0 <= grace_s < math.inf):
            raise PermanentBackendError("grace_s must be finite and >= 0", code="invalid_argument")
        job = self._job(ref)
        if job is None:
            raise PermanentBackendError(f"unknown run {ref}", code="unknown_job")
        phase = ((job.get("status") or {}).get("state") or {}).get("phase", "Pending")
        ann = _annotations(job)
        if phase in FINAL_PHASES or ann.get(volcano.ANN_KILLED_AT) is not None:
            return
        now = self.clock()
        deadline = _float(ann.get(volcano.ANN_STOP_DEADLINE))
        if deadline is None:
            deadline = now + grace_s
            self._annotate(ref, {volcano.ANN_STOP_DEADLINE: f"{deadline:.3f}"})
        grace = max(1, math.ceil(deadline - now))
        self._delete_pods(job, grace, f"the portal stops {ref} (checkpoint, grace {grace} s)")

    def kill(self, ref: str) -> None:
        """Stop the run now (no checkpoint). Unknown or ended runs: nothing to do."""
        job = self._job(ref)
        if job is None:
            return
        phase = ((job.get("status") or {}).get("state") or {}).get("phase", "Pending")
        if phase in FINAL_PHASES:
            return
        if _annotations(job).get(volcano.ANN_KILLED_AT) is None:
            self._annotate(ref, {volcano.ANN_KILLED_AT: f"{self.clock():.3f}"})
        self._delete_pods(job, KILL_GRACE_S, f"the portal kills {ref}")

    # -- output -------------------------------------------------------------------------------
    def read_output(self, ref: str, max_bytes: int, *, checkpoint_path: str = "") -> OutputAnswer:
        """The end of the log of the run's first pod (rank 0, task ``node0``), container
        ``trainer``: ``GET .../pods/<pod>/log?tailLines=N&limitBytes=M``.

        The log API has no byte tail: the last ``tailLines`` (enough for ``max_bytes`` of
        short lines), cut to the last ``max_bytes`` here. ``limitBytes`` bounds what a pod
        of long lines sends; it cuts the *end* off, so an answer that reaches it is asked
        again for fewer lines (a single line longer than the bound shows its beginning). Kubernetes keeps a pod's log only while the
        pod exists: a run whose pods were deleted (stopped, preempted, or its Job removed
        after its TTL) has none.
        """
        pods = self._request(f"list pods of {ref}", self.core.list_namespaced_pod,
                             self.namespace, label_selector=f"{volcano.LABEL_RUN_REF}={ref}")  # fmt: skip
        items = sorted(pods.get("items") or [], key=_name)
        if not items:
            return NoOutput(
                "the run's pods are gone (deleted when it stopped, or with its Volcano Job): "
                "Kubernetes keeps a pod's log only while the pod exists"
            )
        pod = _name(items[0])
        lines = max(LOG_MIN_LINES, max_bytes // LOG_BYTES_PER_LINE)
        while True:
            try:
                data = self._raw_request(
                    f"read the log of {pod}", self.core.read_namespaced_pod_log, pod,
                    self.namespace, container=volcano.CONTAINER_NAME, tail_lines=lines,
                    limit_bytes=LOG_LIMIT_BYTES,
                )  # fmt: skip
            except PermanentBackendError as err:  # e.g. 400: the container has not started
                return NoOutput(f"no log of pod {pod} yet: {err}")
            if len(data) < LOG_LIMIT_BYTES or lines == 1:
                break
            lines = max(1, lines // 8)  # cut at the limit, so not the end: fewer, later lines
        text, cut = tail_bytes(data, max_bytes)
        truncated = cut or data.count(b"\n") >= lines
        source = f"pod {self.namespace}/{pod}, container {volcano.CONTAINER_NAME}"
        return OutputTail(data=text, truncated=truncated, source=source)

    # -- nodes -------------------------------------------------------------------------------------
    def _patch_node(self, node: str, unschedulable: bool, reason: str = "") -> None:
        patch = volcano.node_patch(unschedulable, reason)
        volcano.check(volcano.validate_node_patch(patch))
        try:
            self._request(f"patch node {node}", self.core.patch_node, node, patch)
        except PermanentBackendError as err:
            if err.code == "not_found":
                raise PermanentBackendError(f"unknown node {node}", code="unknown_node") from err
            raise
        if self._view is not None and node in self._view.nodes:
            self._view.nodes[node].setdefault("spec", {})["unschedulable"] = unschedulable

    def cordon(self, node: str, reason: str) -> None:
        """``spec.unschedulable: true`` (``kubectl cordon``): running pods stay, nothing new lands."""
        self._patch_node(node, True, (reason or "").strip() or "cordoned by the portal")

    def uncordon(self, node: str) -> None:
        """``spec.unschedulable: false`` (``kubectl uncordon``)."""
        self._patch_node(node, False)

    def clean_residual(self, node: str) -> int:
        """Stale GPU processes are not visible through the Kubernetes API: nothing to clean (0).

        The kubelet kills a deleted pod's containers itself; a GPU the device plugin
        finds unusable shows as ``gpu_failure`` (allocatable below capacity).
        """
        return 0

    def close(self) -> None:
        self._view = None
        if self._owns_client:
            self.api_client.close()
