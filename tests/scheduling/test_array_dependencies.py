"""A job after a whole job array (``after_arrays``, Slurm's ``afterok`` on an array job)
through the services and the loop, on the small simulated cluster (4 x 8 GPUs): it waits,
held from the engine, until every task of the array has succeeded; its verdict counts the
tasks by what they are doing; it starts in the cycle after the last one succeeded and
queues from then; it is cancelled in the cycle one task fails for good or is cancelled.
The submission refuses an array the submitter may not see or that can no longer succeed.
"""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError

from scheduling import limits
from scheduling.array_services import cancel_array, submit_array
from scheduling.models import Job, JobArray, JobEvent
from scheduling.services import JobRequest, submit_job, submit_jobs
from tests.drills import advance, cycle, job, make_quotas_roomy, submit, when
from tests.scheduling.test_job_dependencies import fail_run, timeline

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def request(**over) -> JobRequest:
    fields = {"name": "sweep", "queue": "llm-experiment", "gpus": 8, "sim_duration_minutes": 30}
    fields.update(over)
    return JobRequest(**fields)


def sweep(demo, spec: str = "0-2", **over) -> JobArray:
    return submit_array(demo["researcher"], request(**over), spec)


def task(array: JobArray, index: int) -> int:
    return array.tasks.get(array_index=index).pk


def test_a_job_after_an_array_waits_for_every_task_then_starts(api, demo):
    admin, me = api("admin"), api("researcher")
    array = sweep(demo, "0-5%2")  # two run at a time: 30 min each, three rounds
    then = submit(me, name="aggregate", gpus=8, after_arrays=[array.pk])
    summary = cycle(admin)
    detail = job(me, then)
    assert detail["state"] == "pending", "two nodes are free, yet it waits"
    assert (detail["after"], detail["after_arrays"]) == ([], [array.pk])
    assert (detail["waiting_for"], detail["waiting_for_arrays"]) == ([], [array.pk])
    reason = detail["pending_reason"]
    assert reason["code"] == "DEPENDENCY"
    # the two tasks this cycle starts read as running (the plan's starts, not the snapshot);
    # the four held back by the bound end at the earliest when their places open and they run
    assert re.fullmatch(
        rf"Waits for array {array.pk} \(sweep\) to succeed: 6 tasks have not: 2 running, the "
        r"last predicted to end 20\d\d-\d\d-\d\d \d\d:\d\d UTC; 4 waiting to start, the last "
        r"predicted to end at the earliest 20\d\d-\d\d-\d\d \d\d:\d\d UTC\.",
        reason["message"],
    ), reason["message"]
    last_place = when(job(me, task(array, 5))["estimated_start"])
    end = when(reason["details"]["dependencies_end_at"])
    assert when(detail["estimated_start"]) == end > last_place, "its place opens, then it runs"
    assert "waiting_for" not in reason["details"], "no job of after: no empty row of jobs"
    assert reason["details"]["waiting_for_arrays"] == [array.pk]
    facts = {fact["key"]: fact for fact in reason["facts"]}
    assert facts["waiting_for_arrays"]["label"] == "Waits for every task of arrays"
    assert facts["waiting_for_arrays"]["text"] == f"array {array.pk}"
    # linked to the array's page, for a viewer who may see it (the job page's script)
    assert reason["array_links"] == {str(array.pk): f"/arrays/{array.pk}/"}
    assert job(admin, then)["pending_reason"]["array_links"] == reason["array_links"]
    assert summary["pending_by_reason"] == {"DEPENDENCY": 1, "ARRAY_LIMIT": 4}

    for _ in range(2):  # two rounds succeed: two tasks left, running
        advance(admin, 31 * 60)
        cycle(admin)
    reason = job(me, then)["pending_reason"]
    assert reason["message"].startswith(
        f"Waits for array {array.pk} (sweep) to succeed: 2 tasks have not: 2 running, the last "
        "predicted to end "
    )
    end = when(reason["details"]["dependencies_end_at"])
    assert when(job(me, then)["estimated_start"]) == end, "all running: the last predicted end"

    advance(admin, 31 * 60)
    cycle(admin)
    assert set(array.tasks.values_list("state", flat=True)) == {"succeeded"}
    detail = job(me, then)
    assert detail["state"] == "running", "started in the cycle the last task succeeded"
    assert detail["waiting_for_arrays"] == []
    last = max(array.tasks.values_list("finished_at", flat=True))
    assert Job.objects.get(pk=then).started_at >= last


