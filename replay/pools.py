"""The replay's jobs and node pools: what the engine is shown, kept up to date incrementally.

A ``ReplayJob`` is one trace job as the replay tracks it (state, progress kept across
preemptions, where it runs) together with the engine views last built for it; a view
is rebuilt only when something it shows changed. A ``Pool`` is one partition of the
cluster, planned by its own ``plan()`` call: it mirrors each node's free GPUs (every
launch and release goes through ``take``/``give``), caches each node's ``NodeView``
until it changes, and feeds its pool's fragmentation meter.
"""

from __future__ import annotations

from scheduling.engine import LineView, NodeView, PendingJob, QueueView, RunningJob, Slot, Tier
from scheduling.simcore import SimNode

from . import metrics as m
from .workload import NODE_GPUS

RACK_NODES = 32

# Job states in the replay (plain ints: compared in the hottest loops). MOVING: checkpointing
# on its way to another node (consolidation), not preempted.
FUTURE, PENDING, RUNNING, PREEMPTED, DONE, REJECTED, MOVING = range(7)


class ReplayJob:
    """One trace job: its hidden true duration, its progress and its engine views."""

    __slots__ = (
        "idx",
        "key",
        "queue",
        "equeue",
        "tier",
        "gpus",
        "rdma",
        "model",
        "preemptible",
        "submit",
        "duration",
        "progress",
        "state",
        "first_start",
        "finish",
        "runs",
        "evictions",
        "gpu_s",
        "evicted_gpu_s",
        "moves",
        "demoted",
        "placement",
        "last_placement",
        "started_at",
        "last_ckpt",
        "borrowed",
        "pview",
        "rview",
        "pool",
        "predicted_s",
        "predicted_source",
        "evicted_at",
        "move_to",
    )

    def __init__(self, idx: int, tj, pool: Pool) -> None:
        self.idx = idx
        self.key = tj.id
        self.queue = tj.queue
        self.tier = Tier.parse(tj.tier)
        self.equeue = f"{tj.queue}/{self.tier.label}"
        self.gpus = tj.gpus
        self.rdma = tj.rdma
        self.model = tj.model_name
        self.preemptible = tj.preemptible
        self.submit = tj.submit_s
        self.duration = tj.duration_s
        self.progress = 0.0
        self.state = FUTURE
        self.first_start: float | None = None
        self.finish: float | None = None
        self.runs = 0
        self.evictions = 0
        self.gpu_s = 0.0  # GPU time of all its runs so far
        self.evicted_gpu_s = 0.0  # GPU time of its runs that ended evicted (R4)
        self.moves = 0  # times moved by consolidation (not evictions)
        self.demoted = False
        self.placement: tuple = ()
        self.last_placement: tuple = ()
        self.started_at = 0.0
        self.last_ckpt: float | None = None
        self.borrowed = False
        self.pview: PendingJob | None = None
        self.rview: RunningJob | None = None
        self.pool = pool
        self.predicted_s: float | None = None  # whole runtime predicted at first start
        self.predicted_source: str | None = None
        self.evicted_at: float | None = None  # last eviction (the borrowing cool-down)
        self.move_to: str | None = None  # moved: the node kept for its restart (kept_rooms)

    def run_gpu_s(self, t: float) -> float:
        """GPU-seconds of its current run up to ``t`` (started at ``started_at``)."""
        return self.gpus * max(0.0, t - self.started_at)

    def pending_view(self, predicted_s: float, order_key: float) -> PendingJob:
        """The job waiting, as the engine sees it; ``order_key`` goes in ``submitted_at``."""
        v = self.pview
        if (
            v is None
            or v.predicted_runtime_s != predicted_s
            or v.preemption_count != self.evictions
            or v.submitted_at != order_key
            or v.last_evicted_at != self.evicted_at
            or v.move_to != self.move_to
        ):
            v = self.pview = PendingJob(
                id=self.idx,
                queue=self.equeue,
                line=self.queue,
                tier=self.tier,
                gpus=self.gpus,
                rdma=self.rdma,
                preemptible=self.preemptible,
                submitted_at=order_key,
                preemption_count=self.evictions,
                model_name=self.model,
                predicted_runtime_s=predicted_s,
                pool=self.pool.name,
                last_evicted_at=self.evicted_at,
                move_to=self.move_to,
            )
        return v

    def running_view(self, predicted_end: float) -> RunningJob:
        """The job running, as the engine sees it (the caller caches it in ``rview``)."""
        return RunningJob(
            id=self.idx,
            queue=self.equeue,
            line=self.queue,
            tier=self.tier,
            gpus=self.gpus,
            placement=tuple(Slot(n, g) for n, g in self.placement),
            preemptible=self.preemptible,
            preemption_count=self.evictions,
            started_at=self.started_at,
            last_checkpoint_at=self.last_ckpt,
            predicted_end=predicted_end,
            model_name=self.model,
            borrowed=self.borrowed,
            checkpointable=True,  # the simulator checkpoints every run, and on a graceful stop
        )


