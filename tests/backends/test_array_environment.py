"""A job array's task learns its place from its environment on every backend
(``LaunchRequest.array_environment``): ``PORTAL_ARRAY_ID`` and ``PORTAL_ARRAY_TASK_ID``, on a
real Slurm (the run prints them) and in the Volcano manifest; any other job has neither."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from scheduling.backends import volcano
from scheduling.backends.base import SUCCEEDED, OutputTail
from scheduling.backends.slurm_cli import SlurmCLI
from scheduling.engine.types import Slot
from tests.backends.contract import launch_request, polling_settle, state_of
from tests.backends.test_contract_slurm import slurm_backend
from tests.backends.test_volcano_manifests import SETTINGS, env, request
from tests.testbeds.slurm import SlurmTestbed

SCRIPT = """#!/bin/bash
echo "array=${PORTAL_ARRAY_ID-unset} task=${PORTAL_ARRAY_TASK_ID-unset} job=$PORTAL_JOB_ID"
"""


def task_of(req, array_id: int, index: int):
    return dataclasses.replace(req, array_id=array_id, array_index=index)


@pytest.mark.slurm
def test_a_task_on_a_real_slurm_reads_its_array_and_index(
    slurm: SlurmCLI, slurm_cluster: SlurmTestbed, tmp_path: Path
):
    tmp_path.chmod(0o755)
    logs = tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "task.sh"
    script.write_text(SCRIPT)
    backend = slurm_backend(slurm_cluster, logs, job_script=str(script))
    node = slurm_cluster.nodes[0]
    task = task_of(launch_request(2_000_101, [Slot(node, (0,))]), 42, 7)
    plain = launch_request(2_000_102, [Slot(node, (1,))])
    for req in (task, plain):
        backend.launch(req)
    settle = polling_settle(backend, clock=time.monotonic, wait=lambda: time.sleep(0.2))
    for req in (task, plain):
        settle(state_of(req.ref, SUCCEEDED), 30, "the run to end")
    said = {}
    for req in (task, plain):
        out = backend.read_output(req.ref, 4096)
        assert isinstance(out, OutputTail), out
        said[req.job_id] = out.data.decode().strip()
    assert said == {
        2_000_101: "array=42 task=7 job=2000101",
        2_000_102: "array=unset task=unset job=2000102",
    }


def test_a_task_in_the_volcano_manifest_reads_its_array_and_index():
    req = request([("gpu-a", (0, 1)), ("gpu-b", (0, 1))])
    job = volcano.build_job(task_of(req, 42, 7), SETTINGS)
    assert volcano.validate_job(job) == []
    for rank in (0, 1):
        e = env(job, rank)
        assert (e["PORTAL_ARRAY_ID"], e["PORTAL_ARRAY_TASK_ID"]) == ("42", "7")
    plain = env(volcano.build_job(req, SETTINGS), 0)
    assert "PORTAL_ARRAY_ID" not in plain and "PORTAL_ARRAY_TASK_ID" not in plain
