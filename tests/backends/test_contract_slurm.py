"""The backend contract (tests/backends/contract.py) on a real Slurm.

The session's four-node test bed (tests/testbeds/slurm.py: gpu1..gpu4, eight fake
GPUs each, racks of two) is reset before and after each test; time is real, so
every wait is polled and bounded.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from scheduling.backends.slurm import SlurmBackend
from scheduling.backends.slurm_cli import SlurmCLI
from tests.backends.contract import BackendContract, Harness, polling_settle
from tests.testbeds.slurm import SlurmTestbed, wait_until

POLL_S = 0.2
# Each test's job ids start at its own base (``Harness.job_base``): squeue keeps ended jobs
# for MinJobAge (300 s), so a ref an earlier test ended, in this file or another (whose
# portal jobs have small ids), would show in the next test that uses it.
JOB_BASES = itertools.count(1_000_000, 100)

pytestmark = pytest.mark.slurm


def script_ready(out_dir: Path, ref: str, timeout: float = 15.0) -> None:
    """Wait until the run's job script has set its USR1 trap (it prints ``ready:``).

    Slurm reports RUNNING before the batch shell has started: a signal sent
    earlier would kill the shell instead of asking it to checkpoint.
    """
    wait_until(
        lambda: any("ready:" in p.read_text() for p in out_dir.glob(f"{ref}-*.out")),
        timeout,
        f"{ref}'s job script to be ready",
    )


def slurm_backend(testbed: SlurmTestbed, out_dir: Path, **kwargs) -> SlurmBackend:
    return SlurmBackend(
        conf=str(testbed.conf),
        job_output=str(out_dir / "%x-%j.out"),
        workdir=str(out_dir),
        grace_s=kwargs.pop("grace_s", 30.0),
        timeout=20,
        **kwargs,
    )


@pytest.fixture
def harness(slurm: SlurmCLI, slurm_cluster: SlurmTestbed, tmp_path: Path) -> Harness:
    tmp_path.chmod(0o755)
    backend = slurm_backend(slurm_cluster, tmp_path)

    return Harness(
        backend=backend,
        nodes=tuple(slurm_cluster.nodes),
        settle=polling_settle(backend, clock=time.monotonic, wait=lambda: time.sleep(POLL_S)),
        grace_s=20.0,
        short_run_s=2.0,
        ready=lambda ref: script_ready(tmp_path, ref),
        job_base=next(JOB_BASES),
    )


class TestSlurmContract(BackendContract):
    """Every promise of the backend interface, on the real four-node Slurm."""
