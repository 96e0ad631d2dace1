"""gpuctl and job dependencies: ``submit --after 12,13``, the DEPENDENCY verdict in
``explain`` and ``jobs``, against a live portal (as ``test_gpuctl.py``)."""

from __future__ import annotations

import json

import pytest

from quotas.models import BusinessLine, Queue
from scheduling.models import Job
from tests.drills import cycle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def roomy(demo):
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)


def submit(gpuctl, name: str, *flags: str) -> int:
    run = gpuctl("researcher", "submit", name, "-q", "llm-core", "-g", "8", *flags, "--json")
    assert run.code == 0, run.err
    return json.loads(run.out)["id"]


def test_submit_after_waits_and_explain_and_jobs_say_dependency(gpuctl, roomy, api):
    first = submit(gpuctl, "pretrain-7b", "--sim-duration-minutes", "60")
    second = submit(gpuctl, "convert")
    cycle(api("admin"))  # both run
    then = submit(gpuctl, "eval", "--after", f"{first},{second}")
    assert list(Job.objects.get(pk=then).after.order_by("pk").values_list("pk", flat=True)) == [
        first, second
    ]  # fmt: skip
    spaced = submit(gpuctl, "eval2", "--after", f"{first} {first}")
    assert list(Job.objects.get(pk=spaced).after.values_list("pk", flat=True)) == [first]
    # the flag repeated adds to it: never the last one alone (a job started too early)
    twice = submit(gpuctl, "eval3", "--after", str(first), "--after", str(second))
    assert sorted(Job.objects.get(pk=twice).after.values_list("pk", flat=True)) == [first, second]
    assert gpuctl("researcher", "cancel", str(second)).code == 0
    cycle(api("admin"))  # ``then`` is cancelled (``second`` was); ``spaced`` waits

    run = gpuctl("researcher", "explain", str(spaced))
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert f"starts after     {first} (not succeeded yet)" in lines
    job = Job.objects.get(pk=spaced)
    assert job.pending_code == "DEPENDENCY"
    assert f"verdict          DEPENDENCY: {job.pending_message}" in lines
    assert f"Waits for job {first} (pretrain-7b) to succeed: running" in run.out
    assert f"Waits for jobs: #{first}" in run.out  # the numbers, labelled
    assert f"estimated start  {job.estimated_start:%Y-%m-%d %H:%M} UTC" in lines

    cancelled = gpuctl("researcher", "explain", str(then))
    assert ["state", "cancelled"] in [line.split() for line in cancelled.out.splitlines()]
    assert f"cancelled: job {second} it waited for was cancelled" in cancelled.out

    table = gpuctl("researcher", "jobs", "--state", "pending").out.splitlines()
    row = next(line for line in table if line.split()[0] == str(spaced))
    assert "DEPENDENCY" in row.split()


def test_bad_after_ids_are_a_usage_error_or_the_portals_refusal(gpuctl, roomy):
    for bad in ("12,x", "٧", "", "1.5"):
        run = gpuctl("researcher", "submit", "x", "-q", "llm-core", "-g", "8", "--after", bad)
        assert run.code == 2, (bad, run.err)
    run = gpuctl("researcher", "submit", "x", "-q", "llm-core", "-g", "8", "--after", "999999")
    assert run.code == 1 and "after: unknown job 999999" in run.err
    assert Job.objects.count() == 0
