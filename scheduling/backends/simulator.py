"""The built-in simulator as a backend: ``scheduling.simcore`` behind the backend interface.

Django-free: the simulator is loaded from and saved to a ``SimulatorStore``
(``scheduling/backends/sim_store.py``) the factory hands it; the portal's store is the
one ``SimulatorState`` row (``scheduling/sim_state.py``), locked for the cycle.
Opening the backend rebuilds the simulator (from its save, or afresh from the
store's node inventory when that changed) and advances its virtual clock by the wall
time elapsed since it was saved times the speed factor. ``close`` saves it in the same
transaction as the cycle's own writes, so a worker dying mid-cycle rolls the cluster
back with the database: nothing launched twice, nothing lost.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from typing import Self

from scheduling.backends.base import (
    ENDED,
    FAILED,
    HEALTH_DOWN,
    HEALTH_GPU_FAILURE,
    HEALTH_RDMA_DEGRADED,
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
from scheduling.backends.config import BackendContext
from scheduling.backends.sim_output import RunFacts, synthetic_tail
from scheduling.backends.sim_store import (
    MAX_CATCH_UP_S,
    SavedSimulator,
    SimulatorStore,
    catch_up,
)
from scheduling.engine.types import Slot
from scheduling.simcore import observation as ob
from scheduling.simcore.cluster import SimNode
from scheduling.simcore.errors import SimError
from scheduling.simcore.simulator import SimConfig, Simulator

HEALTH_DETAIL = {
    HEALTH_GPU_FAILURE: "GPU reports uncorrectable ECC / Xid errors",
    HEALTH_RDMA_DEGRADED: "packet loss on the RDMA fabric",
    HEALTH_DOWN: "no heartbeat from the node",
}
# Why a simulated run failed, in words, as the other backends say it ("node failure on
# gpu1"): the simulator tags it with a code, a node fault's kind or "random".
FAILURE_DETAIL = {**HEALTH_DETAIL, "random": "the training process crashed"}
# What the simulator reports of a node as is (the rest: health words, residual GPU indices).
_SAME_NODE_FIELDS = tuple(
    f.name for f in fields(ObservedNode) if f.name not in ("health_detail", "residual_gpus")
)
DEFAULT_SPEED = 60.0  # virtual seconds per wall second when SIMULATOR_SPEED is not set


@contextmanager
def _backend_errors(*, ignore: tuple[str, ...] = ()) -> Iterator[None]:
    """The simulator's errors as backend errors (same code and permanence); codes in
    ``ignore`` are no error at all."""
    try:
        yield
    except SimError as err:
        if err.code in ignore:
            return
        cls = PermanentBackendError if err.permanent else TransientBackendError
        raise cls(err.message, code=err.code) from err


def drawn_duration_s(ref_job_id: int, seed: int = 0) -> float:
    """A hidden true run time for jobs that give none: log-normal, median 2 h, seeded by job id."""
    digest = hashlib.blake2b(f"{seed}:{ref_job_id}".encode(), digest_size=8).digest()
    u1 = (int.from_bytes(digest[:4], "big") + 1) / (2**32 + 1)
    u2 = (int.from_bytes(digest[4:], "big") + 1) / (2**32 + 1)
    z = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
    return max(300.0, min(7 * 86400.0, 7200.0 * math.exp(1.0 * z)))


def build_simulator(nodes: Sequence[SimNode], seed: int, now: float) -> Simulator:
    """A fresh simulated cluster of ``nodes`` at virtual time ``now``."""
    # Ended runs are reconciled within a cycle; keep them long enough to survive the
    # longest catch-up after downtime, no longer (they are most of the saved state).
    config = SimConfig(ended_job_retention_s=2 * MAX_CATCH_UP_S, residual_probability=0.005)
    return Simulator(list(nodes), seed=seed, now=now, config=config)


class SimulatorBackend(ClusterBackend):
    """The simulated cluster, loaded from ``store`` for one cycle (call ``close`` to save).

    ``speed`` is the clock speed of a simulator saved for the first time; a saved one
    keeps its own (operators and tests change it in the save).
    """

    name = "simulator"

    def __init__(
        self,
        store: SimulatorStore,
        *,
        wall_now: float | None = None,
        advance: bool = True,
        speed: float = DEFAULT_SPEED,
    ) -> None:
        self.store = store
        self.wall_now = time.time() if wall_now is None else wall_now
        saved = store.load()
        nodes = store.nodes()
        if saved is None or saved.node_names() != sorted(n.name for n in nodes):
            # First start, or the inventory changed: a fresh cluster from now on.
            self.sim = build_simulator(nodes, store.seed(), self.wall_now)
            self.speed = speed if saved is None else saved.speed
            saved_wall = self.wall_now
        else:
            self.sim = saved.simulator()
            self.speed = saved.speed
            saved_wall = saved.saved_wall
        self.events: list[ob.SimEvent] = []
        if advance:
            self.advance(catch_up(self.wall_now - saved_wall, self.speed))

    @classmethod
    def open(cls, context: BackendContext) -> Self:
        """Needs ``context.simulator_store``; ``SIMULATOR_SPEED`` sets a first save's speed."""
        if context.simulator_store is None:
            raise PermanentBackendError("the simulator needs a state store", code="bad_config")
        speed = float(context.config.get("SIMULATOR_SPEED", DEFAULT_SPEED))
        return cls(context.simulator_store, wall_now=context.wall_now, advance=context.advance,
                   speed=speed)  # fmt: skip

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
                **{f: getattr(n, f) for f in _SAME_NODE_FIELDS},
                health_detail=HEALTH_DETAIL.get(n.health, ""),
                residual_gpus=tuple(g for g, _ in n.residual_gpus),
            )
            for n in raw.nodes
        )
        jobs = []
        for j in raw.jobs:
            parsed = parse_run_ref(j.job_id)
            reason = j.end_reason or ""
            jobs.append(
                ObservedJob(
                    ref=j.job_id,
                    job_id=parsed[0] if parsed else None,
                    state=j.state,
                    placement=tuple(Slot(node, tuple(g)) for node, g in j.placement),
                    progress_s=j.progress_s,
                    last_checkpoint_at=j.last_checkpoint_at,
                    end_reason=FAILURE_DETAIL.get(reason, reason) if j.state == FAILED else reason,
                    ended_at=j.ended_at if j.state in ENDED else None,
                )
            )
        pressure = {
            n.name: tuple(n.jobs) for n in raw.nodes if n.inference and n.inference_shortfall > 0
        }
        return Observation(now=raw.now, nodes=nodes, jobs=tuple(jobs), inference_pressure=pressure)

    def launch(self, request: LaunchRequest) -> None:
        duration = request.sim_duration_s or drawn_duration_s(request.job_id, self.sim.seed)
        with _backend_errors():
            self.sim.launch(
                request.ref,
                [(s.node, s.gpus) for s in request.placement],
                true_duration_s=duration,
                progress_s=min(request.progress_s, duration * 0.999),
                checkpoint_interval_s=request.checkpoint_interval_s,
            )

    def checkpoint_and_stop(self, ref: str, grace_s: float) -> None:
        with _backend_errors():
            self.sim.request_checkpoint_stop(ref, grace_s)

    def kill(self, ref: str) -> None:
        with _backend_errors(ignore=("unknown_job",)):  # killing what is gone: nothing to do
            self.sim.kill(ref)

    def cordon(self, node: str, reason: str) -> None:
        with _backend_errors():
            self.sim.cordon(node)

    def uncordon(self, node: str) -> None:
        try:
            if self.sim.nodes[node].health != "ok":
                self.sim.repair(node)  # the simulator's stand-in for "fixed by the vendor"
            self.sim.uncordon(node)
        except (SimError, KeyError) as err:
            raise PermanentBackendError(f"cannot uncordon {node}: {err}") from err

    def clean_residual(self, node: str) -> int:
        with _backend_errors():
            return self.sim.clean_residual(node)

    def read_output(self, ref: str, max_bytes: int, *, checkpoint_path: str = "") -> OutputAnswer:
        """Synthetic, deterministic output of the run (``scheduling/backends/sim_output.py``),
        while the simulator remembers it (ended runs are forgotten after a while)."""
        job = self.sim.jobs.get(ref)
        if job is None:
            return NoOutput(
                "the simulator no longer remembers this run (it keeps ended runs "
                f"{self.sim.config.ended_job_retention_s / 3600:g} h) or never ran it"
            )
        stale = {}
        for name, _ in job.placement:  # stale processes stay where the run ran
            held = tuple(sorted(g for g, owner in self.sim.nodes[name].residual.items()
                                if owner == ref))  # fmt: skip
            if held:
                stale[name] = held
        reason = job.end_reason or ""
        facts = RunFacts(job=job, now=self.sim.now, checkpoint_path=checkpoint_path,
                         failure_words=FAILURE_DETAIL.get(reason, reason), stale_gpus=stale)  # fmt: skip
        return synthetic_tail(facts, max_bytes)

    def inject_fault(self, kind: str, node: str) -> None:
        with _backend_errors():
            self.sim.inject_fault(kind, node)

    def close(self) -> None:
        """Save the simulator and its clock (inside the caller's transaction)."""
        self.store.save(
            SavedSimulator(
                state=self.sim.to_dict(),
                virtual_now=self.sim.now,
                saved_wall=self.wall_now,
                speed=self.speed,
                live=self.sim,
            )  # fmt: skip
        )
