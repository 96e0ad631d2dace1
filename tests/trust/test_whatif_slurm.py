"""The what-if on a real Slurm (tests/testbeds/slurm.py: 4 nodes x 8 GPUs, racks of two).

On a backend other than the simulator the what-if asks the backend's ``observe`` (sinfo,
squeue: reads); it must never submit, cancel, signal, hold, requeue, drain or resume
anything, and the next cycle must do what it said. Slurm runs on the wall clock, so the
estimated start may move by the seconds between the question and the cycle.
"""

from __future__ import annotations

import pytest

from scheduling import whatif
from scheduling.backends.slurm_cli import SlurmCLI
from tests.backends.conftest import slurm, slurm_cluster  # noqa: F401 - its fixtures
from tests.backends.test_slurm_backend import Portal, portal  # noqa: F401 - its fixture

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]

CHANGES = ("submit", "cancel", "signal", "requeue", "hold", "release", "drain", "resume")


def ask_submit_cycle(bed: Portal, monkeypatch, **fields):
    """The what-if (with every call that changes Slurm refused), the submission, the cycle."""
    with monkeypatch.context() as m:
        for name in CHANGES:
            m.setattr(SlurmCLI, name, _refuse(name))
        answer = whatif.what_if(bed.users["researcher"], _request(**fields))
    job = bed.submit(**fields)
    bed.cycle()
    job.refresh_from_db()
    assert whatif.verdict_of(job) == (answer.status, answer.code), (
        answer.message,
        job.pending_message,
    )
    return answer, job


def _refuse(name):
    def call(*args, **kwargs):
        raise AssertionError(f"the what-if called SlurmCLI.{name}")

    return call


def _request(**fields):
    from scheduling.services import JobRequest

    values = {"name": "job", "queue": "llm-core", "gpus": 8, **fields}
    return JobRequest(**values)


def test_on_slurm_the_what_if_only_reads_and_the_next_cycle_agrees(
    portal: Portal,  # noqa: F811 - the fixture imported above
    monkeypatch,
):
    whatif.clear_cache()
    held = [portal.submit(user="lead", name=f"hold{i}", gpus=8) for i in range(3)]
    portal.cycle()
    portal.ready(*held)
    portal.cycle()  # the runs are observed running

    wide, job = ask_submit_cycle(portal, monkeypatch, name="wide", gpus=16)
    assert wide.status == "would_wait" and wide.code in ("INSUFFICIENT_GPUS", "TOPOLOGY")
    assert job.queue_position == wide.position
    if wide.estimated_start is not None:
        assert abs(job.estimated_start.timestamp() - wide.estimated_start) < 120

    short, job = ask_submit_cycle(
        portal, monkeypatch, name="short", gpus=4, estimated_runtime_minutes=10
    )
    assert short.starts and job.state == "running"
    assert set(job.allocations.values_list("node__name", flat=True)) == set(short.nodes)
    whatif.clear_cache()
