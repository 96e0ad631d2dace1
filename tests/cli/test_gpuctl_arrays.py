"""gpuctl and job arrays against a live portal (as ``test_gpuctl_after.py``): ``submit
--array``, ``array``, ``array-limit``, ``cancel --array`` (and its dry run and usage
errors), ``jobs --array`` with ``NAME[INDEX]``; refusals carry the portal's words."""

from __future__ import annotations

import json

import pytest

from gpuctl.arrays import submitted_text, task_name
from scheduling.models import Job, JobArray
from tests.drills import cycle, make_quotas_roomy

pytestmark = pytest.mark.django_db(transaction=True)

SUBMIT = ("submit", "sweep", "-q", "llm-experiment", "-g", "4", "--sim-duration-minutes", "90")


@pytest.fixture
def roomy(demo):
    make_quotas_roomy()


def submit_array(gpuctl, spec: str, user: str = "researcher") -> dict:
    run = gpuctl(user, *SUBMIT, "--array", spec, "--json")
    assert run.code == 0, run.err
    return json.loads(run.out)


def test_submit_array_prints_the_array_compactly(gpuctl, roomy):
    run = gpuctl("researcher", *SUBMIT, "--array", "0-9%3")
    assert run.code == 0, run.err
    array = JobArray.objects.get()
    ids = list(array.tasks.order_by("array_index").values_list("pk", flat=True))
    assert ids == list(range(ids[0], ids[0] + 10))
    assert run.out == (
        f"array {array.pk}: 10 tasks, jobs {ids[0]}-{ids[-1]}, at most 3 at once. "
        f"Next: gpuctl array {array.pk}\n"
    )


def test_submit_array_from_a_job_file(gpuctl, roomy, tmp_path):
    job = tmp_path / "sweep.yaml"
    job.write_text("name: sweep\nqueue: llm-experiment\ngpus: 1\narray: '1,3,5'\n")
    run = gpuctl("researcher", "submit", "-f", str(job))
    assert run.code == 0, run.err
    assert "3 tasks" in run.out and "no bound" in run.out
    assert list(Job.objects.order_by("array_index").values_list("array_index", flat=True)) == [
        1, 3, 5,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("0-5%0", "array: %0 would run no task: give at least %1"),
        ("0-1000", "array: at most 1,000 tasks in one array"),
        ("٣", "array: '٣' is not an index or a range"),
    ],
)
def test_a_bad_spec_prints_the_portals_message_and_exits_1(gpuctl, roomy, spec, words):
    run = gpuctl("researcher", *SUBMIT, "--array", spec)
    assert run.code == 1
    assert words in run.err, run.err
    assert not JobArray.objects.exists() and not Job.objects.exists()


def test_array_shows_the_bound_and_the_tasks_by_state(gpuctl, roomy, api):
    array = submit_array(gpuctl, "0-5%2")
    cycle(api("admin"))
    run = gpuctl("researcher", "array", str(array["id"]))
    assert run.code == 0, run.err
    lines = dict(line.split(None, 1) if not line.startswith("GPUs") else ("GPUs", line[4:].strip())
                 for line in run.out.splitlines())  # fmt: skip
    assert lines["array"] == f"{array['id']} 'sweep' by researcher"
    assert lines["spec"] == "0-5%2 (6 tasks)"
    assert lines["bound"] == "at most 2 at once"
    assert lines["tasks"] == "4 pending (4 held back by the bound), 2 running"
    assert lines["GPUs"] == "held  8"
    explain = gpuctl("researcher", "explain", str(array["tasks"][3]))
    assert f"array            task 3 of array {array['id']} (gpuctl array {array['id']})" in (
        explain.out.splitlines()
    )
    assert (
        "ARRAY_LIMIT: Its array" in explain.out
        and "Its waiting tasks before this one: 1" in explain.out
    )
    assert lines["jobs"] == f"{array['tasks'][0]}-{array['tasks'][-1]}"
    shown = json.loads(gpuctl("researcher", "array", str(array["id"]), "--json").out)
    assert shown["progress"]["held_back"] == 4 and shown["tasks"] == array["tasks"]
    unseen = gpuctl("researcher2", "array", str(array["id"]))
    assert unseen.code == 1 and "not found" in unseen.err


