"""The simulated cluster: a virtual clock, jobs with hidden durations, faults.

Everything here is deterministic given the constructor arguments and the
sequence of calls: the only randomness is ``Simulator.rng`` (a seeded
``random.Random`` that is part of the persisted state) and a hash-based noise
for the inference curve. Nothing reads the wall clock.

Time moves only in ``advance``; future happenings (a job finishing, failing,
writing a checkpoint, a node fault, an inference check) sit in one heap keyed
by (time, rank, job id, attempt), so advancing a few seconds touches only what
happens in those seconds. The heap is not persisted: it is rebuilt from the
jobs' own next-event fields, and its total order does not depend on the order
entries were pushed, so a restored simulator has exactly the same future.

Model, in short:
- A job runs from ``progress_s`` to its hidden ``true_duration_s`` and
  succeeds then. Periodic checkpoints start every ``checkpoint_interval_s``
  of run time and complete ``checkpoint_cost_s`` later, saving the progress
  of their start; training does not pause for them; one still being written
  when the job ends is lost.
- Checkpoint-and-stop halts training at once and writes a checkpoint. If it
  completes within the grace period the job stops keeping all its progress,
  else it is killed at the deadline keeping the last periodic checkpoint.
- Random failures arrive at ``job_failure_rate_per_gpu_hour`` x GPUs
  (exponential); node faults at ``node_fault_rate_per_node_hour`` x nodes.
  A failed job keeps its last checkpoint.
- When a job ends, each of its nodes may keep a stale process on some of its
  GPUs (``residual_probability``); those GPUs stay occupied until cleaned.
- Inference nodes serve online load following a daily curve; inference takes
  the highest-numbered GPUs not held by training. When it wants more than it
  can get, an ``inference.pressure`` event names the training jobs to yield.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

from .cluster import (
    HEALTH_DOWN,
    HEALTH_GPU_FAILURE,
    HEALTH_OK,
    HEALTH_RDMA_DEGRADED,
    HEALTH_SEVERITY,
    SimNode,
)
from .errors import PermanentError, TransientError
from .faults import FAULT_DOWN, FAULT_GPU, FAULT_KINDS, FAULT_RDMA, FAULT_RESIDUAL
from .inference import inference_load, node_key
from .observation import (
    ACTIVE_STATES,
    ENDED_STATES,
    FAILED,
    INFERENCE_PRESSURE,
    JOB_CHECKPOINTED,
    JOB_FAILED,
    JOB_LAUNCHED,
    JOB_STOPPED,
    JOB_SUCCEEDED,
    NODE_CORDONED,
    NODE_FAULT,
    NODE_REPAIRED,
    NODE_UNCORDONED,
    RESIDUAL_CLEANED,
    RESIDUAL_LEFT,
    RUNNING,
    STOPPED,
    STOPPING,
    SUCCEEDED,
    ClusterObservation,
    JobObservation,
    NodeObservation,
    SimEvent,
)

STATE_VERSION = 1

_FAULT_HEALTH = {
    FAULT_GPU: HEALTH_GPU_FAILURE,
    FAULT_RDMA: HEALTH_RDMA_DEGRADED,
    FAULT_DOWN: HEALTH_DOWN,
}
# Healths under which a node still serves inference.
_SERVING = (HEALTH_OK, HEALTH_RDMA_DEGRADED)

# Heap ranks: order of simultaneous happenings, and which job field holds the time.
_R_FINISH, _R_STOP, _R_DEADLINE, _R_CKPT, _R_FAIL, _R_FAULT, _R_TICK = range(7)
_RANK_FIELD = {
    _R_FINISH: "finish_at",
    _R_STOP: "stop_at",
    _R_DEADLINE: "deadline_at",
    _R_CKPT: "ckpt_at",
    _R_FAIL: "fail_at",
}


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The simulator's knobs (all rates in virtual time)."""

    job_failure_rate_per_gpu_hour: float = 0.0002
    node_fault_rate_per_node_hour: float = 0.0005
    # Kinds drawn by random node faults, with weights (rdma_degraded only on RDMA nodes).
    fault_kind_weights: tuple[tuple[str, float], ...] = (
        (FAULT_GPU, 0.5),
        (FAULT_RDMA, 0.3),
        (FAULT_DOWN, 0.2),
    )
    # Chance, per node of an ending job, that stale processes keep some of its GPUs.
    residual_probability: float = 0.02
    inference_trough: float = 0.15
    inference_peak: float = 0.9
    inference_peak_hour: float = 14.0
    inference_noise: float = 0.08
    # How often inference pressure is checked (and events emitted).
    inference_tick_s: float = 300.0
    # Ended jobs are forgotten this long after they end (the portal reconciles sooner).
    ended_job_retention_s: float = 6 * 3600.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["fault_kind_weights"] = [list(kw) for kw in self.fault_kind_weights]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> SimConfig:
        d = dict(d)
        d["fault_kind_weights"] = tuple((k, w) for k, w in d["fault_kind_weights"])
        return cls(**d)


