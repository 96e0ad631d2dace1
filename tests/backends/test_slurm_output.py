"""The Slurm backend's ``read_output`` on the real test bed (tests/testbeds/slurm.py):
``SLURM_JOB_OUTPUT`` in a directory the test controls, a job script that prints a lot,
bytes that are not UTF-8 and an error on stderr, then fails."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scheduling.backends.base import FAILED, NoOutput, OutputTail
from scheduling.backends.slurm_cli import SlurmCLI
from scheduling.engine.types import Slot
from tests.backends.contract import launch_request, polling_settle, state_of
from tests.backends.test_contract_slurm import slurm_backend
from tests.testbeds.slurm import SlurmTestbed

pytestmark = pytest.mark.slurm

SCRIPT = r"""#!/bin/bash
trap 'echo "checkpoint: $PORTAL_RUN_REF"; exit 0' USR1
echo "ready: $PORTAL_RUN_REF"
for i in $(seq 1 2000); do echo "step $i loss 0.$i"; done
printf 'bad \xff\xfe bytes \033[31mred\033[0m\n'
echo "Traceback: CUDA error: an illegal memory access was encountered" >&2
exit 3
"""


def test_read_output_of_a_run_on_a_real_slurm(slurm: SlurmCLI, slurm_cluster: SlurmTestbed,
                                              tmp_path: Path):  # fmt: skip
    tmp_path.chmod(0o755)
    logs = tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT)
    backend = slurm_backend(slurm_cluster, logs, job_script=str(script))
    req = launch_request(2_000_001, [Slot(slurm_cluster.nodes[0], (0,))])
    backend.launch(req)
    settle = polling_settle(backend, clock=time.monotonic, wait=lambda: time.sleep(0.2))
    settle(state_of(req.ref, FAILED), 30, "the run to fail")

    out = backend.read_output(req.ref, 64 * 1024)
    assert isinstance(out, OutputTail) and not out.truncated
    files = list(logs.glob(f"{req.ref}-*.out"))
    assert [str(p) for p in files] == [out.source]  # Slurm's StdOut, expanded
    whole = files[0].read_bytes()
    assert out.data == whole and out.data.startswith(f"ready: {req.ref}\n".encode())
    assert b"bad \xff\xfe bytes \x1b[31mred" in out.data  # raw: the portal decodes and cleans
    assert out.data.endswith(b"Traceback: CUDA error: an illegal memory access was encountered\n")

    cut = backend.read_output(req.ref, 1000)
    assert isinstance(cut, OutputTail) and cut.truncated and cut.data == whole[-1000:]

    secret = tmp_path / "secret"
    secret.write_text("not for the portal to show")
    files[0].unlink()
    files[0].symlink_to(secret)  # the job (or anyone) swaps its output for a link out
    refused = backend.read_output(req.ref, 1000)
    assert isinstance(refused, NoOutput) and b"not for" not in refused.reason.encode()


def test_read_output_with_output_discarded(slurm: SlurmCLI, slurm_cluster: SlurmTestbed):
    backend = slurm_backend(slurm_cluster, Path("/unused"))
    backend.job_output = "/dev/null"  # the default
    req = launch_request(2_000_002, [Slot(slurm_cluster.nodes[1], (0,))], duration_s=1.0)
    backend.launch(req)
    out = backend.read_output(req.ref, 1000)
    assert isinstance(out, NoOutput) and "SLURM_JOB_OUTPUT" in out.reason