class Pool:
    """One partition of the cluster, planned by its own engine call."""

    def __init__(
        self,
        name: str,
        nodes: list[SimNode],
        lines: tuple[LineView, ...],
        queues: tuple[QueueView, ...],
        window: float,
    ) -> None:
        self.name = name
        self.by_name = {n.name: n for n in nodes}
        self.names = [n.name for n in nodes]
        self.total = {n.name: n.gpus_total for n in nodes}
        self.free: dict[str, set[int]] = {n.name: set(range(n.gpus_total)) for n in nodes}
        self.views: dict[str, NodeView | None] = dict.fromkeys(self.names)
        self.recent: dict[str, tuple[str, ...]] = dict.fromkeys(self.names, ())
        self.capacity = sum(self.total.values())
        self.free_total = self.capacity
        self.lines = lines
        self.queues = queues
        self.pending: dict[int, ReplayJob] = {}
        self.running: dict[int, ReplayJob] = {}
        self.borrowed_running = 0
        self.dirty = False
        self.head_blocked = False  # last plan (without backfill) ended blocked for capacity
        self.last_plan = -1e18
        self.frag = m.FragMeter(self.capacity, len(nodes), NODE_GPUS, window)

    def view(self, name: str) -> NodeView:
        v = self.views[name]
        if v is None:
            sn = self.by_name[name]
            v = self.views[name] = NodeView(
                name=name,
                rack=sn.rack,
                block=sn.block,
                gpu_model=sn.gpu_model,
                gpu_memory_gb=sn.gpu_memory_gb,
                gpus_total=sn.gpus_total,
                free_gpus=tuple(sorted(self.free[name])),
                rdma=sn.rdma,
                recent_models=self.recent[name],
                pool=self.name,
            )
        return v

    def take(self, name: str, gpus: tuple[int, ...]) -> None:
        free = self.free[name]
        if len(free) == self.total[name]:
            self.frag.whole -= 1
        free.difference_update(gpus)
        self.free_total -= len(gpus)
        self.frag.idle -= len(gpus)
        self.views[name] = None

    def give(self, name: str, gpus: tuple[int, ...]) -> None:
        free = self.free[name]
        free.update(gpus)
        self.free_total += len(gpus)
        self.frag.idle += len(gpus)
        if len(free) == self.total[name]:
            self.frag.whole += 1
        self.views[name] = None


def pool_nodes(pool: str, gpus: int) -> list[SimNode]:
    """``gpus/8`` uniform nodes of one isolated pool, in racks of 32, one block."""
    out = []
    for i in range(gpus // NODE_GPUS):
        r = i // RACK_NODES
        out.append(
            SimNode(
                name=f"{pool}-r{r:02d}-n{i % RACK_NODES:02d}",
                rack=f"{pool}-r{r:02d}",
                block=f"{pool}-b0",
                gpu_model="H100",
                gpu_memory_gb=80,
            )
        )
    return out