@dataclass(slots=True)
class SimJob:
    """Internal record of one job run (attempt). ``true_duration_s`` is hidden from observers.

    The ``*_at`` fields hold the times of the job's pending happenings (None when
    there is none); a heap entry is valid only while its time still equals the field.
    """

    job_id: str
    placement: tuple[tuple[str, tuple[int, ...]], ...]
    true_duration_s: float
    start_progress_s: float
    started_at: float
    checkpoint_interval_s: float
    checkpoint_cost_s: float
    attempt: int
    state: str = RUNNING
    checkpoint_progress_s: float = 0.0
    last_checkpoint_at: float | None = None
    finish_at: float | None = None
    fail_at: float | None = None
    ckpt_begin_at: float | None = None
    ckpt_at: float | None = None
    stop_progress_s: float | None = None
    stop_deadline: float | None = None
    stop_at: float | None = None
    deadline_at: float | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    final_progress_s: float | None = None

    @property
    def gpus(self) -> int:
        return sum(len(g) for _, g in self.placement)

    def progress(self, now: float) -> float:
        if self.state == RUNNING:
            done = max(self.true_duration_s, self.start_progress_s)
            return min(done, self.start_progress_s + (now - self.started_at))
        if self.state == STOPPING:
            return self.stop_progress_s  # type: ignore[return-value]
        return self.final_progress_s  # type: ignore[return-value]

    def to_row(self) -> list:
        return [
            self.job_id,
            [[n, list(g)] for n, g in self.placement],
            self.true_duration_s,
            self.start_progress_s,
            self.started_at,
            self.checkpoint_interval_s,
            self.checkpoint_cost_s,
            self.attempt,
            self.state,
            self.checkpoint_progress_s,
            self.last_checkpoint_at,
            self.finish_at,
            self.fail_at,
            self.ckpt_begin_at,
            self.ckpt_at,
            self.stop_progress_s,
            self.stop_deadline,
            self.stop_at,
            self.deadline_at,
            self.ended_at,
            self.end_reason,
            self.final_progress_s,
        ]

    @classmethod
    def from_row(cls, row: list) -> SimJob:
        job = cls(row[0], tuple((n, tuple(g)) for n, g in row[1]), *row[2:8])
        (
            job.state,
            job.checkpoint_progress_s,
            job.last_checkpoint_at,
            job.finish_at,
            job.fail_at,
            job.ckpt_begin_at,
            job.ckpt_at,
            job.stop_progress_s,
            job.stop_deadline,
            job.stop_at,
            job.deadline_at,
            job.ended_at,
            job.end_reason,
            job.final_progress_s,
        ) = row[8:]
        return job


def _node_name(node: str | SimNode) -> str:
    return node.name if isinstance(node, SimNode) else node


