"""gpuctl and a job after others' failure: ``submit --after 12 --after-condition failed``
(Slurm's ``afternotok``); the job waits, ``explain`` marks what has not failed ``(not failed
yet)`` and says ``starts once they have  ended without succeeding (failed or cancelled)``;
it starts once its dependency failed, and one after a dependency that succeeded is
cancelled, the timeline saying why; the portal's refusal of a dependency that already
succeeded is one line, exit 1; against a live portal (as ``test_gpuctl_after_condition``)."""

from __future__ import annotations

import json

import pytest

from scheduling.models import Job
from tests.cli.test_gpuctl_after_arrays import rows
from tests.cli.test_gpuctl_after_condition import ROW, submit
from tests.cli.test_gpuctl_commands import explained
from tests.drills import advance, cycle, make_quotas_roomy
from tests.scheduling.test_job_dependencies import fail_run

pytestmark = pytest.mark.django_db(transaction=True)

FAILED = ("--after-condition", "failed")
SAID = "ended without succeeding (failed or cancelled)"


@pytest.fixture
def roomy(demo):
    make_quotas_roomy()


def test_a_job_after_a_failure_waits_then_starts_once_it_failed(gpuctl, roomy, api):
    admin = api("admin")
    first = submit(gpuctl, "train", "--max-retries", "0", "--sim-duration-minutes", "600")
    cycle(admin)
    then = submit(gpuctl, "fallback", "--after", str(first), *FAILED)
    detail = json.loads(gpuctl("researcher", "explain", str(then), "--json").out)
    assert (detail["after"], detail["after_condition"]) == ([first], "failed")
    cycle(admin)
    shown = rows(gpuctl("researcher", "explain", str(then)).out)
    assert shown["state"] == "pending"
    assert shown["starts after"] == f"{first} (not failed yet)"
    assert shown[ROW] == SAID
    assert shown["verdict"].startswith(
        f"DEPENDENCY: Waits for job {first} (train) to end without succeeding: running, "
    ), shown["verdict"]
    assert f"Starts once they have: {SAID}" in shown["numbers"]

    fail_run(admin, first)
    cycle(admin)
    cycle(admin)
    shown = rows(gpuctl("researcher", "explain", str(then)).out)
    assert (shown["state"], shown["starts after"]) == ("running", str(first))


def test_a_job_after_a_failure_is_cancelled_when_it_succeeds_and_then_refused(gpuctl, roomy, api):
    admin = api("admin")
    first = submit(gpuctl, "train", "--sim-duration-minutes", "30")
    cycle(admin)
    then = submit(gpuctl, "fallback", "--after", str(first), *FAILED)
    advance(admin, 31 * 60)
    cycle(admin)
    assert Job.objects.get(pk=first).state == "succeeded"
    run = gpuctl("researcher", "explain", str(then), "--events", "1")
    shown = rows(run.out)
    assert shown["state"] == "cancelled"
    assert f"cancelled: job {first} it waited for succeeded" in run.out
    # asked again now: the portal's refusal, one line
    run = gpuctl("researcher", "submit", "again", "-q", "llm-core", "-g", "8",
                 "--after", str(first), *FAILED)  # fmt: skip
    assert run.code == 1 and run.out == ""
    assert run.err == (
        f"gpuctl: error: refused: after: job {first} succeeded; a job after its failure could "
        "never start\n"
    )
    assert not Job.objects.filter(name="again").exists()


def test_explain_of_a_job_after_failures_marks_those_not_failed_yet(cli, portal):
    lines = explained(cli, portal, after=[12, 13], waiting_for=[13], after_arrays=[7],
                      waiting_for_arrays=[], after_condition="failed")  # fmt: skip
    assert "starts after           12, 13 (not failed yet)" in lines
    assert "starts after arrays    7" in lines
    assert f"{ROW}  {SAID}" in lines
