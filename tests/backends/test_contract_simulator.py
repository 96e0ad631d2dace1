"""The backend contract (tests/backends/contract.py) on the simulator backend.

Twice: with its state in the database (the portal's store, opened by the factory as
the loop opens it, on four seeded uniform nodes) and with its state in memory (the
backend alone, no Django). Random failures and residual processes are switched off
so that only the contract is under test; time passes by advancing its virtual clock.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from django.core.management import call_command

from scheduling.backends.simulator import SimulatorBackend
from tests.backends.contract import BackendContract, Harness, polling_settle
from tests.backends.sim_stores import MemorySimulatorStore

STEP_S = 5.0  # virtual seconds per step while waiting


def database_backend(request: pytest.FixtureRequest) -> SimulatorBackend:
    from scheduling.backend_factory import open_simulator

    call_command(
        "seed_demo", nodes=4, nodes_per_rack=2, uniform=True, no_workload=True, stdout=None
    )
    return open_simulator(wall_now=time.time(), advance=False)


def memory_backend(request: pytest.FixtureRequest) -> SimulatorBackend:
    return SimulatorBackend(MemorySimulatorStore(), wall_now=time.time(), advance=False)


# The mark, not a fixture looked up inside ``harness``, sets the test database up: looked
# up late, it was only there when an earlier test of the session had set it up.
@pytest.fixture(
    params=[pytest.param(database_backend, marks=pytest.mark.django_db), memory_backend],
    ids=["database", "memory"],
)
def harness(request: pytest.FixtureRequest) -> Harness:
    backend = request.param(request)
    sim = backend.sim
    sim.set_rates(job_failure_rate_per_gpu_hour=0.0, node_fault_rate_per_node_hour=0.0)
    sim.config = replace(sim.config, residual_probability=0.0)

    return Harness(
        backend=backend,
        nodes=tuple(sorted(n.name for n in sim.nodes.values())),
        settle=polling_settle(
            backend, clock=backend.now, wait=lambda: backend.advance(STEP_S), unit="virtual s"
        ),
        grace_s=120.0,  # a simulated checkpoint takes 60 s of cluster time
        short_run_s=600.0,
    )


class TestSimulatorContract(BackendContract):
    """Every promise of the backend interface, on the simulator."""


def test_a_failed_run_says_why_in_words_not_the_simulators_codes():
    """Page walk: a job's page read "run failed (random)", "run failed (rdma_degraded)" and
    "Failure: random; no retries left": the simulator's own tags, where the Slurm and
    Kubernetes backends say "node failure on gpu1" or "exit code 3"."""
    from scheduling.backends.base import FAILED
    from scheduling.engine.types import Slot
    from tests.backends.contract import job_of, launch_request

    backend = memory_backend(None)
    sim = backend.sim
    sim.set_rates(job_failure_rate_per_gpu_hour=0.0, node_fault_rate_per_node_hour=0.0)
    node = sorted(sim.nodes)[0]
    backend.launch(launch_request(1, [Slot(node, (0,))]))
    backend.inject_fault("gpu_failure", node)
    backend.advance(STEP_S)
    ended = job_of(backend.observe(), launch_request(1, []).ref)
    assert ended.state == FAILED
    assert ended.end_reason == "GPU reports uncorrectable ECC / Xid errors"
    sim.set_rates(job_failure_rate_per_gpu_hour=1e9, node_fault_rate_per_node_hour=0.0)
    other = sorted(sim.nodes)[1]
    backend.launch(launch_request(2, [Slot(other, (0,))]))
    backend.advance(STEP_S)
    crashed = job_of(backend.observe(), launch_request(2, []).ref)
    assert crashed.state == FAILED and crashed.end_reason == "the training process crashed"