class Simulator:
    """A simulated GPU cluster driven by explicit calls and a virtual clock.

    Mutating calls (launch, stop, kill, faults, cleaning...) take effect at
    ``now``; the events they cause are queued and returned, in time order,
    by the next ``advance``. ``observe`` is read-only.
    """

    def __init__(
        self,
        nodes: Iterable[SimNode],
        *,
        seed: int = 0,
        config: SimConfig | None = None,
        now: float = 0.0,
    ) -> None:
        self.seed = seed
        self.config = config or SimConfig()
        self.rng = random.Random(seed)
        self.now = float(now)
        self.nodes: dict[str, SimNode] = {}
        for n in nodes:
            if n.name in self.nodes:
                raise ValueError(f"duplicate node name {n.name!r}")
            self.nodes[n.name] = n
        self.jobs: dict[str, SimJob] = {}
        self._launch_seq = 0
        self._api_errors = 0
        self._events: list[SimEvent] = []
        self._pressure: dict[str, tuple[int, tuple[str, ...]]] = {}
        self._next_fault_at: float | None = None
        self._next_tick_at: float | None = None
        self._init_derived()
        self._next_fault_at = self._draw_next_fault()
        if self._inference_nodes:
            self._next_tick_at = self.now + self.config.inference_tick_s
        self._rebuild_heap()

    # ------------------------------------------------------------------ setup

    def _init_derived(self) -> None:
        """Indexes derived from nodes and jobs (never persisted)."""
        self._node_list: list[SimNode] = list(self.nodes.values())
        self._node_keys = {name: node_key(name) for name in self.nodes}
        self._inference_nodes = [n for n in self._node_list if n.inference]
        # node -> gpu -> id of the active job holding it
        self._occ: dict[str, dict[int, str]] = {name: {} for name in self.nodes}
        self._ended: deque[tuple[float, str, int]] = deque()
        for job in self.jobs.values():
            if job.state in ACTIVE_STATES:
                for name, gpus in job.placement:
                    occ = self._occ[name]
                    for g in gpus:
                        occ[g] = job.job_id
        ended = [
            (j.ended_at, j.job_id, j.attempt) for j in self.jobs.values() if j.state in ENDED_STATES
        ]
        ended.sort()
        self._ended.extend(ended)  # type: ignore[arg-type]

    def _rebuild_heap(self) -> None:
        heap: list[tuple[float, int, str, int]] = []
        for job in self.jobs.values():
            if job.state not in ACTIVE_STATES:
                continue
            for rank, attr in _RANK_FIELD.items():
                t = getattr(job, attr)
                if t is not None:
                    heap.append((t, rank, job.job_id, job.attempt))
        if self._next_fault_at is not None:
            heap.append((self._next_fault_at, _R_FAULT, "", 0))
        if self._next_tick_at is not None:
            heap.append((self._next_tick_at, _R_TICK, "", 0))
        heapq.heapify(heap)
        self._heap = heap

    def _push(self, t: float, rank: int, key: str = "", attempt: int = 0) -> None:
        heapq.heappush(self._heap, (t, rank, key, attempt))

    # ----------------------------------------------------------- randomness

    def _draw_next_fault(self) -> float | None:
        rate = self.config.node_fault_rate_per_node_hour * len(self.nodes) / 3600.0
        if rate <= 0:
            return None
        return self.now + self.rng.expovariate(rate)

    def _draw_fail_at(self, job: SimJob, horizon: float | None) -> float | None:
        rate = self.config.job_failure_rate_per_gpu_hour * job.gpus / 3600.0
        if rate <= 0:
            return None
        t = self.now + self.rng.expovariate(rate)
        return t if horizon is None or t < horizon else None

    def set_rates(
        self,
        *,
        job_failure_rate_per_gpu_hour: float | None = None,
        node_fault_rate_per_node_hour: float | None = None,
    ) -> None:
        """Change failure rates from now on (pending draws are redrawn: exponential, memoryless)."""
        changes = {}
        if job_failure_rate_per_gpu_hour is not None:
            changes["job_failure_rate_per_gpu_hour"] = float(job_failure_rate_per_gpu_hour)
        if node_fault_rate_per_node_hour is not None:
            changes["node_fault_rate_per_node_hour"] = float(node_fault_rate_per_node_hour)
        self.config = replace(self.config, **changes)
        if node_fault_rate_per_node_hour is not None:
            self._next_fault_at = self._draw_next_fault()
            if self._next_fault_at is not None:
                self._push(self._next_fault_at, _R_FAULT)
        if job_failure_rate_per_gpu_hour is not None:
            for job_id in sorted(self.jobs):
                job = self.jobs[job_id]
                if job.state not in ACTIVE_STATES:
                    continue
                horizon = (
                    job.finish_at if job.state == RUNNING else (job.stop_at or job.deadline_at)
                )
                job.fail_at = self._draw_fail_at(job, horizon)
                if job.fail_at is not None:
                    self._push(job.fail_at, _R_FAIL, job.job_id, job.attempt)

    def inject_api_errors(self, count: int) -> None:
        """Make the next ``count`` backend calls raise ``TransientError`` without effect.

        Counts launch, request_checkpoint_stop, kill, clean_residual, repair,
        cordon, uncordon and drain; lets callers test their retry paths.
        """
        self._api_errors = max(0, int(count))

    def _api_call(self, what: str) -> None:
        if self._api_errors > 0:
            self._api_errors -= 1
            raise TransientError("backend_unavailable", f"{what}: simulated backend outage")

    # --------------------------------------------------------------- lookups

    def _node(self, node: str | SimNode) -> SimNode:
        name = _node_name(node)
        try:
            return self.nodes[name]
        except KeyError:
            raise PermanentError("unknown_node", f"no node named {name!r}") from None

    def _job(self, job_id: str) -> SimJob:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise PermanentError("unknown_job", f"no job {job_id!r}") from None

    def inference_load(self, node: str | SimNode, at: float | None = None) -> float:
        """Fraction of the node's GPUs online inference wants (0 off the inference pool)."""
        n = self._node(node)
        if not n.inference or n.health not in _SERVING:
            return 0.0
        c = self.config
        return inference_load(
            self.now if at is None else at,
            seed=self.seed,
            key=self._node_keys[n.name],
            trough=c.inference_trough,
            peak=c.inference_peak,
            peak_hour=c.inference_peak_hour,
            noise=c.inference_noise,
        )

    def inference_gpus_wanted(self, node: str | SimNode, at: float | None = None) -> int:
        """Whole GPUs online inference wants on ``node`` at ``at`` (default: now)."""
        n = self._node(node)
        return round(n.gpus_total * self.inference_load(n, at))

    def _inference_held(self, n: SimNode, wanted: int) -> tuple[int, ...]:
        """GPUs inference serves on: the highest ones not held by training or stale processes."""
        if wanted <= 0:
            return ()
        occ = self._occ[n.name]
        avail = [g for g in range(n.gpus_total) if g not in occ and g not in n.residual]
        return tuple(avail[-wanted:]) if wanted < len(avail) else tuple(avail)

    # --------------------------------------------------------------- actions

    def launch(
        self,
        job_id: str,
        placement: Sequence[tuple[str | SimNode, Sequence[int]]],
        true_duration_s: float,
        progress_s: float = 0.0,
        checkpoint_interval_s: float = 3600.0,
        checkpoint_cost_s: float = 60.0,
    ) -> None:
        """Start ``job_id`` now on the given (node, GPU indices) pairs, all at once.

        Idempotent: launching a job that is already active with the same
        placement does nothing. A job that has ended may be launched again (a
        retry or a resume; pass its kept progress as ``progress_s``).
        Raises ``PermanentError`` (nothing changes) for an unknown node, a bad
        or duplicated GPU index, a GPU held by a job, a stale process or
        online inference (``gpu_busy``), a node that is not healthy
        (``node_unhealthy``) or cordoned (``node_cordoned``), or an active job
        with another placement (``duplicate_job``); ``TransientError`` when
        an outage was injected.
        """
        self._api_call("launch")
        norm: list[tuple[str, tuple[int, ...]]] = []
        for node, gpus in placement:
            norm.append((_node_name(node), tuple(int(g) for g in gpus)))
        place = tuple(norm)
        existing = self.jobs.get(job_id)
        if existing is not None and existing.state in ACTIVE_STATES:
            if existing.placement == place:
                return
            raise PermanentError(
                "duplicate_job", f"job {job_id!r} is already {existing.state} elsewhere"
            )
        if not (true_duration_s > 0 and math.isfinite(true_duration_s)):
            raise PermanentError("invalid_argument", "true_duration_s must be a positive number")
        if not (
            0 <= progress_s < math.inf
            and 0 < checkpoint_interval_s < math.inf
            and 0 <= checkpoint_cost_s < math.inf
        ):
            raise PermanentError(
                "invalid_argument",
                "progress_s and checkpoint_cost_s must be finite and >= 0, "
                "checkpoint_interval_s finite and > 0",
            )
        if not place or any(not g for _, g in place):
            raise PermanentError("invalid_placement", "placement needs at least one GPU per node")
        seen: set[str] = set()
        for name, gpus in place:
            n = self._node(name)
            if name in seen:
                raise PermanentError("invalid_placement", f"node {name} listed twice")
            seen.add(name)
            if n.health != HEALTH_OK:
                raise PermanentError("node_unhealthy", f"node {name} is {n.health}")
            if n.cordoned:
                raise PermanentError("node_cordoned", f"node {name} is cordoned")
            if len(set(gpus)) != len(gpus) or any(g < 0 or g >= n.gpus_total for g in gpus):
                raise PermanentError(
                    "invalid_placement",
                    f"bad GPU indices {list(gpus)} on {name} ({n.gpus_total} GPUs)",
                )
            occ = self._occ[name]
            held = (
                set(self._inference_held(n, self.inference_gpus_wanted(n)))
                if n.inference
                else set()
            )
            for g in gpus:
                if g in occ:
                    raise PermanentError("gpu_busy", f"{name} GPU {g} is held by job {occ[g]}")
                if g in n.residual:
                    raise PermanentError(
                        "gpu_busy", f"{name} GPU {g} is held by a stale process of {n.residual[g]}"
                    )
                if g in held:
                    raise PermanentError("gpu_busy", f"{name} GPU {g} is serving online inference")

        self._launch_seq += 1
        now = self.now
        job = SimJob(
            job_id=job_id,
            placement=place,
            true_duration_s=float(true_duration_s),
            start_progress_s=float(progress_s),
            started_at=now,
            checkpoint_interval_s=float(checkpoint_interval_s),
            checkpoint_cost_s=float(checkpoint_cost_s),
            attempt=self._launch_seq,
            checkpoint_progress_s=float(progress_s),
        )
        job.finish_at = now + max(0.0, job.true_duration_s - job.start_progress_s)
        job.fail_at = self._draw_fail_at(job, job.finish_at)
        self._schedule_checkpoint(job, now + job.checkpoint_interval_s)
        if existing is not None:
            del self.jobs[job_id]  # a relaunch goes to the end, like a new job
        self.jobs[job_id] = job
        for name, gpus in place:
            occ = self._occ[name]
            for g in gpus:
                occ[g] = job_id
        for rank in (_R_FINISH, _R_FAIL, _R_CKPT):
            t = getattr(job, _RANK_FIELD[rank])
            if t is not None:
                self._push(t, rank, job_id, job.attempt)
        self._events.append(SimEvent(now, JOB_LAUNCHED, job_id=job_id, gpus=place))

    def _schedule_checkpoint(self, job: SimJob, begin: float) -> None:
        if job.finish_at is not None and begin < job.finish_at:
            job.ckpt_begin_at = begin
            job.ckpt_at = begin + job.checkpoint_cost_s
        else:
            job.ckpt_begin_at = None
            job.ckpt_at = None

    def request_checkpoint_stop(self, job_id: str, grace_s: float) -> None:
        """Ask a running job to checkpoint and stop within ``grace_s``.

        Training halts now. The checkpoint completes ``checkpoint_cost_s``
        later; if that is within the grace the job stops then, keeping its
        progress at the request; otherwise it is killed at the deadline keeping
        its last periodic checkpoint. Idempotent: a job already stopping keeps
        its first deadline; an ended job is left alone.
        """
        self._api_call("request_checkpoint_stop")
        job = self._job(job_id)
        if not 0 <= grace_s < math.inf:
            raise PermanentError("invalid_argument", "grace_s must be finite and >= 0")
        if job.state == RUNNING:
            self._stop(job, grace_s)

    def _stop(self, job: SimJob, grace_s: float) -> None:
        now = self.now
        job.stop_progress_s = job.progress(now)
        job.state = STOPPING
        job.finish_at = job.ckpt_at = job.ckpt_begin_at = None
        job.stop_deadline = now + grace_s
        if job.checkpoint_cost_s <= grace_s:
            job.stop_at = now + job.checkpoint_cost_s
            self._push(job.stop_at, _R_STOP, job.job_id, job.attempt)
        else:
            job.deadline_at = job.stop_deadline
            self._push(job.deadline_at, _R_DEADLINE, job.job_id, job.attempt)

    def kill(self, job_id: str) -> None:
        """Stop a job at once (cold); it keeps only its last checkpoint. No-op if it has ended."""
        self._api_call("kill")
        job = self._job(job_id)
        if job.state not in ACTIVE_STATES:
            return
        self._end(job, STOPPED, "killed", job.checkpoint_progress_s)

    def clean_residual(self, node: str | SimNode) -> int:
        """Kill stale processes on ``node``; returns how many GPUs were freed."""
        self._api_call("clean_residual")
        n = self._node(node)
        if not n.residual:
            return 0
        gpus = tuple(sorted(n.residual))
        n.residual.clear()
        self._events.append(SimEvent(self.now, RESIDUAL_CLEANED, node=n.name, gpus=gpus))
        return len(gpus)

    def repair(self, node: str | SimNode) -> None:
        """Bring a node back to health (a reboot: stale processes are gone too).

        Does not uncordon: putting the node back in the pool is the portal's call.
        """
        self._api_call("repair")
        n = self._node(node)
        n.health = HEALTH_OK
        n.residual.clear()
        self._events.append(SimEvent(self.now, NODE_REPAIRED, node=n.name))

    def cordon(self, node: str | SimNode) -> None:
        """Refuse new launches on ``node``; running jobs stay."""
        self._api_call("cordon")
        n = self._node(node)
        if not n.cordoned:
            n.cordoned = True
            self._events.append(SimEvent(self.now, NODE_CORDONED, node=n.name))

    def uncordon(self, node: str | SimNode) -> None:
        self._api_call("uncordon")
        n = self._node(node)
        if n.cordoned:
            n.cordoned = False
            self._events.append(SimEvent(self.now, NODE_UNCORDONED, node=n.name))

    def drain(self, node: str | SimNode, grace_s: float) -> list[str]:
        """Cordon ``node`` and ask each running job on it to checkpoint and stop.

        Returns the ids of the jobs asked to stop.
        """
        self._api_call("drain")
        n = self._node(node)
        if not 0 <= grace_s < math.inf:
            raise PermanentError("invalid_argument", "grace_s must be finite and >= 0")
        if not n.cordoned:
            n.cordoned = True
            self._events.append(SimEvent(self.now, NODE_CORDONED, node=n.name))
        asked = []
        for job_id in sorted(set(self._occ[n.name].values())):
            job = self.jobs[job_id]
            if job.state == RUNNING:
                self._stop(job, grace_s)
                asked.append(job_id)
        return asked

    def inject_fault(
        self,
        kind: str,
        node: str | SimNode,
        gpus: Sequence[int] | None = None,
        stale_job_id: str = "unknown",
    ) -> None:
        """Inject a fault on ``node`` now (for drills, tests and the faults API).

        - ``residual_process``: stale processes (of ``stale_job_id``) take
          ``gpus`` (default: every GPU no job holds) until cleaned.
        - ``gpu_failure`` / ``node_down``: every job on the node fails, keeping
          its last checkpoint; a down node also loses its stale processes.
        - ``rdma_degraded`` (RDMA nodes only): multi-node jobs through the node
          fail; single-node jobs carry on.
        A node's health is the worst of its faults until ``repair``.
        Raises ``PermanentError`` (``invalid_fault``, ``unknown_node``).
        """
        n = self._node(node)
        if kind not in FAULT_KINDS:
            raise PermanentError(
                "invalid_fault", f"unknown fault kind {kind!r}; one of {FAULT_KINDS}"
            )
        if kind == FAULT_RESIDUAL:
            occ = self._occ[n.name]
            if gpus is None:
                chosen = [g for g in range(n.gpus_total) if g not in occ and g not in n.residual]
            else:
                chosen = sorted({int(g) for g in gpus})
                bad = [g for g in chosen if g < 0 or g >= n.gpus_total or g in occ]
                if bad:
                    raise PermanentError(
                        "invalid_fault", f"GPUs {bad} on {n.name} are not idle GPU indices"
                    )
            if not chosen:
                raise PermanentError("invalid_fault", f"no idle GPU on {n.name} to hold")
            for g in chosen:
                n.residual[g] = stale_job_id
            self._events.append(
                SimEvent(self.now, NODE_FAULT, node=n.name, reason=kind, gpus=tuple(chosen))
            )
            self._events.append(
                SimEvent(
                    self.now, RESIDUAL_LEFT, job_id=stale_job_id, node=n.name, gpus=tuple(chosen)
                )
            )
            return
        if kind == FAULT_RDMA and not n.rdma:
            raise PermanentError("invalid_fault", f"node {n.name} has no RDMA to degrade")
        self._apply_fault(kind, n)

    def _apply_fault(self, kind: str, n: SimNode) -> None:
        health = _FAULT_HEALTH[kind]
        if HEALTH_SEVERITY[health] > HEALTH_SEVERITY[n.health]:
            n.health = health
        if kind == FAULT_DOWN:
            n.residual.clear()
        victims = []
        for job_id in sorted(set(self._occ[n.name].values())):
            job = self.jobs[job_id]
            if kind == FAULT_RDMA and len(job.placement) < 2:
                continue
            victims.append(job)
        self._events.append(
            SimEvent(
                self.now,
                NODE_FAULT,
                node=n.name,
                reason=kind,
                jobs=tuple(j.job_id for j in victims),
            )
        )
        for job in victims:
            self._end(job, FAILED, kind, job.checkpoint_progress_s, node=n.name)

    def _end(
        self, job: SimJob, state: str, reason: str, progress: float, node: str | None = None
    ) -> None:
        """Finish a job's run: record it, free its GPUs, maybe leave stale processes."""
        now = self.now
        job.state = state
        job.end_reason = reason
        job.ended_at = now
        job.final_progress_s = progress
        job.finish_at = job.fail_at = job.ckpt_at = job.ckpt_begin_at = None
        job.stop_at = job.deadline_at = None
        if state == SUCCEEDED:
            self._events.append(
                SimEvent(now, JOB_SUCCEEDED, job_id=job.job_id, progress_s=progress)
            )
        elif state == FAILED:
            self._events.append(
                SimEvent(
                    now,
                    JOB_FAILED,
                    job_id=job.job_id,
                    node=node,
                    reason=reason,
                    progress_s=progress,
                )
            )
        else:
            self._events.append(
                SimEvent(now, JOB_STOPPED, job_id=job.job_id, reason=reason, progress_s=progress)
            )
        p = self.config.residual_probability
        rng = self.rng
        for name, gpus in job.placement:
            occ = self._occ[name]
            for g in gpus:
                if occ.get(g) == job.job_id:
                    del occ[g]
            n = self.nodes[name]
            if p > 0 and n.health != HEALTH_DOWN and rng.random() < p:
                k = rng.randint(1, len(gpus))
                stale = tuple(sorted(rng.sample(gpus, k)))
                for g in stale:
                    n.residual[g] = job.job_id
                self._events.append(
                    SimEvent(now, RESIDUAL_LEFT, job_id=job.job_id, node=name, gpus=stale)
                )
        self._ended.append((now, job.job_id, job.attempt))

    # ------------------------------------------------------------------ time

    def advance(self, seconds: float) -> list[SimEvent]:
        """Move the clock forward by ``seconds`` and return what happened, in time order.

        Includes events caused by calls made since the previous ``advance``.
        Happenings exactly at the new ``now`` are included.
        """
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise ValueError("seconds must be a finite number >= 0")
        target = self.now + seconds
        heap = self._heap
        jobs = self.jobs
        pop = heapq.heappop
        while heap and heap[0][0] <= target:
            t, rank, key, attempt = pop(heap)
            if rank == _R_FAULT:
                if t == self._next_fault_at:
                    self.now = t
                    self._random_fault()
                continue
            if rank == _R_TICK:
                if t == self._next_tick_at:
                    self.now = t
                    self._inference_tick()
                continue
            job = jobs.get(key)
            if job is None or job.attempt != attempt or getattr(job, _RANK_FIELD[rank]) != t:
                continue  # stale entry: the job's plans changed since it was pushed
            self.now = t
            if rank == _R_FINISH:
                done = max(job.true_duration_s, job.start_progress_s)
                self._end(job, SUCCEEDED, "completed", done)
            elif rank == _R_CKPT:
                self._checkpoint(job)
            elif rank == _R_STOP:
                job.checkpoint_progress_s = job.stop_progress_s  # type: ignore[assignment]
                job.last_checkpoint_at = t
                self._end(job, STOPPED, "checkpoint", job.checkpoint_progress_s)
            elif rank == _R_DEADLINE:
                self._end(job, STOPPED, "deadline", job.checkpoint_progress_s)
            elif rank == _R_FAIL:
                self._end(job, FAILED, "random", job.checkpoint_progress_s)
        self.now = target
        self._prune()
        if len(heap) > 4 * len(jobs) + 256:
            self._rebuild_heap()
        events, self._events = self._events, []
        return events

    def advance_to(self, at: float) -> list[SimEvent]:
        """``advance`` up to the virtual time ``at`` (no-op if already there)."""
        return self.advance(max(0.0, at - self.now))

    def _checkpoint(self, job: SimJob) -> None:
        begin = job.ckpt_begin_at
        assert begin is not None
        job.checkpoint_progress_s = job.start_progress_s + (begin - job.started_at)
        job.last_checkpoint_at = self.now
        self._events.append(
            SimEvent(
                self.now, JOB_CHECKPOINTED, job_id=job.job_id, progress_s=job.checkpoint_progress_s
            )
        )
        self._schedule_checkpoint(job, max(begin + job.checkpoint_interval_s, self.now))
        if job.ckpt_at is not None:
            self._push(job.ckpt_at, _R_CKPT, job.job_id, job.attempt)

    def _random_fault(self) -> None:
        rng = self.rng
        n = rng.choice(self._node_list)
        r = rng.random()
        self._next_fault_at = self._draw_next_fault()
        if self._next_fault_at is not None:
            self._push(self._next_fault_at, _R_FAULT)
        if n.health != HEALTH_OK:
            return  # already broken: the fault changes nothing
        kinds = [(k, w) for k, w in self.config.fault_kind_weights if k != FAULT_RDMA or n.rdma]
        total = sum(w for _, w in kinds)
        if total <= 0:
            return
        r *= total
        kind = kinds[-1][0]
        for k, w in kinds:
            kind = k
            r -= w
            if r < 0:
                break
        if kind == FAULT_RESIDUAL:
            occ = self._occ[n.name]
            idle = [g for g in range(n.gpus_total) if g not in occ and g not in n.residual]
            if idle:
                self.inject_fault(kind, n, idle)
            return
        self._apply_fault(kind, n)

    def _inference_tick(self) -> None:
        now = self.now
        self._next_tick_at = now + self.config.inference_tick_s
        self._push(self._next_tick_at, _R_TICK)
        for n in self._inference_nodes:
            name = n.name
            occ = self._occ[name]
            needed = 0
            running: tuple[str, ...] = ()
            if n.health in _SERVING and occ:
                wanted = self.inference_gpus_wanted(n)
                avail = n.gpus_total - len(occ) - len(n.residual)
                if wanted > avail:
                    ids = sorted(set(occ.values()))
                    running = tuple(j for j in ids if self.jobs[j].state == RUNNING)
                    yieldable = sum(1 for j in occ.values() if self.jobs[j].state == RUNNING)
                    needed = min(wanted - avail, yieldable)
            if needed > 0 and running:
                key = (needed, running)
                if self._pressure.get(name) != key:
                    self._pressure[name] = key
                    self._events.append(
                        SimEvent(
                            now, INFERENCE_PRESSURE, node=name, gpus_needed=needed, jobs=running
                        )
                    )
            else:
                self._pressure.pop(name, None)

    def _prune(self) -> None:
        horizon = self.now - self.config.ended_job_retention_s
        ended = self._ended
        while ended and ended[0][0] < horizon:
            _, job_id, attempt = ended.popleft()
            job = self.jobs.get(job_id)
            if job is not None and job.attempt == attempt and job.state in ENDED_STATES:
                del self.jobs[job_id]

    # ------------------------------------------------------------ observation

    def observe(self) -> ClusterObservation:
        """A read-only snapshot of nodes and jobs at ``now`` (changes nothing)."""
        now = self.now
        nodes = []
        for n in self._node_list:
            occ = self._occ[n.name]
            load = 0.0
            wanted = 0
            held: tuple[int, ...] = ()
            if n.inference:
                load = self.inference_load(n)
                wanted = round(n.gpus_total * load)
                held = self._inference_held(n, wanted)
            residual = n.residual
            taken = set(held)
            free = tuple(
                g
                for g in range(n.gpus_total)
                if g not in occ and g not in residual and g not in taken
            )
            nodes.append(
                NodeObservation(
                    name=n.name,
                    rack=n.rack,
                    block=n.block,
                    gpu_model=n.gpu_model,
                    gpu_memory_gb=n.gpu_memory_gb,
                    gpus_total=n.gpus_total,
                    rdma=n.rdma,
                    inference=n.inference,
                    health=n.health,
                    cordoned=n.cordoned,
                    free_gpus=free,
                    allocated_gpus=tuple(sorted(occ)),
                    residual_gpus=tuple(sorted(residual.items())),
                    inference_gpus=held,
                    inference_wanted=wanted,
                    inference_load=load,
                    jobs=tuple(sorted(set(occ.values()))),
                )
            )
        jobs = tuple(
            JobObservation(
                job_id=j.job_id,
                state=j.state,
                placement=j.placement,
                gpus=j.gpus,
                progress_s=j.progress(now),
                checkpoint_progress_s=j.checkpoint_progress_s,
                last_checkpoint_at=j.last_checkpoint_at,
                started_at=j.started_at,
                ended_at=j.ended_at,
                stop_deadline=j.stop_deadline,
                end_reason=j.end_reason,
            )
            for j in self.jobs.values()
        )
        return ClusterObservation(now=now, nodes=tuple(nodes), jobs=jobs)

    # ------------------------------------------------------------ persistence

    def to_dict(self) -> dict:
        """The whole state as JSON-ready data (RNG included); see ``from_dict``."""
        version, internal, gauss = self.rng.getstate()
        return {
            "version": STATE_VERSION,
            "now": self.now,
            "seed": self.seed,
            "config": self.config.to_dict(),
            "rng": [version, list(internal), gauss],
            "launch_seq": self._launch_seq,
            "api_errors": self._api_errors,
            "next_fault_at": self._next_fault_at,
            "next_tick_at": self._next_tick_at,
            "pressure": [[name, n, list(jobs)] for name, (n, jobs) in self._pressure.items()],
            "nodes": [n.to_row() for n in self._node_list],
            "jobs": [j.to_row() for j in self.jobs.values()],
            "events": [e.to_row() for e in self._events],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Simulator:
        """Rebuild a simulator from ``to_dict`` output; its future is the original's."""
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported simulator state version {d.get('version')!r}")
        sim = cls.__new__(cls)
        sim.seed = d["seed"]
        sim.config = SimConfig.from_dict(d["config"])
        sim.rng = random.Random()
        version, internal, gauss = d["rng"]
        sim.rng.setstate((version, tuple(internal), gauss))
        sim.now = d["now"]
        sim.nodes = {}
        for row in d["nodes"]:
            n = SimNode.from_row(row)
            sim.nodes[n.name] = n
        sim.jobs = {}
        for row in d["jobs"]:
            j = SimJob.from_row(row)
            sim.jobs[j.job_id] = j
        sim._launch_seq = d["launch_seq"]
        sim._api_errors = d["api_errors"]
        sim._events = [SimEvent.from_row(r) for r in d["events"]]
        sim._pressure = {name: (n, tuple(jobs)) for name, n, jobs in d["pressure"]}
        sim._next_fault_at = d["next_fault_at"]
        sim._next_tick_at = d["next_tick_at"]
        sim._init_derived()
        sim._rebuild_heap()
        return sim


__all__ = ["FAULT_KINDS", "SimConfig", "SimJob", "Simulator"]
