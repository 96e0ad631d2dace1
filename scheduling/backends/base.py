"""The one small interface every cluster backend implements, in engine types.

The portal decides; a backend executes what it is told and reports what it
sees. ``observe`` is the truth the loop reconciles against: what the backend
reports wins over what the database remembers.

Errors say whether retrying can help: ``TransientBackendError`` (try again
later, with backoff) or ``PermanentBackendError`` (the request itself is wrong;
the job fails with the message as its reason).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Self

from scheduling.engine.types import NodeHardware, Slot

if TYPE_CHECKING:
    from scheduling.backends.config import BackendContext

# Job states a backend reports.
RUNNING = "running"
STOPPING = "stopping"  # checkpointing before a requested stop
SUCCEEDED = "succeeded"
FAILED = "failed"
STOPPED = "stopped"  # stopped on request (checkpoint-and-stop, deadline or kill)
ENDED = (SUCCEEDED, FAILED, STOPPED)

# Node health a backend reports.
HEALTH_OK = "ok"
HEALTH_DOWN = "down"
HEALTH_GPU_FAILURE = "gpu_failure"
HEALTH_RDMA_DEGRADED = "rdma_degraded"
# Each in words, as pages write it (the node's ``Health`` choices; the rack map's cells).
HEALTH_LABELS = {
    HEALTH_OK: "OK",
    HEALTH_GPU_FAILURE: "GPU failure",
    HEALTH_RDMA_DEGRADED: "RDMA degraded",
    HEALTH_DOWN: "Down",
}

# What a backend reports where the cluster does not say (no topology, no GPU model).
DEFAULT_RACK = "default"
DEFAULT_BLOCK = "default"
DEFAULT_GPU_MODEL = "unknown"
# The checkpoint grace when PREEMPTION_GRACE_SECONDS is not configured.
DEFAULT_GRACE_S = 300.0
# How much longer than a run's time limit and grace a backend lets it last on its own
# (``LaunchRequest.backstop_s``): a few loop periods, for the loop to ask it to stop first.
BACKSTOP_MARGIN_S = 300.0


class BackendError(Exception):
    """A backend call failed. ``permanent`` tells whether a retry can help."""

    permanent = False

    def __init__(self, message: str, *, code: str = "backend_error") -> None:
        super().__init__(message)
        self.code = code


class TransientBackendError(BackendError):
    permanent = False


class PermanentBackendError(BackendError):
    permanent = True


@dataclass(frozen=True, slots=True)
class ObservedNode(NodeHardware):
    """A node as the backend sees it. ``busy_gpus``: held by jobs or anything else."""

    rdma: bool
    inference: bool
    health: str
    health_detail: str
    cordoned: bool
    free_gpus: tuple[int, ...]
    residual_gpus: tuple[int, ...] = ()
    inference_shortfall: int = 0


@dataclass(frozen=True, slots=True)
class ObservedJob:
    """A job run as the backend sees it. ``ref`` is the backend's name for this run;
    ``job_id`` the portal job it belongs to (None: started outside the portal)."""

    ref: str
    job_id: int | None
    state: str
    placement: tuple[Slot, ...]
    progress_s: float = 0.0
    last_checkpoint_at: float | None = None
    end_reason: str = ""
    # when an ended run (``ENDED``) ended, in cluster time, if the backend knows: its job's
    # "Finished" is that instant, not the cycle that saw it (up to a period later)
    ended_at: float | None = None


@dataclass(frozen=True)
class Observation:
    """Everything the backend reports at cluster time ``now`` (epoch seconds)."""

    now: float
    nodes: tuple[ObservedNode, ...]
    jobs: tuple[ObservedJob, ...]
    # nodes where online inference wants GPUs back: node -> running job refs there
    inference_pressure: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Start run ``ref`` of portal job ``job_id`` on exactly ``placement``."""

    ref: str
    job_id: int
    name: str
    placement: tuple[Slot, ...]
    progress_s: float
    checkpoint_interval_s: float
    checkpoint_path: str
    exclusive_node: bool = False
    sim_duration_s: float | None = None  # simulator only: the hidden true run time
    array_id: int | None = None  # a job array's task (``scheduling.arrays``): its array
    array_index: int | None = None  # and its index in it
    # the longest the run may last (``scheduling.time_limits``): the loop asks it to stop
    # there; a backend that can also enforce it gives the run ``backstop_s`` (a grace more)
    time_limit_s: float | None = None

    def backstop_s(self, grace_s: float) -> float | None:
        """How long the backend itself lets the run last, as a backstop to the loop's stop at
        its time limit (None: no limit): the limit, the checkpoint grace the loop's stop
        gives, and ``BACKSTOP_MARGIN_S`` for the loop to see the limit and ask."""
        if not self.time_limit_s:
            return None
        return self.time_limit_s + max(0.0, grace_s) + BACKSTOP_MARGIN_S

    def array_environment(self) -> dict[str, str]:
        """What a job array's task is told of its place (``PORTAL_ARRAY_ID``,
        ``PORTAL_ARRAY_TASK_ID``: Slurm's ``SLURM_ARRAY_JOB_ID``/``SLURM_ARRAY_TASK_ID``),
        empty for any other job. Every backend puts it in the run's environment."""
        if self.array_id is None or self.array_index is None:
            return {}
        return {
            "PORTAL_ARRAY_ID": str(self.array_id),
            "PORTAL_ARRAY_TASK_ID": str(self.array_index),
        }


