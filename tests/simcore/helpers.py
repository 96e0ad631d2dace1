"""Small, quiet simulators for tests: no random failures or faults unless asked."""

from __future__ import annotations

from dataclasses import replace

from scheduling.simcore import SimConfig, Simulator, build_demo_cluster

QUIET = SimConfig(
    job_failure_rate_per_gpu_hour=0.0,
    node_fault_rate_per_node_hour=0.0,
    residual_probability=0.0,
)


def quiet_sim(nodes: int = 4, nodes_per_rack: int = 2, seed: int = 0, **config) -> Simulator:
    """A uniform cluster (all H100, all RDMA, no inference) where nothing happens by chance."""
    return Simulator(
        build_demo_cluster(nodes=nodes, nodes_per_rack=nodes_per_rack, uniform=True),
        seed=seed,
        config=replace(QUIET, **config),
    )


def kinds(events) -> list[str]:
    return [e.kind for e in events]
