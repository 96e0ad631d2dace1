"""gpuctl and a job after others' ends, whatever the outcome: ``submit --after 12
--after-condition ended`` (Slurm's ``afterany``; ``succeeded``, the default, is ``afterok``),
sent as ``after_condition`` only when given; the job waits, then starts after its dependency
failed (one after the same job's success is cancelled); ``explain`` marks what has not ended
``(not ended yet)`` and says ``starts once they have  ended, whatever the outcome``; the
refusals: a condition argparse does not know (a usage error, exit 2), ``ended`` with nothing
to wait for (the portal's 400, one line, exit 1); against a live portal (as
``test_gpuctl_after.py`` and ``test_gpuctl_after_arrays.py``)."""

from __future__ import annotations

import json

import pytest

from gpuctl.main import build_parser, main
from scheduling.models import Job, JobArray
from tests.cli.test_gpuctl_after_arrays import SWEEP, rows, sweep
from tests.cli.test_gpuctl_commands import JOB, explained, posted
from tests.cli.test_gpuctl_completion import complete, script
from tests.drills import cycle, make_quotas_roomy
from tests.scheduling.test_job_dependencies import fail_run

pytestmark = pytest.mark.django_db(transaction=True)

ENDED = ("--after-condition", "ended")
ROW = "starts once they have"


@pytest.fixture
def roomy(demo):
    make_quotas_roomy()


def submit(gpuctl, name: str, *flags: str) -> int:
    run = gpuctl("researcher", "submit", name, "-q", "llm-core", "-g", "8", *flags, "--json")
    assert run.code == 0, run.err
    return json.loads(run.out)["id"]


def test_a_job_after_an_end_waits_then_starts_after_its_dependency_failed(gpuctl, roomy, api):
    admin = api("admin")
    first = submit(gpuctl, "train", "--max-retries", "0", "--sim-duration-minutes", "600")
    cycle(admin)  # it runs
    then = submit(gpuctl, "cleanup", "--after", str(first), *ENDED)
    evaluate = submit(gpuctl, "eval", "--after", str(first))
    assert Job.objects.get(pk=then).after_condition == "ended"
    assert Job.objects.get(pk=evaluate).after_condition == "succeeded"
    detail = json.loads(gpuctl("researcher", "explain", str(then), "--json").out)
    assert (detail["after"], detail["after_condition"]) == ([first], "ended")
    cycle(admin)

    run = gpuctl("researcher", "explain", str(then))
    assert run.code == 0, run.err
    shown = rows(run.out)
    assert shown["state"] == "pending"
    assert shown["starts after"] == f"{first} (not ended yet)"
    assert shown[ROW] == "ended, whatever the outcome"
    assert "starts after arrays" not in shown, "no array ids: no array row"
    assert shown["verdict"].startswith(
        f"DEPENDENCY: Waits for job {first} (train) to end: running, predicted to end "
    ), shown["verdict"]
    assert f"Waits for jobs: #{first}" in shown["numbers"]
    assert "Starts once they have: ended, whatever the outcome" in shown["numbers"]
    # after the same job's success: the old words, and no row of the condition
    shown = rows(gpuctl("researcher", "explain", str(evaluate)).out)
    assert shown["starts after"] == f"{first} (not succeeded yet)"
    assert ROW not in shown
    assert "to succeed: running" in shown["verdict"]

    fail_run(admin, first)
    cycle(admin)
    assert Job.objects.get(pk=first).state == "failed"
    assert Job.objects.get(pk=evaluate).state == "cancelled", "after its success: never now"
    cycle(admin)
    shown = rows(gpuctl("researcher", "explain", str(then)).out)
    assert shown["state"] == "running", "after its end: it ended, failed, and the job started"
    assert shown["starts after"] == str(first)
    assert shown[ROW] == "ended, whatever the outcome"


def test_an_array_after_an_arrays_end_is_not_cancelled_when_it_is(gpuctl, roomy, api):
    admin = api("admin")
    first = sweep(gpuctl)
    then = sweep(gpuctl, "0-1", "--after-array", str(first["id"]), *ENDED)
    for task in then["tasks"]:
        assert Job.objects.get(pk=task).after_condition == "ended"
    cycle(admin)  # ``first``'s tasks run; ``then``'s wait
    shown = rows(gpuctl("researcher", "explain", str(then["tasks"][0])).out)
    assert shown["starts after arrays"] == f"{first['id']} (not ended yet)"
    assert shown[ROW] == "ended, whatever the outcome"
    assert shown["verdict"].startswith(
        f"DEPENDENCY: Waits for array {first['id']} (sweep) to end: 2 tasks have not: 2 running"
    ), shown["verdict"]

    assert gpuctl("researcher", "cancel", "--array", str(first["id"])).code == 0
    cycle(admin)
    cycle(admin)
    assert set(Job.objects.filter(array_id=then["id"]).values_list("state", flat=True)) == {
        "running"
    }, "every task of the array it waited for ended (cancelled): none of it cancelled"
    shown = rows(gpuctl("researcher", "explain", str(then["tasks"][1])).out)
    assert shown["starts after arrays"] == str(first["id"])
    assert shown[ROW] == "ended, whatever the outcome"


