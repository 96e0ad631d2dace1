"""gpuctl and whole job arrays as dependencies: ``submit --after-array 42`` (a job, or every
task of a new array, waits until every task of array 42 has succeeded), the "starts after
arrays" row of ``explain`` while it waits and once the array succeeded, and the refusals:
bad ids on the command line (usage errors), the portal's 400 on ``after_arrays`` (one line,
exit 1); against a live portal (as ``test_gpuctl_after.py``)."""

from __future__ import annotations

import json
import re

import pytest

from gpuctl.main import build_parser, main
from scheduling.models import Job, JobArray
from tests.cli.test_gpuctl_completion import complete, script
from tests.drills import advance, cycle, make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

SWEEP = ("submit", "sweep", "-q", "llm-experiment", "-g", "8", "--sim-duration-minutes", "30")


@pytest.fixture
def roomy(demo):
    make_quotas_roomy()


def sweep(gpuctl, spec: str = "0-1", *flags: str) -> dict:
    """A new array (two 8-GPU tasks of 30 minutes by default), as the API returns it."""
    run = gpuctl("researcher", *SWEEP, "--array", spec, *flags, "--json")
    assert run.code == 0, run.err
    return json.loads(run.out)


def submit(gpuctl, name: str, *flags: str) -> int:
    run = gpuctl("researcher", "submit", name, "-q", "llm-core", "-g", "8", *flags, "--json")
    assert run.code == 0, run.err
    return json.loads(run.out)["id"]


def after_arrays(job_id: int) -> list[int]:
    return sorted(Job.objects.get(pk=job_id).after_arrays.values_list("pk", flat=True))


def rows(out: str) -> dict[str, str]:
    """``explain``'s ``label  value`` lines (before its events) by label."""
    head = out.split("\nevents", 1)[0]
    return dict(re.split(r" {2,}", line, maxsplit=1) for line in head.splitlines())


def test_a_job_after_an_array_waits_shows_the_row_then_starts(gpuctl, roomy, api):
    admin = api("admin")
    array = sweep(gpuctl)
    other = sweep(gpuctl, "0")
    # comma-separated and repeated, as the server stores them (duplicates collapsed)
    then = submit(
        gpuctl, "merge", "--after-array", f"{array['id']},{other['id']}",
        "--after-array", str(array["id"]),
    )  # fmt: skip
    assert after_arrays(then) == sorted([array["id"], other["id"]])
    assert list(Job.objects.get(pk=then).after.all()) == []

    assert gpuctl("researcher", "cancel", "--array", str(other["id"])).code == 0
    cycle(admin)  # the two tasks of ``array`` run; ``then`` is cancelled (``other`` was)
    cancelled = gpuctl("researcher", "explain", str(then))
    assert rows(cancelled.out)["state"] == "cancelled"
    assert rows(cancelled.out)["starts after arrays"] == f"{array['id']}, {other['id']}"

    waits = submit(gpuctl, "merge2", "--after-array", str(array["id"]))
    cycle(admin)
    run = gpuctl("researcher", "explain", str(waits))
    assert run.code == 0, run.err
    shown = rows(run.out)
    assert shown["starts after arrays"] == f"{array['id']} (not succeeded yet)"
    assert "starts after" not in shown, "no job ids: no job row"
    assert shown["verdict"].startswith(
        f"DEPENDENCY: Waits for array {array['id']} (sweep) to succeed: 2 tasks have not: "
        "2 running, the last predicted to end "
    ), shown["verdict"]
    detail = json.loads(gpuctl("researcher", "explain", str(waits), "--json").out)
    assert (detail["after_arrays"], detail["waiting_for_arrays"]) == ([array["id"]], [array["id"]])
    table = gpuctl("researcher", "jobs", "--state", "pending").out.splitlines()
    assert "DEPENDENCY" in next(line for line in table if line.split()[0] == str(waits)).split()

    advance(admin, 31 * 60)
    cycle(admin)  # the tasks succeed
    cycle(admin)  # and the job after them starts
    assert set(Job.objects.filter(array_id=array["id"]).values_list("state", flat=True)) == {
        "succeeded"
    }
    run = gpuctl("researcher", "explain", str(waits))
    shown = rows(run.out)
    assert shown["state"] == "running"
    assert shown["starts after arrays"] == str(array["id"])
    detail = json.loads(gpuctl("researcher", "explain", str(waits), "--json").out)
    assert (detail["after_arrays"], detail["waiting_for_arrays"]) == ([array["id"]], [])


