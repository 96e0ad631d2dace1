"""The backend contract (tests/backends/contract.py) on the simulator backend.

The simulator keeps its state in the database: seeded with four uniform nodes
(two racks of two), random failures and residual processes switched off so that
only the contract is under test; time passes by advancing its virtual clock.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from django.core.management import call_command

from scheduling.backends.base import Observation
from scheduling.backends.simulator import SimulatorBackend
from scheduling.models import Node
from tests.backends.contract import BackendContract, Harness

STEP_S = 5.0  # virtual seconds per step while waiting


@pytest.fixture
def harness(db) -> Harness:
    call_command(
        "seed_demo", nodes=4, nodes_per_rack=2, uniform=True, no_workload=True, stdout=None
    )
    backend = SimulatorBackend(wall_now=time.time(), advance=False)
    sim = backend.sim
    sim.set_rates(job_failure_rate_per_gpu_hour=0.0, node_fault_rate_per_node_hour=0.0)
    sim.config = replace(sim.config, residual_probability=0.0)

    def settle(pred, timeout: float, what: str) -> Observation:
        waited = 0.0
        while True:
            obs = backend.observe()
            if pred(obs):
                return obs
            if waited >= timeout:
                pytest.fail(f"timed out after {timeout:.0f} virtual s waiting for {what}")
            backend.advance(STEP_S)
            waited += STEP_S

    return Harness(
        backend=backend,
        nodes=tuple(Node.objects.order_by("name").values_list("name", flat=True)),
        settle=settle,
        grace_s=120.0,  # a simulated checkpoint takes 60 s of cluster time
        short_run_s=600.0,
    )


class TestSimulatorContract(BackendContract):
    """Every promise of the backend interface, on the simulator."""
