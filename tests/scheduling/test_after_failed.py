"""A job after others' failure (``after_condition: "failed"``, Slurm's ``afternotok``),
through the API and the loop on the small simulated cluster (4 x 8 GPUs): it waits, held
from the engine, until every job it names has ended without succeeding (failed, or was
cancelled), and every array it names has ended with a task that did not succeed; it is
cancelled when one of the jobs succeeds, or every task of one of the arrays does: the
fallback or the alert of a pipeline, beside the job after the same jobs' success.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling.array_services import submit_array
from scheduling.consistency import find_inconsistencies
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job
from tests.drills import advance, cycle, job, make_quotas_roomy, submit
from tests.scheduling.test_after_ended import refused_writing_nothing
from tests.scheduling.test_job_dependencies import fail_run, loop_agrees, timeline

pytestmark = pytest.mark.django_db

FAILED = {"after_condition": "failed"}


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def test_a_job_after_a_failure_waits_then_starts_when_it_fails_where_the_success_one_is_cancelled(
    api,
):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8, max_retries=0)
    cycle(admin)
    fallback = submit(me, name="fallback", gpus=8, after=[first], **FAILED)
    evaluate = submit(me, name="eval", gpus=8, after=[first])
    assert timeline(fallback)[0][1].endswith(
        f"; starts after job {first} ended without succeeding (failed or cancelled)"
    )
    cycle(admin)
    detail = job(me, fallback)
    assert (detail["state"], detail["after_condition"]) == ("pending", "failed")
    assert detail["waiting_for"] == [first]
    reason = detail["pending_reason"]
    assert reason["code"] == "DEPENDENCY"
    assert reason["message"].startswith(
        f"Waits for job {first} (train) to end without succeeding: running, predicted to end "
    )
    assert reason["details"]["after_condition"] == "failed"
    assert reason["details"]["dependencies_end_at"], "the running job's predicted end"
    facts = {fact["key"]: (fact["label"], fact["text"]) for fact in reason["facts"]}
    assert facts["after_condition"] == (
        "Starts once they have", "ended without succeeding (failed or cancelled)"
    )  # fmt: skip
    assert reason["remedy"] == (
        "Nothing to do: it queues like any other job once they have all failed or been "
        "cancelled (an array: once all its tasks ended, not all of them succeeded), and is "
        "cancelled if one of them succeeds (an array: if all its tasks do)."
    )

    fail_run(admin, first)
    cycle(admin)
    assert job(me, first)["state"] == "failed"
    assert job(me, evaluate)["state"] == "cancelled"
    cycle(admin)
    detail = job(me, fallback)
    assert (detail["state"], detail["waiting_for"]) == ("running", [])
    assert find_inconsistencies() == []


def test_a_success_cancels_the_jobs_after_its_failure_down_their_chain(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8, sim_duration_minutes=30)
    cycle(admin)
    fallback = submit(me, name="fallback", gpus=8, after=[first], **FAILED)
    report = submit(me, name="report", gpus=8, after=[fallback])  # after the fallback's success
    cleanup = submit(me, name="cleanup", gpus=8, after=[fallback], after_condition="ended")
    evaluate = submit(me, name="eval", gpus=8, after=[first])
    advance(admin, 31 * 60)
    cycle(admin)
    assert job(me, first)["state"] == "succeeded"
    assert job(me, fallback)["state"] == "cancelled", "it can never fail now"
    assert job(me, report)["state"] == "cancelled", "down the chain, in the same cycle"
    assert timeline(fallback)[-1] == (
        "cancelled",
        f"cancelled: job {first} it waited for succeeded",
    )
    assert timeline(report)[-1] == (
        "cancelled", f"cancelled: job {fallback} it waited for was cancelled"
    )  # fmt: skip
    # the job after the fallback's end: it ended (cancelled), so it runs; eval after success
    cycle(admin)
    assert job(me, cleanup)["state"] == "running"
    assert job(me, evaluate)["state"] == "running"


def test_a_cancelled_dependency_counts_as_not_succeeded(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8)
    fallback = submit(me, name="fallback", gpus=8, after=[first], **FAILED)
    assert me.post(f"/api/v1/jobs/{first}/cancel/").status_code == 200
    cycle(admin)
    cycle(admin)
    assert job(me, fallback)["state"] == "running"


def test_a_job_after_an_arrays_failure_waits_for_every_task_to_end(api, demo):
    admin, me = api("admin"), api("researcher")
    base = {"queue": "llm-experiment", "gpus": 8, "max_retries": 0}
    array = submit_array(
        demo["researcher"], JobRequest(name="sweep", sim_duration_minutes=30, **base), "0-2"
    )
    tasks = dict(array.tasks.values_list("array_index", "pk"))
    alert = submit(me, name="alert", gpus=8, after_arrays=[array.pk], **FAILED)
    collect = submit(me, name="collect", gpus=8, after_arrays=[array.pk])
    cycle(admin)
    fail_run(admin, tasks[1])
    cycle(admin)
    assert job(me, tasks[1])["state"] == "failed"
    assert job(me, collect)["state"] == "cancelled", "after its success: never now"
    detail = job(me, alert)
    assert detail["state"] == "pending", "a task failed, but two have not ended"
    assert detail["waiting_for_arrays"] == [array.pk]
    assert detail["pending_reason"]["message"].startswith(
        f"Waits for array {array.pk} (sweep) to end without succeeding: 2 tasks have not: "
        "2 running, the last predicted to end "
    )
    advance(admin, 31 * 60)
    cycle(admin)
    assert {job(me, t)["state"] for i, t in tasks.items() if i != 1} == {"succeeded"}
    cycle(admin)
    detail = job(me, alert)
    assert (detail["state"], detail["waiting_for_arrays"]) == ("running", [])


def test_an_array_every_task_of_which_succeeded_cancels_the_jobs_after_its_failure(api, demo):
    admin, me = api("admin"), api("researcher")
    base = {"queue": "llm-experiment", "gpus": 8}
    array = submit_array(
        demo["researcher"], JobRequest(name="sweep", sim_duration_minutes=30, **base), "0-1"
    )
    alert = submit(me, name="alert", gpus=8, after_arrays=[array.pk], **FAILED)
    cycle(admin)
    assert job(me, alert)["pending_reason"]["message"].startswith(
        f"Waits for array {array.pk} (sweep) to end without succeeding: 2 tasks have not: "
    )
    advance(admin, 31 * 60)
    cycle(admin)
    assert job(me, alert)["state"] == "cancelled"
    assert timeline(alert)[-1] == (
        "cancelled", f"cancelled: every task of array {array.pk} it waited for succeeded"
    )  # fmt: skip


def test_the_verdict_of_a_job_whose_array_just_succeeded_says_it_is_being_cancelled(api, demo):
    from scheduling.dependencies import read_pending_links

    me = api("researcher")
    array = submit_array(
        demo["researcher"],
        JobRequest(name="sweep", queue="llm-experiment", gpus=8), "0-1",
    )  # fmt: skip
    alert = submit(me, name="alert", gpus=8, after_arrays=[array.pk], **FAILED)
    # every task succeeded between the loop's cancel sweep and its read of the links
    array.tasks.update(state=Job.State.SUCCEEDED)
    links = read_pending_links()
    assert alert not in links.released_at, "held: it can never start"
    (group,) = links.unmet[alert]
    assert group.defeated and group.unmet == ()
    from scheduling.dependencies import Ends, _array_said

    said = _array_said(group, Ends({}))
    assert said.doing == "all 2 tasks succeeded (this job is being cancelled)"
    assert said.last_end is None


def test_jobs_and_arrays_that_already_ended_so_are_met_at_once_and_a_success_refused(api, demo):
    admin, me = api("admin"), api("researcher")
    ok = submit(me, name="ok", gpus=8, sim_duration_minutes=5)
    broken = submit(me, name="broken", gpus=8, max_retries=0)
    cycle(admin)
    fail_run(admin, broken)
    advance(admin, 6 * 60)
    cycle(admin)
    assert (job(me, ok)["state"], job(me, broken)["state"]) == ("succeeded", "failed")
    refused_writing_nothing(
        me, {"after": [ok, broken], **FAILED},
        {"after": [f"job {ok} succeeded; a job after its failure could never start"]},
    )  # fmt: skip
    array = submit_array(
        demo["researcher"],
        JobRequest(name="sweep", queue="llm-experiment", gpus=8, sim_duration_minutes=5), "0-1",
    )  # fmt: skip
    cycle(admin)
    advance(admin, 6 * 60)
    cycle(admin)
    refused_writing_nothing(
        me, {"after_arrays": [array.pk], **FAILED},
        {"after_arrays": [
            f"every task of array {array.pk} succeeded; a job after its failure could never start"
        ]},
    )  # fmt: skip
    # after the success of what failed: refused as before; after its failure: met at once
    refused_writing_nothing(
        me, {"after": [broken]},
        {"after": [f"job {broken} failed; a job after it could never start"]},
    )  # fmt: skip
    later = submit(me, name="fallback", gpus=8, after=[broken], **FAILED)
    cycle(admin)
    assert job(me, later)["state"] == "running"


def test_each_task_after_the_failure_of_the_task_of_its_index(api, demo):
    admin, me = api("admin"), api("researcher")
    base = {"queue": "llm-experiment", "gpus": 8, "max_retries": 0}
    first = submit_array(
        demo["researcher"], JobRequest(name="train", sim_duration_minutes=30, **base), "0-1"
    )
    upstream = dict(first.tasks.values_list("array_index", "pk"))
    cycle(admin)
    retry = submit_array(
        demo["researcher"],
        JobRequest(name="retry", after_corresponding=(first.pk,), after_condition="failed",
                   **base),
        "0-1",
    )  # fmt: skip
    retries = dict(retry.tasks.values_list("array_index", "pk"))
    fail_run(admin, upstream[0])
    cycle(admin)
    cycle(admin)
    assert job(me, retries[0])["state"] == "running", "its task failed"
    assert job(me, retries[1])["state"] == "pending"
    advance(admin, 31 * 60)
    cycle(admin)
    assert job(me, upstream[1])["state"] == "succeeded"
    assert job(me, retries[1])["state"] == "cancelled", "its task succeeded"
    # submitted after: the task of index 1 succeeded, so task 1 could never start
    with pytest.raises(ValidationError) as caught:
        submit_array(
            demo["researcher"],
            JobRequest(name="again", after_corresponding=(first.pk,), after_condition="failed",
                       **base),
            "0-1",
        )  # fmt: skip
    assert caught.value.message_dict == {
        "after_corresponding": [
            f"task 1 of array {first.pk} succeeded; task 1 of this array could never start"
        ]
    }


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"after_condition": "failed"}, "failed needs jobs (after) or arrays (after_arrays)"),
        ({"after_condition": "failed", "singleton": True},
         "a singleton waits for your older jobs of its name to end, whatever the outcome: it "
         "cannot wait for them to fail"),
        ({"after_condition": "failed", "singleton": True, "after": [1]},
         "a singleton waits for your older jobs of its name to end, whatever the outcome: with "
         "after, after_arrays or after_corresponding, set after_condition to ended too"),
        ({"after_condition": "afternotok", "after": [1]}, '"afternotok" is not a valid choice.'),
        ({"after_condition": "FAILED", "after": [1]}, '"FAILED" is not a valid choice.'),
    ],
)  # fmt: skip
def test_a_bad_use_of_failed_is_refused_and_nothing_is_written(api, body, error):
    refused_writing_nothing(api("researcher"), body, {"after_condition": [error]})


def test_the_what_if_of_a_job_after_a_failure_answers_as_the_loop_does(api, demo):
    from scheduling import whatif

    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8, sim_duration_minutes=90)
    cycle(admin)
    asked = JobRequest(name="fallback", queue="llm-experiment", gpus=8, after=(first,),
                       **FAILED)  # fmt: skip
    answer = whatif.what_if(demo["researcher"], asked)
    assert answer.code == "DEPENDENCY"
    assert answer.message.startswith(f"Waits for job {first} (train) to end without succeeding")
    assert answer.details["after_condition"] == "failed"
    loop_agrees(demo["researcher"], admin, asked, answer)


def test_a_job_after_a_failure_submitted_by_the_service_reads_the_condition_back(demo):
    first = submit_job(demo["researcher"], JobRequest(name="a", queue="llm-experiment", gpus=8))
    then = submit_job(
        demo["researcher"],
        JobRequest(name="b", queue="llm-experiment", gpus=8, after=(first.pk,), **FAILED),
    )  # fmt: skip
    assert then.after_condition == Job.AfterCondition.FAILED
    assert list(then.after.values_list("pk", flat=True)) == [first.pk]