def test_a_task_that_fails_for_good_cancels_the_jobs_after_its_array_down_the_chain(api, demo):
    admin, me = api("admin"), api("researcher")
    array = sweep(demo, "0-1", max_retries=0, sim_duration_minutes=600)
    then = submit(me, name="aggregate", gpus=8, after_arrays=[array.pk])
    report = submit(me, name="report", gpus=8, after=[then])
    cycle(admin)
    assert job(me, report)["pending_reason"]["code"] == "DEPENDENCY"
    fail_run(admin, task(array, 1))
    cycle(admin)
    assert job(me, task(array, 1))["state"] == "failed"
    assert job(me, task(array, 0))["state"] == "running", "the other task runs on"
    assert job(me, then)["state"] == "cancelled"
    assert job(me, report)["state"] == "cancelled", "down the chain, in the same cycle"
    assert timeline(then)[-1] == (
        "cancelled",
        f"cancelled: task 1 of array {array.pk} it waited for failed",
    )


def test_cancelling_the_array_cancels_the_jobs_after_it(api, demo):
    admin, me = api("admin"), api("researcher")
    array = sweep(demo, "0-3")
    then = submit(me, name="aggregate", gpus=8, after_arrays=[array.pk])
    cycle(admin)
    cancel_array(demo["researcher"], array.pk)
    cycle(admin)
    assert job(me, then)["state"] == "cancelled"
    assert timeline(then)[-1] == (
        "cancelled",
        f"cancelled: task 0 of array {array.pk} it waited for was cancelled",
    )


def test_the_cascade_costs_the_same_statements_however_many_jobs_it_cancels(demo):
    """A cancelled array with a sweep after it: every task of the sweep is cancelled, each
    with its timeline line, in as many statements for 12 jobs as for 2 (one write for all,
    not one a job: a 1,000-task sweep is not 1,000 UPDATEs)."""
    from types import SimpleNamespace

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduling.clock import cluster_now_ts
    from scheduling.cycle.context import Cycle
    from scheduling.cycle.dependencies import cancel_unreachable

    def statements(n: int) -> int:
        first = sweep(demo, "0-1")
        after = sweep(demo, f"0-{n - 1}", name="eval", after_arrays=[first.pk])
        cancel_array(demo["researcher"], first.pk)
        swept = Cycle(None, SimpleNamespace(now=cluster_now_ts()), "cycle")  # type: ignore[arg-type]
        with CaptureQueriesContext(connection) as ctx:
            cancel_unreachable(swept)
        tasks = after.tasks.all()
        assert {t.state for t in tasks} == {"cancelled"}
        assert all(t.finished_at is not None and t.updated_at == t.finished_at for t in tasks)
        assert [e.kind for e in swept.events] == ["cancelled"] * n
        assert {e.message for e in swept.events} == {
            f"cancelled: task 0 of array {first.pk} it waited for was cancelled"
        }
        return len(ctx)

    assert statements(2) == statements(12)


def test_an_array_after_an_array_waits_and_its_own_bound_applies_once_released(api, demo):
    admin = api("admin")
    first = sweep(demo, "0-1", sim_duration_minutes=30)
    second = sweep(demo, "0-3%1", name="eval", after_arrays=[first.pk])
    cycle(admin)
    codes = set(second.tasks.values_list("pending_code", flat=True))
    assert codes == {"DEPENDENCY"}, "waiting for the first array, not for its own bound"
    assert set(Job.after_arrays.through.objects.filter(job__array=second).values_list(
        "jobarray_id", flat=True
    )) == {first.pk}  # fmt: skip
    advance(admin, 31 * 60)
    cycle(admin)
    states = dict(second.tasks.values_list("array_index", "state"))
    assert sorted(states.values()) == ["pending", "pending", "pending", "running"]
    codes = set(second.tasks.filter(state="pending").values_list("pending_code", flat=True))
    assert codes == {"ARRAY_LIMIT"}


def test_a_job_after_jobs_and_arrays_names_each_and_counts_them(api, demo):
    admin, me = api("admin"), api("researcher")
    prep = submit(me, name="prep", gpus=8, sim_duration_minutes=30)
    array = sweep(demo, "0-1", sim_duration_minutes=600)
    cycle(admin)
    then = submit(me, name="aggregate", gpus=8, after=[prep], after_arrays=[array.pk])
    cycle(admin)
    message = job(me, then)["pending_reason"]["message"]
    assert message.startswith(
        f"Waits for 1 job and 1 array to succeed: job {prep} (prep): running, predicted to end "
    )
    assert f"; array {array.pk} (sweep): 2 tasks have not: 2 running, the last predicted" in (
        message
    )
    first = JobEvent.objects.get(job_id=then, kind="submitted").message
    assert first.endswith(f"; starts after job {prep} and every task of array {array.pk} succeeded")


