"""Fixtures for backend tests that drive a real Slurm (tests/testbeds/slurm.py).

Nothing is skipped: without Slurm installed the fixture fails and says how to
install it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduling.backends.slurm_cli import SlurmCLI
from tests.testbeds.slurm import INSTALL_HINT, SlurmTestbed, missing_binaries


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmTestbed]:
    """One real slurmctld + four slurmd (gpu1..gpu4, 8 fake GPUs each) for the session."""
    missing = missing_binaries()
    if missing:
        pytest.fail(INSTALL_HINT.format(missing=", ".join(missing)), pytrace=False)
    with SlurmTestbed() as testbed:
        yield testbed


@pytest.fixture
def slurm(slurm_cluster: SlurmTestbed) -> Iterator[SlurmCLI]:
    """A client for the session's cluster; the cluster is reset (no jobs, all nodes idle)
    before and after each test."""
    slurm_cluster.reset()
    yield SlurmCLI(env=slurm_cluster.env, timeout=20)
    slurm_cluster.reset()
