"""Slurm as a backend: the portal decides, Slurm executes what it is told.

Every run the portal starts is one batch job named after its run ref
(``portal-<job>-<attempt>``), pinned with ``--nodelist`` to exactly the nodes
the engine chose, ``-N <nodes> --gres=gpu:<per node>``, ``--no-requeue`` (the
portal, not Slurm, decides where a failed run goes next) and
``--signal=B:USR1@<grace>``. Cluster state is read with ``sinfo --json`` and
``squeue --json`` through :mod:`scheduling.backends.slurm_cli`; nothing is kept
between cycles except what Slurm itself stores, so a portal restart loses
nothing. The run's bookkeeping lives in the job's ``--comment``::

    <portal job id>;progress=<s>;every=<s>[;stop=<deadline epoch>][;kill=<epoch>]

``progress`` is the training progress the run started from and ``every`` the
checkpoint interval; ``stop``/``kill`` are written (``scontrol update``) just
before the portal signals or cancels the run, so that how a run ended can be
told apart afterwards: a batch script that exits 0 after the portal's USR1 is a
*stopped* run, one that exits 0 on its own *succeeded*.

State mapping (``docs/backend-slurm.md`` has the full table):

- PENDING (never started) -> ``running`` with the GPUs Slurm will give it
  (lowest free indices on each ``--nodelist`` node, in job-id order): the
  portal pinned it, so it is starting, and its GPUs must not be handed out again.
- RUNNING/COMPLETING/... -> ``running``; ``stopping`` between a checkpoint
  request and its deadline (after the deadline it reads ``running`` again, so
  the loop kills it).
- COMPLETED -> ``succeeded``, or ``stopped`` after a checkpoint request (or when it
  exited on Slurm's own time-limit warning).
- CANCELLED -> ``stopped`` when the portal stopped or killed it, else
  ``failed`` ("cancelled outside the portal").
- FAILED/TIMEOUT/NODE_FAIL/OUT_OF_MEMORY/BOOT_FAIL/DEADLINE/PREEMPTED -> ``failed``
  (FAILED/TIMEOUT after a checkpoint request -> ``stopped`` without a checkpoint).
- Requeued by Slurm (pending again, ``restart_cnt`` > 0) -> ``failed``: the run
  the portal launched is over; the portal retries the job itself.

Slurm knows nothing of training progress: progress is the start progress plus
the elapsed run time, and the last checkpoint is estimated from the job's
checkpoint interval (a stop after USR1 counts as a checkpoint at the end time).
Slurm cannot see stale GPU processes through its CLI: ``clean_residual`` is 0.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import math
import os
import re
import shlex
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Self

from scheduling.backends.base import (
    DEFAULT_BLOCK,
    DEFAULT_GPU_MODEL,
    DEFAULT_GRACE_S,
    DEFAULT_RACK,
    ENDED,
    FAILED,
    HEALTH_DOWN,
    HEALTH_OK,
    RUNNING,
    STOPPED,
    STOPPING,
    SUCCEEDED,
    ClusterBackend,
    LaunchRequest,
    NoOutput,
    Observation,
    ObservedJob,
    ObservedNode,
    OutputAnswer,
    PermanentBackendError,
    TransientBackendError,
    parse_run_ref,
)
from scheduling.backends.config import BackendConfig, BackendContext
from scheduling.backends.output_files import NOT_KEPT, OutputFiles
from scheduling.backends.placement import NodeCapacity, check_placement, launch_ref, take_gpus
from scheduling.backends.slurm_cli import (
    SlurmCLI,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmPermanentError,
    SlurmTransientError,
    parse_jobs,
)
from scheduling.engine.types import Slot

_STDOUT = re.compile(r"(?:^|\s)StdOut=(.*?)(?=\s+[A-Za-z/:]+=|\s*$)")
MAX_SIGNAL_S = 65535  # sbatch --signal=<sig>@<time>: at most 65535 s
PORTAL_REASON_PREFIX = "portal: "
RESUME_WAIT_S = 5.0

# Job states in which a job holds its GPUs.
HOLDING_STATES = frozenset(
    {"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING",
     "STOPPED"}
)  # fmt: skip
REQUEUED_STATES = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
FAILURE_WORDS = {
    "FAILED": "the job script failed",
    "TIMEOUT": "Slurm's time limit was reached",
    "NODE_FAIL": "node failure (Slurm NODE_FAIL)",
    "OUT_OF_MEMORY": "out of memory",
    "BOOT_FAIL": "node boot failure",
    "DEADLINE": "Slurm deadline passed",
    "PREEMPTED": "preempted by Slurm itself",
    "REVOKED": "revoked by Slurm",
    "SPECIAL_EXIT": "special exit requested",
}

_MODEL_FEATURE = re.compile(
    r"^(?:gpu[-_:])?(h100|h200|h800|h20|gh200|b100|b200|gb200|a100|a800|a10g?|a30|a40|a6000|"
    r"l40s?|l4|v100|t4|p100|mi210|mi250x?|mi300x?|mi325x)(?:[-_].*)?$",
    re.IGNORECASE,
)
_MEMORY_FEATURE = re.compile(r"^(?:gpu[-_]?)?(\d{1,4})\s*g(?:b|ib)?$", re.IGNORECASE)
_RDMA_FEATURES = frozenset({"rdma", "infiniband", "ib", "roce", "efa"})

# The default job script: a stand-in for training that honours the portal's
# contract (trap USR1, checkpoint, exit 0). PORTAL_REMAINING_S (from a job's
# sim_duration_minutes) makes it finish on its own; empty, it runs until stopped.
DEMO_JOB_SCRIPT = r"""#!/bin/bash
# Portal job script (stand-in for training). Contract with the portal:
#   on SIGUSR1 write a checkpoint and exit 0 before PORTAL_GRACE_S seconds pass;
#   resume from the checkpoint in PORTAL_CHECKPOINT_PATH (PORTAL_PROGRESS_S says how far).
checkpoint() {
  echo "checkpoint: $PORTAL_RUN_REF at $(date +%s)"
  case "$PORTAL_CHECKPOINT_PATH" in
    /*) mkdir -p "$PORTAL_CHECKPOINT_PATH" &&
        echo "$PORTAL_RUN_REF $(date +%s)" > "$PORTAL_CHECKPOINT_PATH/checkpoint-$PORTAL_RUN_REF" ;;
  esac
  exit 0
}
trap checkpoint USR1
echo "ready: $PORTAL_RUN_REF on $SLURM_JOB_NODELIST GPUs ${CUDA_VISIBLE_DEVICES:-?} from ${PORTAL_PROGRESS_S}s"
start=$SECONDS
while [ -z "$PORTAL_REMAINING_S" ] || [ $((SECONDS - start)) -lt "$PORTAL_REMAINING_S" ]; do
  sleep 1 &
  wait $!   # interruptible: the trap runs as soon as USR1 arrives
done
echo "done: $PORTAL_RUN_REF"
"""


# ---------------------------------------------------------------------------------------
# The run's bookkeeping in --comment
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunComment:
    """What the portal stores in a run's ``--comment`` (see the module docstring)."""

    job_id: int | None = None
    progress_s: float = 0.0
    every_s: float | None = None
    stop_deadline: float | None = None
    killed_at: float | None = None

    @property
    def stop_requested(self) -> bool:
        return self.stop_deadline is not None or self.killed_at is not None

    def render(self) -> str:
        parts = [str(self.job_id) if self.job_id is not None else ""]
        parts.append(f"progress={_num(self.progress_s)}")
        if self.every_s:
            parts.append(f"every={_num(self.every_s)}")
        if self.stop_deadline is not None:
            parts.append(f"stop={_num(self.stop_deadline)}")
        if self.killed_at is not None:
            parts.append(f"kill={_num(self.killed_at)}")
        return ";".join(parts)

    @classmethod
    def parse(cls, text: str | None) -> RunComment:
        if not text:
            return cls()
        head, *fields = text.split(";")
        values: dict[str, float] = {}
        for item in fields:
            key, _, raw = item.partition("=")
            try:
                value = float(raw)
            except ValueError:
                continue
            if math.isfinite(value):
                values[key.strip()] = value
        head = head.strip()
        return cls(
            job_id=int(head) if head.isdigit() else None,
            progress_s=max(0.0, values.get("progress", 0.0)),
            every_s=values.get("every") or None,
            stop_deadline=values.get("stop"),
            killed_at=values.get("kill"),
        )


def _minutes(value: Any) -> float | None:
    """A Slurm time limit in minutes: an int, or ``{"set", "infinite", "number"}`` (newer)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


# ---------------------------------------------------------------------------------------
# Topology: racks, blocks, RDMA and GPU model from a file or from node features
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeTopology:
    """Where a node stands and what GPUs it has, beyond what Slurm reports. The field
    names are ObservedNode's: the observation takes them as they are."""

    rack: str
    block: str
    rdma: bool
    gpu_model: str
    gpu_memory_gb: int


TOPOLOGY_KEYS = frozenset({"rack", "block", "rdma", "gpu_model", "gpu_memory_gb"})


def load_topology(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Read a topology file: JSON ``{node: {rack, block, rdma, gpu_model, gpu_memory_gb}}``.

    Every key is optional (missing ones come from node features); the entry ``"*"``
    gives defaults for every node. Raises PermanentBackendError when malformed.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise PermanentBackendError(
            f"SLURM_TOPOLOGY_FILE {path}: {err}", code="bad_topology"
        ) from err
    if isinstance(data, dict) and isinstance(data.get("nodes"), dict):
        data = data["nodes"]
    if not isinstance(data, dict):
        raise PermanentBackendError(
            f"SLURM_TOPOLOGY_FILE {path}: expected an object of node -> attributes",
            code="bad_topology",
        )
    for node, attrs in data.items():
        if not isinstance(attrs, dict) or set(attrs) - TOPOLOGY_KEYS:
            raise PermanentBackendError(
                f"SLURM_TOPOLOGY_FILE {path}: entry {node!r} must be an object with keys "
                f"among {', '.join(sorted(TOPOLOGY_KEYS))}",
                code="bad_topology",
            )
    return data


def node_topology(
    node: SlurmNode,
    table: Mapping[str, Mapping[str, Any]] | None = None,
    default_gpu_model: str = DEFAULT_GPU_MODEL,
    default_gpu_memory_gb: int = 0,
) -> NodeTopology:
    """Topology of one node: the topology file first, then features, then defaults.

    Features: ``rack*`` -> rack, ``block*`` -> block (else one block for all),
    ``rdma``/``infiniband``/``ib``/``roce``/``efa`` -> RDMA, a GPU model name
    (``h100``, ``a100`` ...) -> model, ``80gb`` -> memory.
    """
    features = [f.strip() for f in node.features if f.strip()]
    rack = next((f for f in features if f.lower().startswith("rack")), DEFAULT_RACK)
    block = next((f for f in features if f.lower().startswith("block")), DEFAULT_BLOCK)
    rdma = any(f.lower() in _RDMA_FEATURES for f in features)
    model = default_gpu_model
    memory = default_gpu_memory_gb
    for f in features:
        if m := _MODEL_FEATURE.match(f):
            model = m.group(1).upper()
        elif m := _MEMORY_FEATURE.match(f):
            memory = int(m.group(1))
    values: dict[str, Any] = {
        "rack": rack, "block": block, "rdma": rdma, "gpu_model": model, "gpu_memory_gb": memory,
    }  # fmt: skip
    if table:
        values.update(table.get("*", {}))
        values.update(table.get(node.name, {}))
    return NodeTopology(
        rack=str(values["rack"]),
        block=str(values["block"]),
        rdma=bool(values["rdma"]),
        gpu_model=str(values["gpu_model"]),
        gpu_memory_gb=int(values["gpu_memory_gb"]),
    )


@dataclass
class _View:
    """What Slurm reported at the last ``observe`` (plus this backend's own changes since)."""

    now: float
    nodes: dict[str, SlurmNode]
    free: dict[str, list[int]]  # node -> free GPU indices, ascending
    runs: dict[str, list[SlurmJob]]  # run ref -> Slurm jobs with that name, by job id
    predicted: dict[int, tuple[Slot, ...]]  # pending portal job -> GPUs Slurm will give it
    limits: dict[int, float] = field(default_factory=dict)  # Slurm job id -> time limit (s)


class SlurmBackend(ClusterBackend):
    """A real Slurm cluster behind the backend interface (one instance per cycle).

    Configuration (keyword arguments, else ``config``: the Django settings the factory
    passes, else the environment):
    ``SLURM_CONF``, ``SLURM_PARTITION``, ``SLURM_TOPOLOGY_FILE``, ``SLURM_JOB_SCRIPT``
    (path of the batch script; default: :data:`DEMO_JOB_SCRIPT`), ``SLURM_JOB_OUTPUT``
    (sbatch ``--output``, default ``/dev/null``), ``SLURM_WORKDIR`` (default ``/tmp``),
    ``SLURM_SBATCH_ARGS`` (extra sbatch arguments, shell-quoted), ``SLURM_TIMEOUT``
    (seconds per client call), ``SLURM_DEFAULT_GPU_MODEL``,
    ``SLURM_DEFAULT_GPU_MEMORY_GB`` and ``PREEMPTION_GRACE_SECONDS`` (the ``--signal``
    lead time).
    """

    name = "slurm"

    def __init__(
        self,
        *,
        cli: SlurmCLI | None = None,
        conf: str | None = None,
        partition: str | None = None,
        topology_file: str | None = None,
        job_script: str | None = None,
        job_output: str | None = None,
        workdir: str | None = None,
        sbatch_args: Sequence[str] | str | None = None,
        grace_s: float | None = None,
        timeout: float | None = None,
        default_gpu_model: str | None = None,
        default_gpu_memory_gb: int | None = None,
        clock: Callable[[], float] = time.time,
        config: BackendConfig | None = None,
    ) -> None:
        cfg = config or BackendConfig()
        self.partition = cfg.pick(partition, "SLURM_PARTITION")
        if cli is None:
            conf = cfg.pick(conf, "SLURM_CONF")
            cli = SlurmCLI(
                env={"SLURM_CONF": str(conf)} if conf else None,
                timeout=float(cfg.pick(timeout, "SLURM_TIMEOUT", 30.0)),
                partition=self.partition,
            )
        self.cli = cli
        topo_path = cfg.pick(topology_file, "SLURM_TOPOLOGY_FILE")
        self.topology = load_topology(topo_path) if topo_path else {}
        script_path = cfg.pick(job_script, "SLURM_JOB_SCRIPT")
        if script_path:
            try:
                self.job_script = Path(script_path).read_text()
            except OSError as err:
                raise PermanentBackendError(
                    f"SLURM_JOB_SCRIPT {script_path}: {err}", code="bad_job_script"
                ) from err
        else:
            self.job_script = DEMO_JOB_SCRIPT
        self.job_output = cfg.pick(job_output, "SLURM_JOB_OUTPUT", "/dev/null")
        self.workdir = cfg.pick(workdir, "SLURM_WORKDIR", "/tmp")  # noqa: S108 - exists everywhere
        extra = cfg.pick(sbatch_args, "SLURM_SBATCH_ARGS", "")
        self.sbatch_args = shlex.split(extra) if isinstance(extra, str) else list(extra)
        self.grace_s = float(cfg.pick(grace_s, "PREEMPTION_GRACE_SECONDS", DEFAULT_GRACE_S))
        self.default_gpu_model = cfg.pick(
            default_gpu_model, "SLURM_DEFAULT_GPU_MODEL", DEFAULT_GPU_MODEL
        )
        self.default_gpu_memory_gb = int(
            cfg.pick(default_gpu_memory_gb, "SLURM_DEFAULT_GPU_MEMORY_GB", 0)
        )
        self.clock = clock
        self._view_cache: _View | None = None

    @classmethod
    def open(cls, context: BackendContext) -> Self:
        return cls(config=context.config)

    # -- plumbing ---------------------------------------------------------------
    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a Slurm client call, turning its errors into backend errors."""
        try:
            return fn(*args, **kwargs)
        except SlurmTransientError as err:
            raise TransientBackendError(str(err), code="slurm_unavailable") from err
        except SlurmPermanentError as err:
            raise PermanentBackendError(str(err), code="slurm_refused") from err
        except ValueError as err:
            raise PermanentBackendError(str(err), code="invalid_argument") from err

    def _refresh(self) -> _View:
        nodes = self._call(self.cli.list_nodes)
        jobs, limits = self._list_jobs()
        now = self.clock()
        if self.partition:
            nodes = [n for n in nodes if self.partition in n.partitions]
        by_name = {n.name: n for n in nodes}
        used: dict[str, set[int]] = defaultdict(set)
        for j in jobs:
            if j.state in HOLDING_STATES:
                for node, idx in j.gpu_indices.items():
                    used[node].update(idx)
        free: dict[str, list[int]] = {}
        for n in nodes:
            taken = {g for g in used[n.name] if 0 <= g < n.gpus_total}
            f = [g for g in range(n.gpus_total) if g not in taken]
            # GPUs Slurm counts as used without saying which (no gres_detail): the
            # highest free ones, so the portal's lowest-first choices stay valid.
            unknown = n.gpus_used - len(taken)
            if unknown > 0:
                f = f[: max(0, len(f) - unknown)]
            if n.state == "allocated":  # every CPU taken (e.g. --exclusive): nothing fits
                f = []
            free[n.name] = f
        runs: dict[str, list[SlurmJob]] = defaultdict(list)
        for j in sorted(jobs, key=lambda j: j.job_id):
            runs[self._ref_of(j)].append(j)
        # Pinned portal runs Slurm has not started yet: it will give them the lowest
        # free GPUs of each requested node, in job-id order. Reserve those now.
        predicted: dict[int, tuple[Slot, ...]] = {}
        for j in sorted(jobs, key=lambda j: j.job_id):
            if not self._is_starting(j):
                continue
            slots = []
            for node in j.required_nodes:
                if node in free:
                    take = free[node][: j.gpus_per_node]
                    del free[node][: len(take)]
                    slots.append(Slot(node, tuple(take)))
            predicted[j.job_id] = tuple(slots)
        view = _View(now=now, nodes=by_name, free=free, runs=dict(runs), predicted=predicted,
                     limits=limits)  # fmt: skip
        self._view_cache = view
        return view

    def _view(self) -> _View:
        return self._view_cache or self._refresh()

    def _with_fresh_jobs(self) -> _View:
        """The view with jobs read again: a stop or kill acts on the run as it is now."""
        if self._view_cache is None:
            return self._refresh()
        view = self._view_cache
        jobs, view.limits = self._list_jobs()
        runs: dict[str, list[SlurmJob]] = defaultdict(list)
        for j in sorted(jobs, key=lambda j: j.job_id):
            runs[self._ref_of(j)].append(j)
        view.runs = dict(runs)
        return view

    def _list_jobs(self) -> tuple[list[SlurmJob], dict[int, float]]:
        """Every job slurmctld knows (``squeue --json`` ignores filters), and time limits."""
        out = self._call(self.cli.run, ["squeue", "--all", "--json"])
        jobs = self._call(parse_jobs, out)
        limits: dict[int, float] = {}
        for raw in json.loads(out).get("jobs") or ():
            minutes = _minutes(raw.get("time_limit")) if isinstance(raw, dict) else None
            if minutes:
                limits[int(raw.get("job_id") or 0)] = minutes * 60.0
        return jobs, limits

    @staticmethod
    def _ref_of(j: SlurmJob) -> str:
        return j.name if parse_run_ref(j.name) else f"{j.name}#{j.job_id}"

    @staticmethod
    def _is_starting(j: SlurmJob) -> bool:
        """A pinned portal run Slurm has not started yet (not one it requeued)."""
        return (
            j.state == "PENDING"
            and j.restart_count == 0
            and parse_run_ref(j.name) is not None
            and not RunComment.parse(j.comment).stop_requested
        )

    def _current(self, view: _View, ref: str) -> SlurmJob | None:
        """The Slurm job behind a run ref: the newest active one, else the newest."""
        runs = view.runs.get(ref)
        if not runs and "#" in ref:  # a foreign run: "<name>#<slurm job id>"
            _, _, sid = ref.rpartition("#")
            runs = [j for js in view.runs.values() for j in js if str(j.job_id) == sid]
        if not runs:
            return None
        active = [j for j in runs if j.is_active]
        return (active or runs)[-1]

    def _remember(self, view: _View, job: SlurmJob) -> None:
        ref = self._ref_of(job)
        view.runs[ref] = [j for j in view.runs.get(ref, []) if j.job_id != job.job_id] + [job]

    # -- observe ----------------------------------------------------------------
    def observe(self) -> Observation:
        view = self._refresh()
        nodes = tuple(self._observed_node(n, view) for n in view.nodes.values())
        jobs = []
        for ref in view.runs:
            current = self._current(view, ref)
            if current is None:
                continue
            o = self._observed_job(ref, current, view)
            if o is not None:
                jobs.append(o)
        return Observation(now=view.now, nodes=nodes, jobs=tuple(jobs))

    def _observed_node(self, n: SlurmNode, view: _View) -> ObservedNode:
        topo = node_topology(n, self.topology, self.default_gpu_model, self.default_gpu_memory_gb)
        # Down is Slurm's verdict (after SlurmdTimeout). "Not responding" alone is
        # not: Slurm also flags a node it just resumed, and every node after a
        # controller restart, until their slurmd answers. Such a node takes no new
        # work (no free GPUs) but is not isolated.
        down = n.down or n.state == "unknown"
        detail = ""
        if down or n.not_responding:
            what = "slurmd not responding" if n.not_responding else f"node {n.state}"
            reason = n.reason or ""
            own = reason.startswith(PORTAL_REASON_PREFIX)
            detail = f"Slurm: {what} ({n.raw_state})" + (
                f": {reason}" if reason and not own else ""
            )
        free = () if down or n.not_responding else tuple(view.free.get(n.name, ()))
        return ObservedNode(
            name=n.name,
            gpus_total=n.gpus_total,
            **asdict(topo),  # rack, block, RDMA, GPU model and memory: named as ObservedNode's
            inference=False,
            health=HEALTH_DOWN if down else HEALTH_OK,
            health_detail=detail[:300],
            cordoned=n.drain,
            free_gpus=free,
        )

    def _observed_job(self, ref: str, j: SlurmJob, view: _View) -> ObservedJob | None:
        parsed = parse_run_ref(j.name)
        now = view.now
        placement = tuple(Slot(node, tuple(g)) for node, g in j.gpu_indices.items() if g)
        if parsed is None:  # foreign work: shown only while it holds GPUs
            if j.state not in HOLDING_STATES:
                return None
            return ObservedJob(ref=ref, job_id=None, state=RUNNING, placement=placement,
                               progress_s=self._elapsed(j, now))  # fmt: skip
        c = RunComment.parse(j.comment)
        start = j.start_time.timestamp() if j.start_time else None
        end = j.end_time.timestamp() if j.end_time else now

        def ran(until: float) -> float:
            return max(0.0, until - start) if start is not None else 0.0

        def checkpointed(until: float) -> tuple[float, float | None]:
            """(progress, time) of the last periodic checkpoint estimated from the interval."""
            if not c.every_s or start is None:
                return c.progress_s, None
            n = math.floor(ran(until) / c.every_s)
            if n < 1:
                return c.progress_s, None
            return c.progress_s + n * c.every_s, start + n * c.every_s

        def job(state: str, progress: float, ckpt: float | None, reason: str = "",
                where: tuple[Slot, ...] = placement) -> ObservedJob:  # fmt: skip
            # Slurm's EndTime of a job still active is its time limit's, not an end
            ended = end if state in ENDED and j.end_time and not j.is_active else None
            return ObservedJob(ref=ref, job_id=parsed[0], state=state, placement=where,
                               progress_s=progress, last_checkpoint_at=ckpt,
                               end_reason=reason, ended_at=ended)  # fmt: skip

        state = j.state
        if j.restart_count > 0 and (j.is_active or state in REQUEUED_STATES):
            # Requeued by Slurm (an operator or a node failure), whether it waits or already
            # runs again: the portal decides where a run restarts, so this run has failed.
            return job(FAILED, c.progress_s, None,
                       f"requeued by Slurm ({j.reason or state}); the portal restarts it itself",
                       ())  # fmt: skip
        if state == "PENDING" or state in REQUEUED_STATES:
            if state in REQUEUED_STATES:
                return job(FAILED, c.progress_s, None,
                           f"requeued by Slurm ({j.reason or state}); the portal restarts it "
                           "itself", ())  # fmt: skip
            if c.stop_requested:  # cancelled before it started; Slurm is finishing that
                return job(STOPPING, c.progress_s, None, where=())
            return job(RUNNING, c.progress_s, None, where=view.predicted.get(j.job_id, ()))
        if state in HOLDING_STATES or j.is_active:
            progress, ckpt = c.progress_s + ran(now), checkpointed(now)[1]
            if (
                c.stop_deadline is not None
                and c.killed_at is None
                and now < c.stop_deadline
                and state != "COMPLETING"
            ):
                return job(STOPPING, progress, ckpt)
            if c.stop_requested and state == "COMPLETING":
                return job(STOPPING, progress, ckpt)
            return job(RUNNING, progress, ckpt)
        # Finished.
        cold, cold_at = checkpointed(end)
        if state == "COMPLETED":
            if c.stop_deadline is not None and c.killed_at is None:
                if start is None:
                    return job(STOPPED, c.progress_s, None, "stopped before it started")
                return job(STOPPED, c.progress_s + ran(end), end, "checkpoint")
            if c.killed_at is not None:
                return job(STOPPED, cold, cold_at, "killed")
            limit = view.limits.get(j.job_id)
            if limit is not None and start is not None and ran(end) >= limit - self.grace_s - 2:
                # Slurm's own warning (--signal=B:USR1@grace) before its time limit: the
                # script checkpointed and exited 0, but the training is not done.
                return job(STOPPED, c.progress_s + ran(end), end,
                           "Slurm's time limit: checkpointed on its warning signal")  # fmt: skip
            return job(SUCCEEDED, c.progress_s + ran(end), cold_at)
        if state == "CANCELLED":
            if start is None and c.stop_requested:
                return job(STOPPED, c.progress_s, None, "stopped before it started")
            if c.killed_at is not None:
                return job(STOPPED, cold, cold_at, "killed")
            if c.stop_deadline is not None:
                return job(STOPPED, cold, cold_at, "cancelled while checkpointing")
            return job(FAILED, cold, cold_at, "cancelled outside the portal (scancel)")
        if c.stop_requested and state in ("FAILED", "TIMEOUT"):
            code = f" (exit code {j.exit_code})" if j.exit_code else ""
            return job(STOPPED, cold, cold_at, f"stopped without a checkpoint{code}")
        words = FAILURE_WORDS.get(state, f"Slurm state {state}")
        if state == "FAILED" and j.exit_code:
            words = f"the job script exited with code {j.exit_code}"
        if state == "NODE_FAIL" and j.nodes:
            words = f"node failure on {', '.join(j.nodes)} (Slurm NODE_FAIL)"
        return job(FAILED, cold, cold_at, words)

    @staticmethod
    def _elapsed(j: SlurmJob, now: float) -> float:
        return max(0.0, now - j.start_time.timestamp()) if j.start_time else 0.0

    # -- launch -------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> None:
        """Submit the run pinned to its placement; nothing if it is already active.

        Slurm picks GPU indices itself (lowest free first); a placement that is not
        the lowest free GPUs of each node is refused (transient) rather than run on
        GPUs the portal does not expect.
        """
        view = self._view()
        parsed = launch_ref(request)
        nodes = [s.node for s in request.placement]
        existing = self._current(view, request.ref)
        if existing is not None and existing.is_active:
            have = existing.nodes or existing.required_nodes
            if sorted(have) == sorted(nodes):
                return
            raise PermanentBackendError(
                f"{request.ref} is already {existing.state.lower()} on {', '.join(have)}",
                code="duplicate_job",
            )
        per_node = self._validate(view, request)
        self._cancel_older_attempts(view, parsed)
        comment = RunComment(
            job_id=request.job_id,
            progress_s=max(0.0, request.progress_s),
            every_s=request.checkpoint_interval_s or None,
        ).render()
        remaining = ""
        if request.sim_duration_s:
            remaining = str(max(1, math.ceil(request.sim_duration_s - request.progress_s)))
        environment = {
            "PORTAL_JOB_ID": str(request.job_id),
            "PORTAL_RUN_REF": request.ref,
            "PORTAL_JOB_NAME": request.name,
            "PORTAL_PROGRESS_S": _num(max(0.0, request.progress_s)),
            "PORTAL_CHECKPOINT_PATH": request.checkpoint_path,
            "PORTAL_CHECKPOINT_INTERVAL_S": _num(request.checkpoint_interval_s),
            "PORTAL_GRACE_S": _num(self.grace_s),
            "PORTAL_REMAINING_S": remaining,
            **request.array_environment(),
        }
        extra = list(self.sbatch_args)
        if request.exclusive_node:
            extra.append("--exclusive")
        lead = min(MAX_SIGNAL_S, max(1, int(self.grace_s)))
        slurm_id = self._call(
            self.cli.submit,
            request.ref,
            nodes,
            per_node,
            len(nodes),
            self.job_script,
            comment,
            requeue=False,
            signal=f"B:USR1@{lead}",
            output=self.job_output,
            workdir=self.workdir,
            environment=environment,
            partition=self.partition,
            extra_args=extra,
        )
        take_gpus(view.free, request)  # keep this cycle's view true: the GPUs are taken
        pending = SlurmJob(
            job_id=slurm_id, name=request.ref, state="PENDING", reason=None, nodes=(),
            gpus_per_node=per_node, gpu_indices={}, comment=comment, start_time=None,
            node_count=len(nodes), required_nodes=tuple(nodes),
        )  # fmt: skip
        view.predicted[slurm_id] = tuple(request.placement)
        self._remember(view, pending)

    def _validate(self, view: _View, request: LaunchRequest) -> int:
        """Refuse placements Slurm could not run exactly as asked; returns GPUs per node.

        Beyond the shared check: ``--gres=gpu:N`` is per node, and Slurm gives each
        node's lowest free GPU indices itself.
        """
        check_placement(
            request,
            {name: self._capacity(view, name) for name in {s.node for s in request.placement}
             if name in view.nodes},
            unknown_hint=f" in partition {self.partition}" if self.partition else "",
        )  # fmt: skip
        counts = {len(s.gpus) for s in request.placement}
        if len(counts) != 1:
            raise PermanentBackendError(
                "Slurm's --gres=gpu:N is per node: every node of a run needs the same number "
                f"of GPUs, not {sorted(len(s.gpus) for s in request.placement)}",
                code="invalid_placement",
            )
        for slot in request.placement:
            expected = tuple(view.free.get(slot.node, [])[: len(slot.gpus)])
            if tuple(sorted(slot.gpus)) != expected:
                raise TransientBackendError(
                    f"Slurm assigns GPU indices itself (lowest free first): it would give "
                    f"{list(expected)} on {slot.node}, not {sorted(slot.gpus)}",
                    code="gpu_choice",
                )
        return counts.pop()

    @staticmethod
    def _capacity(view: _View, name: str) -> NodeCapacity:
        n = view.nodes[name]
        refusal = None
        if n.down:
            refusal = PermanentBackendError(f"node {name} is {n.raw_state}", code="node_unhealthy")
        elif n.not_responding:
            refusal = TransientBackendError(
                f"node {name}'s slurmd is not responding", code="node_not_responding"
            )
        elif n.drain:
            refusal = PermanentBackendError(
                f"node {name} is drained ({n.reason or 'no reason'})", code="node_cordoned"
            )
        return NodeCapacity(n.gpus_total, view.free.get(name, []), refusal)

    def _cancel_older_attempts(self, view: _View, parsed: tuple[int, int]) -> None:
        """A portal job has one run: earlier attempts still alive in Slurm are cancelled."""
        job_id, attempt = parsed
        for ref, runs in view.runs.items():
            p = parse_run_ref(ref)
            if p is None or p[0] != job_id or p[1] >= attempt:
                continue
            for j in runs:
                if j.is_active:
                    self._mark_and_cancel(view, j)

    # -- stop, kill -------------------------------------------------------------------
    def _mark(self, view: _View, j: SlurmJob, comment: RunComment) -> None:
        text = comment.render()
        self._call(self.cli.run, ["scontrol", "update", f"jobid={j.job_id}", f"comment={text}"])
        self._remember(view, replace(j, comment=text))

    def _mark_and_cancel(self, view: _View, j: SlurmJob) -> None:
        c = RunComment.parse(j.comment)
        if c.killed_at is None:
            try:
                self._mark(view, j, replace(c, killed_at=self.clock()))
            except PermanentBackendError:
                return  # it finished meanwhile: nothing to cancel
        self._call(self.cli.cancel, j.job_id)

    def checkpoint_and_stop(self, ref: str, grace_s: float) -> None:
        """Ask the run to checkpoint and stop: USR1 to the batch shell and its children.

        The deadline (now + ``grace_s``) is stored with the run; the first one is kept
        when asked again, and the signal is sent again (a lost signal is the loop's
        to retry). The run reads ``stopping`` until then and ``running`` after, so the
        loop kills it. A run that has not started yet is simply cancelled.
        """
        if not (0 <= grace_s < math.inf):
            raise PermanentBackendError("grace_s must be finite and >= 0", code="invalid_argument")
        view = self._with_fresh_jobs()
        j = self._current(view, ref)
        if j is None:
            raise PermanentBackendError(f"unknown run {ref}", code="unknown_job")
        if not j.is_active:
            return
        before = RunComment.parse(j.comment)
        c = before
        if c.stop_deadline is None:
            c = replace(c, stop_deadline=self.clock() + grace_s)
        if c != before:
            try:
                self._mark(view, j, c)
            except PermanentBackendError:
                if self._ended(j.job_id):
                    return
                raise
        if j.state == "PENDING":
            self._call(self.cli.cancel, j.job_id)
            return
        try:
            self._call(self.cli.signal, j.job_id, "USR1")
        except (PermanentBackendError, TransientBackendError):
            if self._ended(j.job_id):
                if c != before:  # it finished on its own before the signal
                    self._restore(view, j, before)
                return
            if c == before:
                # Asked before (its deadline is set, restored when that ask failed): the
                # run got the signal then and is exiting; Slurm may refuse a second one
                # ("Invalid job id specified") while it still lists the job.
                return
            self._restore(view, j, before)
            raise

    def _ended(self, slurm_id: int) -> bool:
        try:
            found = self.cli.get_job(slurm_id)
        except SlurmError:
            return False
        return found is None or not found.is_active

    def _restore(self, view: _View, j: SlurmJob, comment: RunComment) -> None:
        # Best effort: the job may be gone already.
        with contextlib.suppress(PermanentBackendError, TransientBackendError):
            self._mark(view, j, comment)

    def kill(self, ref: str) -> None:
        """Cancel the run now (no checkpoint). Unknown or ended runs: nothing to do."""
        view = self._with_fresh_jobs()
        runs = view.runs.get(ref)
        if not runs:
            current = self._current(view, ref)
            runs = [current] if current else []
        for j in runs:
            if j.is_active:
                self._mark_and_cancel(view, j)

    # -- nodes ----------------------------------------------------------------------
    def cordon(self, node: str, reason: str) -> None:
        """``scontrol update state=drain``: running jobs stay, nothing new starts."""
        text = (reason or "").strip() or "cordoned by the portal"
        if not text.startswith(PORTAL_REASON_PREFIX):
            text = PORTAL_REASON_PREFIX + text
        n = self._node(node)
        self._call(self.cli.drain, node, text[:250])
        if n is not None and self._view_cache is not None:
            self._view_cache.nodes[node] = replace(n, flags=n.flags | {"drain"}, reason=text)

    def uncordon(self, node: str) -> None:
        """``scontrol update state=resume`` for a drained or down node; else nothing.

        Slurm flags a resumed node "not responding" until its slurmd answers the
        ping resume sends (about half a second): wait for that (at most
        ``RESUME_WAIT_S``) so the node is usable when this returns.
        """
        n = self._node(node, fresh=True)
        if n is None:
            raise PermanentBackendError(f"unknown node {node}", code="unknown_node")
        if not (n.drain or n.down or "fail" in n.flags):
            return
        self._call(self.cli.resume, node)
        deadline = time.monotonic() + RESUME_WAIT_S
        while True:
            n = self._node(node, fresh=True) or n
            if not n.not_responding or time.monotonic() > deadline:
                return
            time.sleep(0.2)

    def _node(self, node: str, *, fresh: bool = False) -> SlurmNode | None:
        view = self._refresh() if fresh or self._view_cache is None else self._view_cache
        return view.nodes.get(node)

    def clean_residual(self, node: str) -> int:
        """Slurm's CLI cannot see stale GPU processes: nothing to clean (0).

        Slurm itself kills a finished job's processes (proctrack) and drains a node
        whose processes will not die ("Kill task failed"); that shows as cordoned.
        """
        return 0

    # -- output ---------------------------------------------------------------------
    def read_output(self, ref: str, max_bytes: int, *, checkpoint_path: str = "") -> OutputAnswer:
        """The tail of the run's ``--output`` file, when ``SLURM_JOB_OUTPUT`` names files
        the portal host can read (shared storage).

        The path is Slurm's own (``scontrol show job -o``: ``StdOut=``, expanded) while
        Slurm lists the run (``squeue -n <ref>``), else the pattern expanded for the run
        (``%x`` its ref, ``%u`` the portal's user, any ``%j``: the newest such file). Read by
        ``scheduling/backends/output_files.py``: inside the pattern's directory only.
        """
        files = OutputFiles.configure(self.job_output, self.workdir)
        if files is None:
            return NOT_KEPT
        user = getpass.getuser()
        path = None
        slurm_id = self._newest_job_named(ref)
        if slurm_id is not None:
            path = self._stdout_of(slurm_id) or files.expand(name=ref, user=user, job_id=slurm_id)
        if path is None:
            path = files.newest(name=ref, user=user)
        if path is None:
            gone = "" if slurm_id is not None else "Slurm no longer lists the run and "
            return NoOutput(f"no output file of {ref}: {gone}no file matches {files.pattern}")
        return files.tail(path, max_bytes)

    def _newest_job_named(self, ref: str) -> int | None:
        """The newest Slurm job id named ``ref`` that Slurm still lists (plain ``squeue``
        honours ``-n``/``-t``; ``--json`` would list every job of the cluster)."""
        out = self._call(self.cli.run, ["squeue", "-h", "-t", "all", "-n", ref, "-o", "%i"])
        ids = [int(word) for word in out.split() if word.isascii() and word.isdigit()]
        return max(ids, default=None)

    def _stdout_of(self, slurm_id: int) -> str | None:
        """``StdOut=`` of ``scontrol show job -o`` (None when Slurm no longer knows it)."""
        try:
            out = self._call(self.cli.run, ["scontrol", "show", "job", "-o", str(slurm_id)])
        except PermanentBackendError:
            return None
        m = _STDOUT.search(out)
        return m.group(1) if m and m.group(1) not in ("", "(null)") else None

    def close(self) -> None:
        self._view_cache = None
