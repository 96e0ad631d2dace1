"""What the simulator tells the outside world: events and observations.

Plain frozen dataclasses. A job's true duration never appears here: the
scheduler sees progress and checkpoints, as it would on a real cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from scheduling.engine.types import NodeHardware

# Event kinds (dotted, like the portal's live events).
JOB_LAUNCHED = "job.launched"
JOB_SUCCEEDED = "job.succeeded"
JOB_FAILED = "job.failed"
JOB_CHECKPOINTED = "job.checkpointed"
JOB_STOPPED = "job.stopped"
RESIDUAL_LEFT = "residual.left"
RESIDUAL_CLEANED = "residual.cleaned"
NODE_FAULT = "node.fault"
NODE_REPAIRED = "node.repaired"
NODE_CORDONED = "node.cordoned"
NODE_UNCORDONED = "node.uncordoned"
INFERENCE_PRESSURE = "inference.pressure"

# Job states.
RUNNING = "running"
STOPPING = "stopping"
SUCCEEDED = "succeeded"
FAILED = "failed"
STOPPED = "stopped"
ACTIVE_STATES = (RUNNING, STOPPING)
ENDED_STATES = (SUCCEEDED, FAILED, STOPPED)


@dataclass(frozen=True, slots=True)
class SimEvent:
    """Something that happened at virtual time ``at``.

    Fields used per kind:
    - ``job.launched``: job_id, gpus (placement as ((node, (gpu, ...)), ...)).
    - ``job.succeeded``: job_id, progress_s.
    - ``job.failed``: job_id, reason (``random``, ``gpu_failure``, ``node_down``,
      ``rdma_degraded``), node (the faulty node, if any), progress_s (what a
      restart resumes from: the last checkpoint).
    - ``job.checkpointed``: job_id, progress_s (saved progress).
    - ``job.stopped``: job_id, reason (``checkpoint``: stopped after its
      checkpoint-and-stop checkpoint; ``deadline``: killed at the grace deadline;
      ``killed``: ``Simulator.kill``), progress_s (kept progress).
    - ``residual.left``: job_id (the stale job), node, gpus ((gpu, ...)).
    - ``residual.cleaned``: node, gpus.
    - ``node.fault``: node, reason (fault kind), jobs (jobs that failed); for
      ``residual_process``, gpus (the GPUs now held, also told by ``residual.left``).
    - ``node.repaired`` / ``node.cordoned`` / ``node.uncordoned``: node.
    - ``inference.pressure``: node, gpus_needed (GPUs inference wants but cannot
      get), jobs (running training jobs on the node that should yield).
    """

    at: float
    kind: str
    job_id: str | None = None
    node: str | None = None
    reason: str | None = None
    progress_s: float | None = None
    gpus: tuple = ()
    jobs: tuple[str, ...] = ()
    gpus_needed: int = 0

    def to_row(self) -> list:
        launched = self.kind == JOB_LAUNCHED
        gpus = [[n, list(g)] for n, g in self.gpus] if launched else list(self.gpus)
        return [
            self.at,
            self.kind,
            self.job_id,
            self.node,
            self.reason,
            self.progress_s,
            gpus,
            list(self.jobs),
            self.gpus_needed,
        ]

    @classmethod
    def from_row(cls, row: list) -> SimEvent:
        at, kind, job_id, node, reason, progress_s, gpus, jobs, needed = row
        if kind == JOB_LAUNCHED:
            gpus_t: tuple = tuple((n, tuple(g)) for n, g in gpus)
        else:
            gpus_t = tuple(gpus)
        return cls(at, kind, job_id, node, reason, progress_s, gpus_t, tuple(jobs), needed)


@dataclass(frozen=True, slots=True)
class NodeObservation(NodeHardware):
    """A node as the scheduler sees it at one instant.

    ``free_gpus`` are whole GPUs a training job may take now: not held by a
    training job, a residual process or online inference. They are listed
    whatever the node's health; ``health`` and ``cordoned`` say whether it may
    be used.
    """

    rdma: bool
    inference: bool
    health: str
    cordoned: bool
    free_gpus: tuple[int, ...]
    allocated_gpus: tuple[int, ...]
    residual_gpus: tuple[tuple[int, str], ...]
    inference_gpus: tuple[int, ...]
    inference_wanted: int
    inference_load: float
    jobs: tuple[str, ...]

    @property
    def inference_shortfall(self) -> int:
        """GPUs online inference wants on this node but cannot get."""
        return max(0, self.inference_wanted - len(self.inference_gpus))


@dataclass(frozen=True, slots=True)
class JobObservation:
    """A job as the scheduler sees it (never its true duration).

    ``progress_s`` is the work done so far while running, the progress frozen
    at the checkpoint-and-stop request while stopping, and after the end what a
    relaunch would resume from (the last checkpoint, or the stop checkpoint, or
    everything when it succeeded). ``checkpoint_progress_s`` is the progress
    saved by the last completed checkpoint (or the progress it was launched
    with); ``last_checkpoint_at`` is when that checkpoint completed in this run.
    """

    job_id: str
    state: str
    placement: tuple[tuple[str, tuple[int, ...]], ...]
    gpus: int
    progress_s: float
    checkpoint_progress_s: float
    last_checkpoint_at: float | None
    started_at: float
    ended_at: float | None
    stop_deadline: float | None
    end_reason: str | None


@dataclass(frozen=True)
class ClusterObservation:
    """The whole cluster at virtual time ``now``."""

    now: float
    nodes: tuple[NodeObservation, ...]
    jobs: tuple[JobObservation, ...]

    @cached_property
    def nodes_by_name(self) -> dict[str, NodeObservation]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def jobs_by_id(self) -> dict[str, JobObservation]:
        return {j.job_id: j for j in self.jobs}

    def node(self, name: str) -> NodeObservation:
        return self.nodes_by_name[name]

    def job(self, job_id: str) -> JobObservation:
        return self.jobs_by_id[job_id]