def test_a_task_also_named_by_id_counts_once_in_its_array(api, demo):
    admin, me = api("admin"), api("researcher")
    array = sweep(demo, "0-1", sim_duration_minutes=600)
    then = submit(me, gpus=8, after=[task(array, 0)], after_arrays=[array.pk])
    cycle(admin)
    message = job(me, then)["pending_reason"]["message"]
    assert message.startswith(
        f"Waits for array {array.pk} (sweep) to succeed: 2 tasks have not: 2 running, the last "
        "predicted to end "
    ), message
    assert job(me, then)["after"] == [task(array, 0)], "as asked"


def test_an_array_of_another_line_is_unknown_as_is_one_that_does_not_exist(demo):
    other = submit_array(
        demo["researcher2"], request(queue="search-rec-experiment", name="private"), "0-1"
    )
    with pytest.raises(ValidationError) as caught:
        submit_job(demo["researcher"], request(after_arrays=[other.pk, 10**9, 2**63]))
    assert caught.value.message_dict == {
        "after_arrays": [f"unknown array {other.pk}", "unknown array 1000000000",
                         f"unknown array {2**63}"]
    }  # fmt: skip
    assert not Job.objects.filter(owner=demo["researcher"]).exists()


def test_an_array_a_viewer_may_not_see_is_named_by_id_and_not_linked(api, demo):
    """An admin's llm job waits for an array of the search line: the llm line's members
    see the job, its verdict names the array by id only, with no link; the admin's has one."""
    admin, me = api("admin"), api("researcher")
    other = submit_array(
        demo["researcher2"], request(queue="search-rec-experiment", name="private"), "0-1"
    )
    then = submit(admin, name="eval", gpus=8, after_arrays=[other.pk])
    cycle(admin)
    reason = job(me, then)["pending_reason"]
    assert reason["message"].startswith(f"Waits for array {other.pk} to succeed: ")
    assert "private" not in str(reason) and reason["array_links"] == {}
    assert job(admin, then)["pending_reason"]["array_links"] == {
        str(other.pk): f"/arrays/{other.pk}/"
    }
    from django.test import Client

    client = Client()
    client.force_login(demo["researcher"])
    page = client.get(f"/jobs/{then}/").content.decode()
    assert f"array {other.pk}" in page and f'href="/arrays/{other.pk}/"' not in page
    client.force_login(demo["admin"])
    assert (
        f'<a href="/arrays/{other.pk}/">array {other.pk}</a>'
        in client.get(f"/jobs/{then}/").content.decode()
    )


def test_an_array_that_can_no_longer_succeed_is_refused_and_nothing_is_written(api, demo):
    array = sweep(demo, "0-3")
    cancel_array(demo["researcher"], array.pk)
    before = Job.objects.count()
    with pytest.raises(ValidationError) as caught:
        submit_job(demo["researcher"], request(after=[10**9], after_arrays=[array.pk]))
    assert caught.value.message_dict == {
        "after": ["unknown job 1000000000"],
        "after_arrays": [
            f"task 0 of array {array.pk} was cancelled; a job after it could never start"
        ],
    }
    with pytest.raises(ValidationError) as caught:
        submit_array(demo["researcher"], request(after_arrays=[array.pk]), "0-1")
    assert list(caught.value.message_dict) == ["after_arrays"]
    assert Job.objects.count() == before


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ([True], "array ids are whole numbers"),
        (["12"], "array ids are whole numbers"),
        (
            list(range(1, limits.AFTER_ARRAYS_MAX + 2)),
            f"at most {limits.AFTER_ARRAYS_MAX} arrays, not {limits.AFTER_ARRAYS_MAX + 1}",
        ),
    ],
)
def test_bad_array_ids_are_refused(demo, given, error):
    with pytest.raises(ValidationError) as caught:
        submit_job(demo["researcher"], request(after_arrays=given))
    assert caught.value.message_dict == {"after_arrays": [error]}


def test_an_array_that_already_succeeded_satisfies_it_at_once(api, demo):
    admin, me = api("admin"), api("researcher")
    array = sweep(demo, "0-1")
    cycle(admin)
    advance(admin, 31 * 60)
    cycle(admin)
    then = submit(me, gpus=8, after_arrays=[array.pk, array.pk])
    assert job(me, then)["after_arrays"] == [array.pk], "repeated ids count once"
    cycle(admin)
    assert job(me, then)["state"] == "running"


def test_a_batch_submission_refuses_after_arrays_and_stores_nothing(demo):
    array = sweep(demo, "0-1")
    with pytest.raises(ValidationError) as caught:
        submit_jobs(demo["researcher"], [request(), request(after_arrays=[array.pk])])
    assert caught.value.message_dict == {
        "jobs[1].after_arrays": ["not in a batch: submit a job that waits on its own"]
    }


