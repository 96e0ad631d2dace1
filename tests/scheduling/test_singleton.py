"""One at a time by name (``singleton``, Slurm's ``--dependency=singleton``), through the API
and the loop on the small simulated cluster (4 x 8 GPUs): a singleton job waits for its
owner's older active jobs of the same name to end, whatever the outcome; the links are made
at submission, so a pending one in the middle that is cancelled does not let the next start
beside the running one; other names and other people's jobs are not waited for.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling import limits
from scheduling.array_services import submit_array
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job, submit_jobs
from tests.drills import advance, cycle, job, make_quotas_roomy, submit
from tests.scheduling.test_after_ended import refused_writing_nothing
from tests.scheduling.test_job_dependencies import fail_run, loop_agrees, timeline

pytestmark = pytest.mark.django_db

ONE = {"singleton": True}


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def test_a_chain_of_singletons_runs_one_at_a_time_whatever_each_did(api):
    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8, max_retries=0, **ONE)
    second = submit(me, name="train", gpus=8, **ONE)
    third = submit(me, name="train", gpus=8, **ONE)
    other = submit(me, name="eval", gpus=8, **ONE)
    assert timeline(first)[0][1].endswith("tier experiment; one at a time by name (singleton)")
    assert timeline(third)[0][1].endswith(
        f"; starts after jobs {first} and {second} ended, whatever the outcome; one at a time "
        "by name (singleton)"
    )
    cycle(admin)
    assert [job(me, j)["state"] for j in (first, second, third, other)] == [
        "running", "pending", "pending", "running"
    ]  # fmt: skip
    detail = job(me, second)
    assert (detail["singleton"], detail["after"], detail["after_condition"]) == (
        True, [first], "ended"
    )  # fmt: skip
    assert job(me, third)["after"] == [first, second]
    reason = detail["pending_reason"]
    assert reason["code"] == "DEPENDENCY"
    assert reason["message"].startswith(f"Waits for job {first} (train) to end: running")
    # the one in the middle cancelled: the last still waits for the running one
    assert me.post(f"/api/v1/jobs/{second}/cancel/").status_code == 200
    cycle(admin)
    assert job(me, third)["state"] == "pending"
    assert job(me, third)["waiting_for"] == [first]
    fail_run(admin, first)
    cycle(admin)
    assert job(me, first)["state"] == "failed"
    assert job(me, third)["state"] == "running", "a failure ends it too: the next one starts"


def test_a_singleton_waits_for_its_owners_jobs_of_its_name_only(api, demo):
    admin, me, other = api("admin"), api("researcher"), api("lead")
    mine = submit(me, name="train", gpus=8)  # not a singleton itself: still waited for
    theirs = submit(other, name="train", gpus=8, queue="llm-core")
    later = submit(me, name="train", gpus=8, **ONE)
    cycle(admin)
    assert job(me, later)["after"] == [mine], "not the other person's job of the name"
    assert job(other, theirs)["state"] == "running"
    unrelated = submit(me, name="train-2", gpus=8, **ONE)
    assert job(me, unrelated)["after"] == []


def test_a_singleton_waits_for_an_older_array_of_its_name_as_a_whole(api, demo):
    admin, me = api("admin"), api("researcher")
    base = {"queue": "llm-experiment", "gpus": 8}
    array = submit_array(
        demo["researcher"], JobRequest(name="sweep", sim_duration_minutes=30, **base), "0-2"
    )
    later = submit(me, name="sweep", gpus=8, **ONE)
    detail = job(me, later)
    assert (detail["after"], detail["after_arrays"]) == ([], [array.pk]), "one link, not three"
    cycle(admin)
    assert job(me, later)["state"] == "pending"
    # an array asked for as a singleton: every task waits for the older job of its name
    tasks = submit_array(
        demo["researcher"], JobRequest(name="sweep", singleton=True, **base), "0-1"
    )
    assert [set(t.after.values_list("pk", flat=True)) for t in tasks.tasks.all()] == [
        {later}, {later}
    ]  # fmt: skip
    assert all(t.singleton and t.after_condition == "ended" for t in tasks.tasks.all())
    advance(admin, 31 * 60)
    cycle(admin)
    assert job(me, later)["state"] == "running"


@pytest.mark.parametrize(
    ("body", "field", "error"),
    [
        ({"singleton": True, "after": [1]}, "after_condition",
         "a singleton waits for your older jobs of its name to end, whatever the outcome: "
         "with after, after_arrays or after_corresponding, set after_condition to ended too"),
        ({"singleton": "sometimes"}, "singleton", "Must be a valid boolean."),
        ({"singleton": [True]}, "singleton", "Must be a valid boolean."),
    ],
)  # fmt: skip
def test_a_bad_singleton_is_refused_and_nothing_is_written(api, body, field, error):
    refused_writing_nothing(api("researcher"), body, {field: [error]})


def test_a_singleton_with_other_jobs_to_end_waits_for_both(api):
    admin, me = api("admin"), api("researcher")
    data = submit(me, name="data", gpus=8)
    first = submit(me, name="train", gpus=8)
    later = submit(me, name="train", gpus=8, after=[data], after_condition="ended", **ONE)
    assert job(me, later)["after"] == [data, first]
    # with ended and nothing older of its name: a singleton needs nothing named
    alone = submit(me, name="solo", gpus=8, after_condition="ended", **ONE)
    assert job(me, alone)["after"] == []
    cycle(admin)
    assert job(me, alone)["state"] == "running"


def test_too_many_older_jobs_of_the_name_is_refused(demo, monkeypatch):
    me = demo["researcher"]
    monkeypatch.setattr(limits, "SINGLETON_MAX", 2)
    for _ in range(2):
        submit_job(me, JobRequest(name="many", queue="llm-experiment", gpus=1))
    submit_job(me, JobRequest(name="many", queue="llm-experiment", gpus=1, singleton=True))
    before = Job.objects.count()
    with pytest.raises(ValidationError) as caught:
        submit_job(me, JobRequest(name="many", queue="llm-experiment", gpus=1, singleton=True))
    assert caught.value.message_dict == {
        "singleton": [
            "you have 3 active jobs and arrays named 'many'; a singleton waits for at most 2: "
            "give it another name, or wait for some to end"
        ]
    }
    assert Job.objects.count() == before


def test_a_batch_refuses_a_singleton(demo):
    with pytest.raises(ValidationError) as caught:
        submit_jobs(demo["researcher"], [
            JobRequest(name="x", queue="llm-experiment", gpus=8),
            JobRequest(name="x", queue="llm-experiment", gpus=8, singleton=True),
        ])  # fmt: skip
    assert caught.value.message_dict == {
        "jobs[1].singleton": ["not in a batch: submit a job that waits on its own"]
    }
    assert not Job.objects.filter(name="x").exists()


def test_the_what_if_of_a_singleton_answers_as_the_loop_does(api, demo):
    from scheduling import whatif

    admin, me = api("admin"), api("researcher")
    first = submit(me, name="train", gpus=8, sim_duration_minutes=90)
    cycle(admin)
    asked = JobRequest(name="train", queue="llm-experiment", gpus=8, singleton=True)
    answer = whatif.what_if(demo["researcher"], asked)
    assert (answer.status, answer.code) == ("would_wait", "DEPENDENCY")
    assert answer.message.startswith(f"Waits for job {first} (train) to end: running")
    loop_agrees(demo["researcher"], admin, asked, answer)


def test_the_api_lists_jobs_of_exactly_a_name(api):
    me = api("researcher")
    parts = [submit(me, name="pretrain", gpus=1, **ONE) for _ in range(2)]
    submit(me, name="pretrain-2", gpus=1)
    listed = me.get("/api/v1/jobs/?mine=1&name=pretrain").json()["results"]
    assert sorted(job["id"] for job in listed) == parts
    assert me.get("/api/v1/jobs/?name=nothing-of-that-name").json()["results"] == []
