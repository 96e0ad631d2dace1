"""The built-in simulator as a backend: ``scheduling.simcore`` with its state in the database.

Opening the backend locks the one ``SimulatorState`` row, rebuilds the
simulator and advances its virtual clock by the wall time elapsed since it was
saved times the speed factor. ``close`` saves it in the same transaction as the
cycle's own writes, so a worker dying mid-cycle rolls the cluster back with the
database: nothing launched twice, nothing lost.
"""

from __future__ import annotations

import hashlib
import math
import time

from django.conf import settings

from scheduling.backends.base import (
    LaunchRequest,
    Observation,
    ObservedJob,
    ObservedNode,
    PermanentBackendError,
    TransientBackendError,
    parse_run_ref,
)
from scheduling.clock import MAX_CATCH_UP_S, catch_up
from scheduling.engine.types import Slot
from scheduling.models import Node, SimulatorState
from scheduling.simcore import observation as ob
from scheduling.simcore.cluster import SimNode
from scheduling.simcore.errors import SimError
from scheduling.simcore.simulator import SimConfig, Simulator

HEALTH_DETAIL = {
    "gpu_failure": "GPU reports uncorrectable ECC / Xid errors",
    "rdma_degraded": "RDMA link degraded (packet loss on the fabric)",
    "down": "node unreachable (no heartbeat)",
}


def _wrap(err: SimError) -> Exception:
    cls = PermanentBackendError if err.permanent else TransientBackendError
    return cls(err.message, code=err.code)


def drawn_duration_s(ref_job_id: int, seed: int = 0) -> float:
    """A hidden true run time for jobs that give none: log-normal, median 2 h, seeded by job id."""
    digest = hashlib.blake2b(f"{seed}:{ref_job_id}".encode(), digest_size=8).digest()
    u1 = (int.from_bytes(digest[:4], "big") + 1) / (2**32 + 1)
    u2 = (int.from_bytes(digest[4:], "big") + 1) / (2**32 + 1)
    z = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
    return max(300.0, min(7 * 86400.0, 7200.0 * math.exp(1.0 * z)))


def build_simulator_from_nodes(seed: int, now: float) -> Simulator:
    nodes = [
        SimNode(
            name=n.name,
            rack=n.rack,
            block=n.block,
            gpu_model=n.gpu_model,
            gpu_memory_gb=n.gpu_memory_gb,
            gpus_total=n.gpus_total,
            rdma=n.rdma,
            inference=n.inference,
        )  # fmt: skip
        for n in Node.objects.order_by("name")
    ]
    # Ended runs are reconciled within a cycle; keep them long enough to survive the
    # longest catch-up after downtime, no longer (they are most of the saved state).
    config = SimConfig(ended_job_retention_s=2 * MAX_CATCH_UP_S, residual_probability=0.005)
    return Simulator(nodes, seed=seed, now=now, config=config)


class SimulatorBackend:
    """The simulated cluster, loaded for one cycle (call ``close`` to save)."""

    name = "simulator"

    def __init__(self, wall_now: float | None = None, *, advance: bool = True) -> None:
        from scheduling.models import ClusterSettings

        self.wall_now = time.time() if wall_now is None else wall_now
        row = SimulatorState.objects.select_for_update().filter(singleton=True).first()
        if row is None or self._cluster_changed(row):
            sim = build_simulator_from_nodes(ClusterSettings.load().seed, self.wall_now)
            if row is None:
                row = SimulatorState(singleton=True, speed=settings.SIMULATOR_SPEED)
            row.saved_wall = self.wall_now
            row.virtual_now = sim.now
        else:
            sim = Simulator.from_dict(row.state)
        self.row = row
        self.sim = sim
        self.events: list[ob.SimEvent] = []
        if advance:
            self.advance(catch_up(self.wall_now - row.saved_wall, row.speed))

    @staticmethod
    def _cluster_changed(row: SimulatorState) -> bool:
        names = [r[0] for r in row.state.get("nodes", [])]
        return sorted(names) != list(Node.objects.order_by("name").values_list("name", flat=True))

    # -- clock ---------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        """Move the virtual clock (events are kept for ``observe``)."""
        if seconds > 0:
            self.events.extend(self.sim.advance(seconds))

    def now(self) -> float:
        return self.sim.now

    # -- the interface --------------------------------------------------------
    def observe(self) -> Observation:
        raw = self.sim.observe()
        nodes = tuple(
            ObservedNode(
                name=n.name,
                rack=n.rack,
                block=n.block,
                gpu_model=n.gpu_model,
                gpu_memory_gb=n.gpu_memory_gb,
                gpus_total=n.gpus_total,
                rdma=n.rdma,
                inference=n.inference,
                health=n.health,
                health_detail=HEALTH_DETAIL.get(n.health, ""),
                cordoned=n.cordoned,
                free_gpus=n.free_gpus,
                residual_gpus=tuple(g for g, _ in n.residual_gpus),
                inference_shortfall=n.inference_shortfall,
            )  # fmt: skip
            for n in raw.nodes
        )
        jobs = []
        for j in raw.jobs:
            parsed = parse_run_ref(j.job_id)
            jobs.append(
                ObservedJob(
                    ref=j.job_id,
                    job_id=parsed[0] if parsed else None,
                    state=j.state,
                    placement=tuple(Slot(node, tuple(g)) for node, g in j.placement),
                    progress_s=j.progress_s,
                    last_checkpoint_at=j.last_checkpoint_at,
                    end_reason=j.end_reason or "",
                )
            )
        pressure = {
            n.name: tuple(n.jobs) for n in raw.nodes if n.inference and n.inference_shortfall > 0
        }
        return Observation(now=raw.now, nodes=nodes, jobs=tuple(jobs), inference_pressure=pressure)

    def launch(self, request: LaunchRequest) -> None:
        duration = request.sim_duration_s or drawn_duration_s(request.job_id, self.sim.seed)
        try:
            self.sim.launch(
                request.ref,
                [(s.node, s.gpus) for s in request.placement],
                true_duration_s=duration,
                progress_s=min(request.progress_s, duration * 0.999),
                checkpoint_interval_s=request.checkpoint_interval_s,
            )
        except SimError as err:
            raise _wrap(err) from err

    def checkpoint_and_stop(self, ref: str, grace_s: float) -> None:
        try:
            self.sim.request_checkpoint_stop(ref, grace_s)
        except SimError as err:
            raise _wrap(err) from err

    def kill(self, ref: str) -> None:
        try:
            self.sim.kill(ref)
        except SimError as err:
            if err.code != "unknown_job":
                raise _wrap(err) from err

    def cordon(self, node: str, reason: str) -> None:
        try:
            self.sim.cordon(node)
        except SimError as err:
            raise _wrap(err) from err

    def uncordon(self, node: str) -> None:
        try:
            if self.sim.nodes[node].health != "ok":
                self.sim.repair(node)  # the simulator's stand-in for "fixed by the vendor"
            self.sim.uncordon(node)
        except (SimError, KeyError) as err:
            raise PermanentBackendError(f"cannot uncordon {node}: {err}") from err

    def clean_residual(self, node: str) -> int:
        try:
            return self.sim.clean_residual(node)
        except SimError as err:
            raise _wrap(err) from err

    def inject_fault(self, kind: str, node: str) -> None:
        try:
            self.sim.inject_fault(kind, node)
        except SimError as err:
            raise _wrap(err) from err

    def close(self) -> None:
        self.row.state = self.sim.to_dict()
        self.row.virtual_now = self.sim.now
        self.row.saved_wall = self.wall_now
        self.row.save()