def test_the_verdict_counts_an_arrays_tasks_and_reads_those_the_plan_starts_as_running():
    """Pure: ``dependencies.verdict`` on links (no database). A task the same cycle's plan
    starts reads as running with its predicted end; once every task runs with one, the
    latest end is the estimate; a task of another line's array is named by id alone."""
    from scheduling import dependencies
    from scheduling.engine import types as et
    from scheduling.engine.feasibility import ClusterShape

    nodes = [et.NodeView("n0", "r0", "b0", "H100", 80, 8, free_gpus=tuple(range(8)))]
    shape = ClusterShape.of_nodes(nodes)
    view = et.PendingJob(id=99, queue="q", line="l", tier=et.Tier.CORE, gpus=8, gpus_per_node=8)
    row = {"gpus": 8, "gpus_per_node": 8, "gpu_memory_gb": None, "rdma": False,
           "preemptible": False, "avoid_inference": False}  # fmt: skip

    def array(*tasks: tuple[int, int, str], same_line: bool = True) -> dependencies.ArrayLink:
        unmet = tuple(dependencies.Link(pk, "sweep", state, None, same_line, index)
                      for pk, index, state in tasks)  # fmt: skip
        ids = frozenset(pk for pk, *_ in tasks)
        return dependencies.ArrayLink(7, "sweep", same_line, unmet, None, ids)

    links = [array((10, 0, "running"), (11, 1, "pending"), (12, 2, "preempting"))]
    ends = {10: 1_800_000_030.0}
    waits = dependencies.verdict(view, links, dependencies.Ends(ends), shape, row)
    assert waits.message == (
        "Waits for array 7 (sweep) to succeed: 3 tasks have not: 1 running, predicted to end "
        "2027-01-15 08:01 UTC; 1 checkpointing to stop, then waiting again; 1 waiting to start."
    )
    assert waits.details["waiting_for_arrays"] == [7] and waits.estimated_start is None
    assert waits.details["no_estimate_reason"] == (
        "task 1 of array 7 (sweep) it waits for has no predicted end"
    )
    started = {11: 1_800_003_600.0}
    links = [array((10, 0, "running"), (11, 1, "pending"))]
    waits = dependencies.verdict(
        view, links, dependencies.Ends({**ends, **started}, started), shape, row
    )
    assert waits.message == (
        "Waits for array 7 (sweep) to succeed: 2 tasks have not: 2 running, the last predicted "
        "to end 2027-01-15 09:00 UTC."
    )
    assert waits.estimated_start == 1_800_003_600.0
    other = dependencies.verdict(
        view, [array((10, 0, "running"), same_line=False)], dependencies.Ends(ends), shape, row
    )
    assert other.message.startswith("Waits for array 7 to succeed: 1 task has not: 1 running")
    # a task waiting with an estimated start (the plan's, or its place under the bound) has
    # a predicted end too, a lower bound: with it every task has one, and the job an estimate
    links = [array((10, 0, "running"), (11, 1, "pending"))]
    waiting = {11: 1_800_007_200.0}
    waits = dependencies.verdict(view, links, dependencies.Ends(ends, waiting=waiting), shape, row)
    assert waits.message == (
        "Waits for array 7 (sweep) to succeed: 2 tasks have not: 1 running, predicted to end "
        "2027-01-15 08:01 UTC; 1 waiting to start, predicted to end at the earliest 2027-01-15 "
        "10:00 UTC."
    )
    assert waits.estimated_start == 1_800_007_200.0


def test_the_what_if_of_a_job_after_an_array_answers_as_the_loop_does(api, demo):
    from scheduling import whatif

    admin = api("admin")
    array = sweep(demo, "0-3%2", sim_duration_minutes=90)  # two held back by the bound
    cycle(admin)
    asked = request(name="aggregate", after_arrays=(array.pk,))
    answer = whatif.what_if(demo["researcher"], asked)
    assert (answer.status, answer.code) == ("would_wait", "DEPENDENCY")
    assert "2 waiting to start, the last predicted to end at the earliest" in answer.message
    assert answer.estimated_start is not None
    then = submit_job(demo["researcher"], asked)
    cycle(admin)
    then.refresh_from_db()
    assert (answer.code, answer.message) == (then.pending_code, then.pending_message)
    assert answer.estimated_start == then.estimated_start.timestamp()
    with pytest.raises(ValidationError, match="unknown array"):
        whatif.what_if(demo["researcher"], request(after_arrays=(array.pk + 1000,)))