def test_the_row_says_which_arrays_have_not_succeeded_beside_the_jobs(gpuctl, roomy, api):
    admin = api("admin")
    quick = sweep(gpuctl, "0")
    slow = sweep(gpuctl, "0", "--sim-duration-minutes", "600")
    first = submit(gpuctl, "convert", "--sim-duration-minutes", "600")
    both = submit(gpuctl, "eval", "--after", str(first),
                  "--after-array", f"{slow['id']} {quick['id']}")  # fmt: skip
    cycle(admin)
    advance(admin, 31 * 60)
    cycle(admin)  # ``quick`` succeeded; ``slow`` and ``first`` run
    shown = rows(gpuctl("researcher", "explain", str(both)).out)
    assert shown["starts after"] == f"{first} (not succeeded yet)"
    assert shown["starts after arrays"] == ", ".join(
        f"{quick['id']}" if a == quick["id"] else f"{a} (not succeeded yet)"
        for a in sorted([quick["id"], slow["id"]])
    )
    assert shown["verdict"].startswith("DEPENDENCY: ")


def test_an_array_after_an_array_every_task_waits(gpuctl, roomy, api):
    first = sweep(gpuctl)
    then = sweep(gpuctl, "0-2%2", "--after-array", str(first["id"]))
    assert then["size"] == 3
    for task in then["tasks"]:
        assert after_arrays(task) == [first["id"]]
    cycle(api("admin"))
    task = then["tasks"][0]
    run = gpuctl("researcher", "explain", str(task))
    shown = rows(run.out)
    assert shown["array"] == f"task 0 of array {then['id']} (gpuctl array {then['id']})"
    assert shown["starts after arrays"] == f"{first['id']} (not succeeded yet)"
    assert shown["verdict"].startswith(f"DEPENDENCY: Waits for array {first['id']} (sweep)")


def test_a_job_file_names_arrays_and_the_flag_overrides_it(gpuctl, roomy, tmp_path):
    first, second = sweep(gpuctl, "0"), sweep(gpuctl, "0")
    job = tmp_path / "merge.yaml"
    job.write_text(f"name: merge\nqueue: llm-core\ngpus: 8\nafter_arrays: [{first['id']}]\n")
    run = gpuctl("researcher", "submit", "-f", str(job), "--json")
    assert run.code == 0, run.err
    assert after_arrays(json.loads(run.out)["id"]) == [first["id"]]
    run = gpuctl("researcher", "submit", "-f", str(job), "--after-array", str(second["id"]),
                 "--json")  # fmt: skip
    assert run.code == 0, run.err
    assert after_arrays(json.loads(run.out)["id"]) == [second["id"]]


@pytest.mark.parametrize("bad", ["x", "3,x", "", " , ", "1.5", "٧", "１"])
def test_a_bad_array_id_is_a_usage_error(gpuctl, roomy, bad):
    for spec in ((), ("--array", "0-1")):
        run = gpuctl("researcher", *SWEEP, *spec, "--after-array", bad)
        assert run.code == 2, (bad, run.err)
        last = run.err.splitlines()[-1]
        assert last.startswith("gpuctl submit: error: argument --after-array: "), run.err
        assert "Traceback" not in run.err
    assert not Job.objects.exists() and not JobArray.objects.exists()


@pytest.mark.parametrize(
    ("ids", "words"),
    [
        ("0", "after_arrays: 0: Ensure this value is greater than or equal to 1."),
        ("999999", "after_arrays: unknown array 999999"),
        # the serializer's bound, before the service's "at most 20 arrays, not 21"
        (
            ",".join(str(i) for i in range(1, 22)),
            "after_arrays: Ensure this field has no more than 20 elements.",
        ),  # fmt: skip
    ],
)
def test_the_portals_refusal_is_one_line_and_exit_1(gpuctl, roomy, ids, words):
    for spec in ((), ("--array", "0-1")):
        run = gpuctl("researcher", *SWEEP, *spec, "--after-array", ids)
        assert run.code == 1, run.err
        assert run.err == f"gpuctl: error: refused: {words}\n"
        assert run.out == ""
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_an_array_that_can_no_longer_succeed_is_refused(gpuctl, roomy):
    array = sweep(gpuctl)
    first = min(array["tasks"])
    assert gpuctl("researcher", "cancel", str(first)).code == 0
    run = gpuctl("researcher", "submit", "merge", "-q", "llm-core", "-g", "8",
                 "--after-array", str(array["id"]))  # fmt: skip
    assert run.code == 1
    assert run.err == (
        f"gpuctl: error: refused: after_arrays: task 0 of array {array['id']} was cancelled; "
        "a job after it could never start\n"
    )
    assert not Job.objects.filter(name="merge").exists()


def test_help_and_completion_know_the_flag(capsys, monkeypatch, tmp_path):
    parser = build_parser()
    assert parser.parse_args(["submit", "x", "--after-array", "4,5", "--after-array", "6"]
                             ).after_arrays == [4, 5, 6]  # fmt: skip
    assert parser.parse_args(["submit", "x"]).after_arrays is None
    capsys.readouterr()
    assert main(["submit", "--help"]) == 0
    assert "--after-array 42   # once every task of array 42" in capsys.readouterr().out
    text = script("bash", capsys, monkeypatch, tmp_path)
    assert complete(text, "submit", "--after-a") == ["--after-array"]
