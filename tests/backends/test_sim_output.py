"""The simulator's output of a run (``scheduling/backends/sim_output.py``): deterministic lines
from what the simulator knows, for a run started, preempted, failed, done, killed, and one
that left stale processes. No database: the in-memory store."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.backends.base import NoOutput, OutputTail
from scheduling.backends.sim_output import PROGRESS_EVERY_S
from scheduling.backends.simulator import SimulatorBackend
from scheduling.engine.types import Slot
from tests.backends.contract import launch_request
from tests.backends.sim_stores import MemorySimulatorStore

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
PATH = "nfs://ckpt/sft"


@pytest.fixture
def sim() -> SimulatorBackend:
    """4 nodes, no random failure or fault and no stale processes: only what a test does."""
    backend = SimulatorBackend(MemorySimulatorStore(), wall_now=T0, advance=False)
    backend.sim.set_rates(job_failure_rate_per_gpu_hour=0.0, node_fault_rate_per_node_hour=0.0)
    backend.sim.config = replace(backend.sim.config, residual_probability=0.0)
    return backend


def start(sim: SimulatorBackend, job_id: int = 7, *, node: int = 0, progress_s: float = 0.0,
          duration_s: float = 36_000.0):  # fmt: skip
    name = sorted(sim.sim.nodes)[node]
    req = launch_request(job_id, [Slot(name, (0, 1))], progress_s=progress_s,
                         checkpoint_interval_s=1800.0, duration_s=duration_s,
                         checkpoint_path=PATH)  # fmt: skip
    sim.launch(req)
    return req.ref, name


def text(sim: SimulatorBackend, ref: str, max_bytes: int = 1 << 20) -> str:
    out = sim.read_output(ref, max_bytes, checkpoint_path=PATH)
    assert isinstance(out, OutputTail) and out.source.startswith("simulator")
    return out.data.decode()


def test_a_started_run_says_where_it_runs_its_progress_and_checkpoints(sim):
    ref, node = start(sim, progress_s=600.0)
    sim.advance(3700.0)
    lines = text(sim, ref).splitlines()
    assert lines[0] == (f"2027-01-15T08:00:00Z [{ref}] started on {node} GPUs 0,1: resuming "
                        f"from step 60 (600 s of training) in {PATH}")  # fmt: skip
    assert lines[1] == "2027-01-15T08:05:00Z step 90: 900 s of training done"
    assert "2027-01-15T08:31:00Z checkpoint written to nfs://ckpt/sft/step-240 (progress " \
           "2400 s)" in lines  # fmt: skip
    assert sum("step " in line and "training done" in line for line in lines) == int(
        3700 // PROGRESS_EVERY_S
    )
    assert lines[-2:] == [
        "2027-01-15T09:00:00Z step 420: 4200 s of training done",
        f"2027-01-15T09:01:00Z checkpoint written to {PATH}/step-420 (progress 4200 s)",
    ]


def test_the_same_run_always_reads_the_same(sim):
    ref, _ = start(sim)
    sim.advance(5000.0)
    first = text(sim, ref)
    sim.close()
    reopened = SimulatorBackend(sim.store, wall_now=T0, advance=False)
    assert text(reopened, ref) == first == text(sim, ref)


def test_a_preempted_run_shows_the_request_and_its_checkpoint(sim):
    ref, _ = start(sim)
    sim.advance(1000.0)
    sim.checkpoint_and_stop(ref, 300.0)
    sim.advance(30.0)
    assert text(sim, ref).splitlines()[-2:] == [
        "2027-01-15T08:16:40Z received SIGTERM: the portal asks for a checkpoint and a stop "
        "within 300 s",
        "2027-01-15T08:17:10Z writing a checkpoint before stopping ...",
    ]
    sim.advance(60.0)
    assert text(sim, ref).splitlines()[-2:] == [
        f"2027-01-15T08:17:40Z checkpoint written to {PATH}/step-100 (progress 1000 s)",
        "2027-01-15T08:17:40Z stopped on request after its checkpoint: exit 0",
    ]


def test_a_failed_run_says_why(sim):
    ref, node = start(sim)
    sim.advance(2000.0)
    sim.inject_fault("gpu_failure", node)
    lines = text(sim, ref).splitlines()
    assert lines[-2] == "2027-01-15T08:33:20Z FATAL: GPU reports uncorrectable ECC / Xid errors"
    assert lines[-1] == ("2027-01-15T08:33:20Z run failed (exit 1); the last checkpoint holds "
                         "1800 s of training")  # fmt: skip


def test_a_run_that_finished_and_one_killed(sim):
    done, _ = start(sim, 8, duration_s=700.0)
    killed, _ = start(sim, 9, node=1)
    sim.advance(800.0)
    sim.kill(killed)
    assert text(sim, done).splitlines()[-1] == (
        "2027-01-15T08:11:40Z training complete after 700 s: exit 0"
    )
    assert "killed (SIGKILL) by the portal without a checkpoint" in text(sim, killed)


def test_stale_processes_a_run_left_are_in_its_output(sim):
    sim.sim.config = replace(sim.sim.config, residual_probability=1.0)
    ref, node = start(sim, duration_s=400.0)
    sim.advance(500.0)
    stale = [g for g, owner in sim.sim.nodes[node].residual.items() if owner == ref]
    assert stale
    last = text(sim, ref).splitlines()[-1]
    assert last.startswith("2027-01-15T08:06:40Z warning: processes of this run still hold GPU")
    assert f"on {node} after it ended (residual processes)" in last
    sim.clean_residual(node)
    assert "residual" not in text(sim, ref)


def test_the_tail_is_cut_to_max_bytes_and_a_long_run_costs_no_more(sim):
    ref, _ = start(sim, duration_s=30 * 86400.0)
    sim.advance(6 * 86400.0)
    whole = text(sim, ref)
    out = sim.read_output(ref, 100, checkpoint_path=PATH)
    assert out.truncated and out.data == whole.encode()[-100:]
    assert not sim.read_output(ref, len(whole.encode()), checkpoint_path=PATH).truncated


def test_a_run_the_simulator_does_not_know_has_no_output(sim):
    out = sim.read_output("portal-404-1", 1000)
    assert isinstance(out, NoOutput) and "no longer remembers" in out.reason