def test_the_flag_overrides_the_job_file_and_is_sent_only_when_given(gpuctl, roomy, tmp_path):
    first = submit(gpuctl, "train")
    job = tmp_path / "cleanup.yaml"
    job.write_text(
        f"name: cleanup\nqueue: llm-core\ngpus: 8\nafter: [{first}]\nafter_condition: ended\n"
    )
    for flags, condition in (((), "ended"), (("--after-condition", "succeeded"), "succeeded")):
        run = gpuctl("researcher", "submit", "-f", str(job), *flags, "--json")
        assert run.code == 0, run.err
        assert Job.objects.get(pk=json.loads(run.out)["id"]).after_condition == condition
    parser = build_parser()
    assert parser.parse_args(["submit", "x"]).after_condition is None
    assert parser.parse_args(["submit", "x", *ENDED]).after_condition == "ended"


def test_the_body_carries_after_condition_only_when_given(cli, portal):
    portal.answers[("post", "jobs/")] = JOB
    assert cli("submit", "a", "-q", "q", "-g", "8", "--after", "12").code == 0
    assert posted(portal, "jobs/") == {"name": "a", "queue": "q", "gpus": 8, "after": [12]}
    portal.calls.clear()
    assert cli("submit", "a", "-q", "q", "-g", "8", "--after", "12", *ENDED).code == 0
    assert posted(portal, "jobs/")["after_condition"] == "ended"
    portal.calls.clear()
    portal.answers[("post", "arrays/")] = {"id": 7, "size": 2, "tasks": [1, 2], "max_running": None}
    assert cli("submit", "a", "-q", "q", "-g", "8", "--array", "0-1", "--after-array", "3",
               "--after-condition", "succeeded").code == 0  # fmt: skip
    assert posted(portal, "arrays/")["after_condition"] == "succeeded"


def test_an_older_portal_without_after_condition_reads_as_succeeded(cli, portal):
    lines = explained(cli, portal, after=[12, 13], waiting_for=[13], after_arrays=[7],
                      waiting_for_arrays=[7])  # fmt: skip
    assert "starts after         12, 13 (not succeeded yet)" in lines
    assert "starts after arrays  7 (not succeeded yet)" in lines
    assert not [line for line in lines if line.startswith(ROW)]
    # ended, yet nothing to wait for (no after, no arrays): no row of the condition
    lines = explained(cli, portal, after=[], after_arrays=[], after_condition="ended")
    assert not [line for line in lines if line.startswith(("starts", ROW))]


@pytest.mark.parametrize("bad", ["afterany", "ENDED", "", "end"])
def test_a_condition_gpuctl_does_not_know_is_a_usage_error(gpuctl, roomy, bad):
    for spec in ((), ("--array", "0-1")):
        run = gpuctl("researcher", *SWEEP, *spec, "--after", "1", "--after-condition", bad)
        assert run.code == 2, (bad, run.err)
        last = run.err.splitlines()[-1]
        assert last.startswith(
            f"gpuctl submit: error: argument --after-condition: invalid choice: {bad!r} "
        ), run.err
        assert "succeeded" in last and "ended" in last, "it says the choices"
        assert "Traceback" not in run.err and run.out == ""
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_ended_with_nothing_to_wait_for_is_the_portals_refusal(gpuctl, roomy):
    for spec in ((), ("--array", "0-1")):
        run = gpuctl("researcher", *SWEEP, *spec, *ENDED)
        assert run.code == 1, run.err
        assert run.err == (
            "gpuctl: error: refused: after_condition: ended needs jobs (after) or arrays "
            "(after_arrays)\n"
        )
        assert run.out == ""
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_help_and_completion_know_the_flag(capsys, monkeypatch, tmp_path):
    capsys.readouterr()
    assert main(["submit", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--after 12 --after-condition ended   # once job 12 ended, however" in out
    assert "--after-condition {succeeded,ended,failed}" in out
    text = script("bash", capsys, monkeypatch, tmp_path)
    assert complete(text, "submit", "--after-c") == ["--after-condition", "--after-corr"]
    assert complete(text, "submit", "--after-con") == ["--after-condition"]
    assert complete(text, "submit", "--after-condition", "en") == ["ended"]
