"""``gpuctl logs`` against a live portal on the simulator: the tail and its note, runs,
refusals with their exit codes, hostile output, a cluster that cannot answer, and ``-f``
following a job until it ends."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from quotas.models import BusinessLine, Queue
from scheduling.backends.base import OutputTail, TransientBackendError
from scheduling.backends.simulator import SimulatorBackend
from tests.drills import advance, cycle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def started(gpuctl, demo, api) -> int:
    """A researcher's job of 60 (simulated) minutes, started by a cycle."""
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    run = gpuctl("researcher", "submit", "sft", "-q", "llm-finetune", "-g", "2",
                 "--sim-duration-minutes", "60", "--checkpoint-path", "nfs://ckpt/sft",
                 "--checkpoint-interval-minutes", "20", "--json")  # fmt: skip
    job_id = json.loads(run.out)["id"]
    cycle(api("admin"))
    advance(api("admin"), 600)
    return job_id


def test_logs_prints_the_tail_and_a_note_on_stderr(gpuctl, started):
    run = gpuctl("researcher", "logs", str(started))
    assert run.code == 0, run.err
    assert run.err.startswith(f"==> job {started}, run 1 of 1, from simulator")
    assert f"[portal-{started}-1] started on" in run.out
    assert "step 30: 300 s of training done" in run.out
    cut = gpuctl("lead", "logs", str(started), "--bytes", "40", "--attempt", "1")
    assert cut.code == 0 and "only the end" in cut.err and len(cut.out.encode()) <= 40
    as_json = json.loads(gpuctl("oncall", "logs", str(started), "-o", "json").out)
    assert as_json["attempt"] == 1 and as_json["state"] == "running"


def test_logs_refusals_and_their_exit_codes(gpuctl, started):
    hidden = gpuctl("researcher2", "logs", str(started))
    assert hidden.code == 1 and hidden.err.startswith("gpuctl: error: not found")
    member = gpuctl("workload", "logs", str(started))
    assert member.code == 1 and "not allowed" in member.err and "team lead" in member.err
    for argv, words in ((["--attempt", "2"], "attempt: between 1 and 1"),
                        (["--bytes", "0"], "bytes"), (["--bytes", "2000000"], "bytes")):  # fmt: skip
        run = gpuctl("researcher", "logs", str(started), *argv)
        assert run.code == 1 and words in run.err, run.err
    assert gpuctl("researcher", "logs", "x").code == 2
    assert gpuctl("researcher", "logs", str(started), "--bytes", "1k").code == 2


def test_a_job_that_has_not_run_says_so(gpuctl, demo):
    job = json.loads(gpuctl("researcher", "submit", "later", "-q", "llm-finetune", "-g", "2",
                            "--json").out)["id"]  # fmt: skip
    run = gpuctl("researcher", "logs", str(job))
    assert run.code == 0 and run.out == ""
    assert run.err == "gpuctl: no output: the job has not started a run yet\n"


def test_hostile_output_reaches_the_terminal_escaped(gpuctl, started, monkeypatch):
    hostile = b"\x1b]0;pwned\x07ok \x1b[2J\x1b[31mred\x1b[0m \xe2\x80\xaeevil \x07bell\n"
    monkeypatch.setattr(SimulatorBackend, "read_output",
                        lambda self, ref, n, **kw: OutputTail(hostile, False, "test"))  # fmt: skip
    run = gpuctl("researcher", "logs", str(started))
    assert run.code == 0
    assert run.out == "ok red \\u202eevil \\x07bell\n"


def test_a_cluster_that_cannot_answer_exits_5_with_the_reason(gpuctl, started, monkeypatch):
    def down(self, ref, n, **kw):
        raise TransientBackendError("slurmctld is not responding")

    monkeypatch.setattr(SimulatorBackend, "read_output", down)
    run = gpuctl("researcher", "logs", str(started))
    assert run.code == 5
    assert "cannot answer now (HTTP 503" in run.err and "slurmctld is not responding" in run.err


def test_follow_prints_what_is_new_until_the_job_ends(gpuctl, started, api, monkeypatch):
    admin = api("admin")
    looks = []

    def sleep(seconds: float) -> None:  # each look: 20 simulated minutes later, a cycle
        looks.append(seconds)
        advance(admin, 1200)
        cycle(admin)

    monkeypatch.setattr("gpuctl.logs.time", SimpleNamespace(sleep=sleep))
    run = gpuctl("researcher", "logs", str(started), "-f", "--interval", "2")
    assert run.code == 0, run.err
    assert looks and set(looks) == {2.0} and len(looks) <= 5
    assert run.out.count("started on") == 1  # nothing printed twice
    lines = run.out.splitlines()
    assert lines == sorted(lines)  # in time order: each look added only the new lines
    assert "checkpoint written to nfs://ckpt/sft/step-120" in run.out
    assert lines[-1].endswith("training complete after 3600 s: exit 0")
