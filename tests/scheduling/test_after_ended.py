"""A job after others' ends, whatever the outcome (``after_condition: "ended"``, Slurm's
``afterany``), through the API and the loop on the small simulated cluster (4 x 8 GPUs): it
waits, held from the engine, until every job it names (every task of an array it names)
has ended, succeeded, failed or cancelled; it is never cancelled for their outcome, where
a job after the same jobs' success (the default, ``afterok``) is.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling.array_services import submit_array
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job, submit_jobs
from tests.drills import advance, cycle, job, make_quotas_roomy, submit
from tests.scheduling.test_job_dependencies import fail_run, loop_agrees, timeline

pytestmark = pytest.mark.django_db

ENDED = {"after_condition": "ended"}


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def test_a_job_after_a_failed_job_starts_where_one_after_its_success_is_cancelled(api):
    admin, me = api("admin"), api("researcher")
    blocker = submit(me, name="other", gpus=8)
    first = submit(me, name="train", gpus=8, max_retries=0)
    cycle(admin)
    # the whole cluster: it waits on once released, while ``blocker`` runs
    cleanup = submit(me, name="cleanup", gpus=32, after=[first], **ENDED)
    evaluate = submit(me, name="eval", gpus=8, after=[first])
    assert timeline(cleanup)[0][1].endswith(
        f"; starts after job {first} ended, whatever the outcome"
    )
    cycle(admin)
    detail = job(me, cleanup)
    assert (detail["state"], detail["after_condition"]) == ("pending", "ended")
    assert job(me, evaluate)["after_condition"] == "succeeded"
    assert detail["waiting_for"] == [first]
    reason = detail["pending_reason"]
    assert reason["code"] == "DEPENDENCY"
    assert reason["message"].startswith(
        f"Waits for job {first} (train) to end: running, predicted to end "
    )
    assert reason["details"]["after_condition"] == "ended"
    facts = {fact["key"]: (fact["label"], fact["text"]) for fact in reason["facts"]}
    assert facts["after_condition"] == ("Starts once they have", "ended, whatever the outcome")
    assert facts["waiting_for"] == ("Waits for jobs", f"#{first}")
    assert "after_condition" not in job(me, evaluate)["pending_reason"]["details"]
    assert reason["remedy"] == (
        "Nothing to do: it queues like any other job once they have all ended, whatever the "
        "outcome."
    )
    assert reason["details"]["dependencies_end_at"], "the running job's predicted end"

    fail_run(admin, first)
    cycle(admin)
    assert job(me, first)["state"] == "failed"
    assert job(me, evaluate)["state"] == "cancelled", "after its success: never now"
    for _ in range(2):  # after its end: released, waiting for the cluster, never cancelled
        detail = job(me, cleanup)
        assert detail["state"] == "pending" and detail["waiting_for"] == []
        assert detail["pending_reason"]["code"] != "DEPENDENCY"
        cycle(admin)
    assert job(me, blocker)["state"] == "running"
    assert timeline(evaluate)[-1] == ("cancelled", f"cancelled: job {first} it waited for failed")


def test_a_job_after_an_arrays_end_waits_for_every_task_whatever_each_did(api, demo):
    admin, me = api("admin"), api("researcher")
    base = {"queue": "llm-experiment", "gpus": 8, "max_retries": 0}
    array = submit_array(
        demo["researcher"], JobRequest(name="sweep", sim_duration_minutes=30, **base), "0-2"
    )
    tasks = dict(array.tasks.values_list("array_index", "pk"))
    after = submit(me, name="collect", gpus=8, after_arrays=[array.pk], **ENDED)
    cycle(admin)
    fail_run(admin, tasks[1])
    cycle(admin)
    assert job(me, tasks[1])["state"] == "failed"
    detail = job(me, after)
    assert detail["state"] == "pending", "the failed task has ended; two have not"
    assert detail["waiting_for_arrays"] == [array.pk]
    assert detail["pending_reason"]["message"].startswith(
        f"Waits for array {array.pk} (sweep) to end: 2 tasks have not: 2 running, the last "
        "predicted to end "
    )
    advance(admin, 31 * 60)
    cycle(admin)
    states = {job(me, t)["state"] for i, t in tasks.items() if i != 1}
    assert states == {"succeeded"}
    assert job(me, after)["state"] == "running", "every task ended: one failed, two succeeded"


def test_a_job_after_jobs_that_already_ended_queues_at_once(api, demo):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8, max_retries=0)
    cycle(admin)
    fail_run(admin, first)
    cycle(admin)
    # after its success it is refused (it could never start); after its end, it is done
    with pytest.raises(ValidationError, match="a job after it could never start"):
        submit_job(demo["researcher"], JobRequest(name="x", queue="llm-experiment", gpus=8,
                                                  after=(first,)))  # fmt: skip
    later = submit(me, name="report", gpus=8, after=[first], **ENDED)
    cycle(admin)
    assert job(me, later)["state"] == "running"


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [
        ({"after_condition": "ended"}, "after_condition",
         "ended needs jobs (after) or arrays (after_arrays)"),
        ({"after_condition": "afterany", "after": [1]}, "after_condition",
         '"afterany" is not a valid choice.'),
        ({"after_condition": ["ended"], "after": [1]}, "after_condition",
         '"[\'ended\']" is not a valid choice.'),
        ({"after_condition": "ENDED", "after": [1]}, "after_condition",
         '"ENDED" is not a valid choice.'),
    ],
)  # fmt: skip
def test_a_bad_condition_is_refused_and_nothing_is_written(api, body, field, error):
    refused_writing_nothing(api("researcher"), body, {field: [error]})


def refused_writing_nothing(client, body: dict, errors: dict) -> None:
    """``POST jobs/`` of an 8-GPU job with ``body`` is a 400 with ``errors``, and no job is
    written."""
    before = Job.objects.count()
    response = client.post(
        "/api/v1/jobs/", {"name": "x", "queue": "llm-experiment", "gpus": 8, **body},
        format="json",
    )  # fmt: skip
    assert response.status_code == 400, response.data
    assert response.data["errors"] == errors
    assert Job.objects.count() == before


def test_the_service_refuses_a_condition_it_does_not_know_and_a_batch_refuses_one(demo):
    me = demo["researcher"]
    with pytest.raises(ValidationError) as caught:
        submit_job(me, JobRequest(name="x", queue="llm-experiment", gpus=8, after=(1,),
                                  after_condition="afterok"))  # fmt: skip
    assert caught.value.message_dict == {
        "after_condition": ["after_condition is succeeded, ended or failed"]
    }
    with pytest.raises(ValidationError) as caught:
        submit_jobs(me, [JobRequest(name="x", queue="llm-experiment", gpus=8, **ENDED)])
    assert caught.value.message_dict == {
        "jobs[0].after_condition": ["not in a batch: submit a job that waits on its own"]
    }
    assert not Job.objects.filter(name="x").exists()


def test_the_what_if_of_a_job_after_an_end_answers_as_the_loop_does(api, demo):
    from scheduling import whatif

    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8, sim_duration_minutes=90)
    cycle(admin)
    asked = JobRequest(name="cleanup", queue="llm-experiment", gpus=8, after=(first,),
                       after_condition="ended")  # fmt: skip
    answer = whatif.what_if(demo["researcher"], asked)
    assert (answer.status, answer.code) == ("would_wait", "DEPENDENCY")
    assert answer.message.startswith(f"Waits for job {first} (train) to end: running")
    assert answer.details["after_condition"] == "ended"
    loop_agrees(demo["researcher"], admin, asked, answer)
