"""``gpuctl usage`` against a live portal: the month's GPU-hours per line, queue or person,
the numbers of ``/api/v1/usage-report/``."""

from __future__ import annotations

import json

import pytest

from scheduling.models import JobRun
from scheduling.services import JobRequest, submit_job
from scheduling.sim_services import advance_clock, run_cycle_now
from tests.cli.test_gpuctl import one_line_error
from tests.drills import make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def one_run(demo):
    """One 4-GPU run of 30 minutes, ended (recorded)."""
    make_quotas_roomy()
    submit_job(demo["researcher"], JobRequest(name="u", queue="llm-finetune", gpus=4,
                                              sim_duration_minutes=30))  # fmt: skip
    run_cycle_now(demo["admin"])
    advance_clock(demo["admin"], 31 * 60)
    run_cycle_now(demo["admin"])
    run = JobRun.objects.get()
    return run, 4 * (run.ended_at - run.started_at).total_seconds() / 3600


def test_the_table_per_line_queue_and_person(gpuctl, one_run):
    run, hours = one_run
    month = f"{run.ended_at:%Y-%m}"
    out = gpuctl("researcher", "usage", "--month", month)
    assert out.code == 0, out.err
    header, row = out.out.splitlines()
    assert header.split() == ["LINE", "GPU.HOURS", "SHARE", "OF.QUOTA", "RUNS", "RUNNING",
                              "FAILED.GPU.HOURS", "STOPPED.GPU.HOURS"]  # fmt: skip
    assert row.startswith("Large language models") and f"{hours:,.1f}" in row.split()
    person = gpuctl("researcher", "usage", "--month", month, "--by", "person").out.splitlines()
    assert person[0].split()[:3] == ["PERSON", "GPU.HOURS", "SHARE"] and "OF.QUOTA" not in person[0]
    assert person[1].split()[:2] == ["researcher", f"{hours:,.1f}"]
    data = json.loads(gpuctl("researcher", "usage", "--month", month, "--json").out)
    assert data["total"]["gpu_hours"] == round(hours, 3) and data["month"] == month


def test_another_line_sees_none_of_it(gpuctl, one_run):
    run, _ = one_run
    out = gpuctl("researcher2", "usage", "--month", f"{run.ended_at:%Y-%m}", "--by", "queue")
    assert out.code == 0 and out.out.splitlines()[1:] == []


def test_a_bad_month_is_one_line_and_exit_1(gpuctl, demo):
    out = gpuctl("researcher", "usage", "--month", "2026-13")
    assert out.code == 1
    assert "month" in one_line_error(out) and "YYYY-MM" in out.err
    assert gpuctl("researcher", "usage", "--by", "team").code == 2