@dataclass(frozen=True, slots=True)
class OutputTail:
    """The end of a run's output (stdout and stderr as the backend keeps them).

    ``data`` is at most the ``max_bytes`` asked for, raw bytes (the portal decodes and
    sanitises them: output is other people's text). ``truncated``: the output was longer
    and only its end is here. ``source`` says where it came from, in words a person can
    check (a file path, ``pod <name>/<container>``, ``simulator``).
    """

    data: bytes
    truncated: bool
    source: str


@dataclass(frozen=True, slots=True)
class NoOutput:
    """Why a backend has no output for a run (``read_output``'s answer when it keeps none)."""

    reason: str


# What ``read_output`` may answer: the tail, or why there is none.
OutputAnswer = OutputTail | NoOutput

NO_OUTPUT_KEPT = NoOutput("this backend keeps no output of its runs")


def tail_bytes(data: bytes, max_bytes: int) -> tuple[bytes, bool]:
    """The last ``max_bytes`` of ``data`` and whether anything was cut (shared by backends)."""
    if max_bytes <= 0:
        return b"", bool(data)
    if len(data) <= max_bytes:
        return data, False
    return data[-max_bytes:], True


def run_ref(job_id: int, attempt: int) -> str:
    """The backend name of a job's run: deterministic, so a lost launch is adopted, never duplicated."""
    return f"portal-{job_id}-{attempt}"


def parse_run_ref(ref: str) -> tuple[int, int] | None:
    """(job_id, attempt) from a run ref, or None for work started outside the portal."""
    parts = ref.split("-")
    if len(parts) == 3 and parts[0] == "portal" and parts[1].isdigit() and parts[2].isdigit():
        return int(parts[1]), int(parts[2])
    return None


class ClusterBackend(ABC):
    """What the scheduling loop needs from a cluster; every backend subclasses it.

    ``scheduling.backends.BACKENDS`` names the subclasses; the factory
    (``scheduling/backend_factory.py``) opens one per cycle with :meth:`open`.
    """

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def open(cls, context: BackendContext) -> Self:
        """This backend for one cycle, configured from ``context`` (plain values only)."""

    @abstractmethod
    def observe(self) -> Observation: ...

    @abstractmethod
    def launch(self, request: LaunchRequest) -> None: ...

    @abstractmethod
    def checkpoint_and_stop(self, ref: str, grace_s: float) -> None: ...

    @abstractmethod
    def kill(self, ref: str) -> None: ...

    @abstractmethod
    def cordon(self, node: str, reason: str) -> None: ...

    @abstractmethod
    def uncordon(self, node: str) -> None: ...

    @abstractmethod
    def clean_residual(self, node: str) -> int: ...

    def read_output(self, ref: str, max_bytes: int, *, checkpoint_path: str = "") -> OutputAnswer:
        """The last ``max_bytes`` of run ``ref``'s output, or :class:`NoOutput` saying why
        there is none (this backend or this run keeps none, the run is unknown).

        Optional: the default keeps none. ``checkpoint_path`` is the job's, for backends
        that describe what a run did rather than read it (the simulator). Read-only, and
        quick: the portal calls it while a person waits (with its own timeout); errors
        are ``BackendError`` as everywhere.
        """
        return NO_OUTPUT_KEPT

    @abstractmethod
    def close(self) -> None:
        """Persist and release whatever the backend holds for this cycle."""