def test_array_limit_changes_the_bound_and_refusals_exit_1(gpuctl, roomy):
    array = submit_array(gpuctl, "0-3%1")
    ident = str(array["id"])
    run = gpuctl("researcher", "array-limit", ident, "3")
    assert run.code == 0, run.err
    assert run.out == f"array {ident} (sweep): at most 3 at once\n"
    assert gpuctl("researcher", "array-limit", ident, "none").out.endswith(": no bound\n")
    assert JobArray.objects.get().max_running is None
    too_many = gpuctl("researcher", "array-limit", ident, "5")
    assert too_many.code == 1
    assert "max_running: the array has 4 tasks; at most 4" in too_many.err
    assert gpuctl("oncall", "array-limit", ident, "2").code == 1
    assert gpuctl("researcher", "array-limit", ident, "two").code == 2
    assert gpuctl("researcher", "array-limit", ident, "٣").code == 2
    assert JobArray.objects.get().max_running is None


def test_cancel_array_dry_run_then_for_real(gpuctl, roomy, api):
    array = submit_array(gpuctl, "0-2")
    cycle(api("admin"))
    dry = gpuctl("researcher", "cancel", "--array", str(array["id"]), "--dry-run")
    assert dry.code == 0, dry.err
    assert dry.out.splitlines() == [
        f"would cancel job {job_id} (sweep[{i}]): running, researcher"
        for i, job_id in enumerate(array["tasks"])
    ]
    assert set(Job.objects.values_list("state", flat=True)) == {"running"}
    run = gpuctl("lead", "cancel", "--array", str(array["id"]))
    assert run.code == 0, run.err
    first, last = array["tasks"][0], array["tasks"][-1]
    assert run.out == f"array {array['id']}: cancelled 3 tasks (jobs {first}-{last})\n"
    again = gpuctl("researcher", "cancel", "--array", str(array["id"]))
    assert again.out == f"array {array['id']}: no active task to cancel\n"
    assert gpuctl("researcher2", "cancel", "--array", str(array["id"])).code == 1
    assert gpuctl("researcher2", "cancel", "--array", str(array["id"]), "--dry-run").code == 1


@pytest.mark.parametrize(
    "extra", [("42",), ("--me",), ("-q", "llm-core"), ("-u", "alice"), ("--state", "pending")]
)
def test_cancel_array_with_ids_or_filters_is_a_usage_error(gpuctl, roomy, extra):
    run = gpuctl("researcher", "cancel", "--array", "7", *extra)
    assert run.code == 2
    assert "give --array alone" in run.err


def test_jobs_lists_an_arrays_tasks_with_their_index(gpuctl, roomy):
    array = submit_array(gpuctl, "4-5")
    submit_array(gpuctl, "0")
    run = gpuctl("researcher", "jobs", "--array", str(array["id"]))
    assert run.code == 0, run.err
    rows = [line.split() for line in run.out.splitlines()[1:]]
    assert sorted((int(r[0]), r[1]) for r in rows) == [
        (array["tasks"][0], "sweep[4]"), (array["tasks"][1], "sweep[5]"),
    ]  # fmt: skip
    assert gpuctl("researcher", "jobs", "--array", "x").code == 2


def test_the_texts_for_people():
    assert task_name({"name": "a", "array_index": None}) == "a"
    assert task_name({"name": "a", "array_index": 0}) == "a[0]"
    array = {"id": 42, "size": 100, "tasks": list(range(1001, 1101)), "max_running": 10}
    assert submitted_text(array) == (
        "array 42: 100 tasks, jobs 1001-1100, at most 10 at once. Next: gpuctl array 42"
    )
    gaps = {"id": 7, "size": 1, "tasks": [5], "max_running": None}
    assert submitted_text(gaps).startswith("array 7: 1 task, jobs 5, no bound.")
