"""gpuctl and one at a time by name: ``submit --singleton`` (Slurm's
``--dependency=singleton``), sent as ``singleton`` only when given; the job waits for the
older job of its name to end, then starts; ``explain`` says ``one at a time by name`` and
marks the older job ``(not ended yet)``; against a live portal (as
``test_gpuctl_after_condition.py``)."""

from __future__ import annotations

import json

import pytest

from gpuctl.main import build_parser
from scheduling.models import Job
from tests.cli.test_gpuctl_after_arrays import rows
from tests.cli.test_gpuctl_after_condition import ROW, submit
from tests.cli.test_gpuctl_commands import JOB, posted
from tests.drills import cycle, make_quotas_roomy
from tests.scheduling.test_job_dependencies import fail_run

pytestmark = pytest.mark.django_db(transaction=True)

ONE = "one at a time by name"


@pytest.fixture
def roomy(demo):
    make_quotas_roomy()


def test_a_singleton_waits_for_the_older_job_of_its_name_then_starts(gpuctl, roomy, api):
    admin = api("admin")
    first = submit(gpuctl, "train", "--max-retries", "0", "--sim-duration-minutes", "600")
    cycle(admin)  # it runs
    then = submit(gpuctl, "train", "--singleton")
    stored = Job.objects.get(pk=then)
    assert (stored.singleton, stored.after_condition) == (True, "ended")
    cycle(admin)
    shown = rows(gpuctl("researcher", "explain", str(then)).out)
    assert shown["state"] == "pending"
    assert shown["starts after"] == f"{first} (not ended yet)"
    assert shown[ROW] == "ended, whatever the outcome"
    assert shown[ONE] == "yes: after your older 'train' jobs"
    assert shown["verdict"].startswith(f"DEPENDENCY: Waits for job {first} (train) to end")
    fail_run(admin, first)
    cycle(admin)
    assert rows(gpuctl("researcher", "explain", str(then)).out)["state"] == "running"
    # not a singleton: no such row
    assert ONE not in rows(gpuctl("researcher", "explain", str(first)).out)


def test_the_body_carries_singleton_only_when_given(cli, portal):
    portal.answers[("post", "jobs/")] = JOB
    assert cli("submit", "a", "-q", "q", "-g", "8").code == 0
    assert "singleton" not in posted(portal, "jobs/")
    portal.calls.clear()
    assert cli("submit", "a", "-q", "q", "-g", "8", "--singleton").code == 0
    assert posted(portal, "jobs/")["singleton"] is True
    parser = build_parser()
    assert parser.parse_args(["submit", "x"]).singleton is None
    assert parser.parse_args(["submit", "x", "--no-singleton"]).singleton is False


def test_the_portals_refusal_is_one_line(gpuctl, roomy):
    first = submit(gpuctl, "train")
    run = gpuctl("researcher", "submit", "train", "-q", "llm-core", "-g", "8", "--singleton",
                 "--after", str(first), "--json")  # fmt: skip
    assert run.code == 1
    assert run.err.strip().endswith(
        "a singleton waits for your older jobs of its name to end, whatever the outcome: with "
        "after, after_arrays or after_corresponding, set after_condition to ended too"
    ), run.err
    assert len(run.err.strip().splitlines()) == 1
    assert Job.objects.filter(name="train").count() == 1, "nothing written"


def test_jobs_and_cancel_choose_by_name(gpuctl, roomy):
    parts = [submit(gpuctl, "pretrain", "--singleton") for _ in range(2)]
    other = submit(gpuctl, "pretrain-eval")
    listed = json.loads(gpuctl("researcher", "jobs", "--mine", "-n", "pretrain", "--json").out)
    assert sorted(job["id"] for job in listed) == parts
    run = gpuctl("researcher", "cancel", "--me", "--name", "pretrain")
    assert run.code == 0, run.err
    states = dict(Job.objects.filter(pk__in=[*parts, other]).values_list("pk", "state"))
    assert states == {parts[0]: "cancelled", parts[1]: "cancelled", other: "pending"}
    refused = gpuctl("researcher", "cancel", "7", "-n", "pretrain")
    assert refused.code == 2 and "not both" in refused.err


def test_after_corr_links_each_task_to_its_counterpart(gpuctl, roomy):
    first = json.loads(gpuctl("researcher", "submit", "train", "-q", "llm-core", "-g", "8",
                              "--array", "0-1", "--json").out)  # fmt: skip
    run = gpuctl("researcher", "submit", "eval", "-q", "llm-core", "-g", "1", "--array", "0-2",
                 "--after-corr", str(first["id"]), "--json")  # fmt: skip
    assert run.code == 0, run.err
    made = json.loads(run.out)
    links = {t.array_index: list(t.after.values_list("pk", flat=True))
             for t in Job.objects.filter(array_id=made["id"])}  # fmt: skip
    assert links == {0: [first["tasks"][0]], 1: [first["tasks"][1]], 2: []}
    alone = gpuctl("researcher", "submit", "eval", "-q", "llm-core", "-g", "1",
                   "--after-corr", str(first["id"]))  # fmt: skip
    assert alone.code == 2 and "--after-corr needs --array" in alone.err
