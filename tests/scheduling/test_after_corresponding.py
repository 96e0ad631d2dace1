"""Each task of an array after the task of the same index of another (``after_corresponding``,
Slurm's ``aftercorr``), through the API and the loop on the small simulated cluster (4 x 8
GPUs): task i of an evaluation sweep starts once task i of the training sweep has succeeded
(or ended: ``after_condition``), not once the whole sweep has; a task whose own counterpart
failed is cancelled, the others are not; an index the other array lacks waits for nothing.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling.array_services import submit_array
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job, submit_jobs
from tests.drills import cycle, job, make_quotas_roomy
from tests.scheduling.test_job_dependencies import fail_run, loop_agrees, timeline

pytestmark = pytest.mark.django_db

BASE = {"queue": "llm-experiment", "gpus": 8}


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


def sweep(user, spec: str, name: str = "train", **over):
    return submit_array(user, JobRequest(name=name, **{**BASE, **over}), spec)


def tasks_of(array) -> dict[int, int]:
    return dict(array.tasks.values_list("array_index", "pk"))


def test_each_task_waits_for_its_own_counterpart_only(api, demo):
    admin, me = api("admin"), api("researcher")
    train = tasks_of(sweep(demo["researcher"], "0-2", max_retries=0))
    evaluate = sweep(demo["researcher"], "0-3", name="eval", gpus=1, after_corresponding=[
        train_array := Job.objects.get(pk=train[0]).array_id])  # fmt: skip
    ev = tasks_of(evaluate)
    for index, task in ev.items():
        links = list(Job.objects.get(pk=task).after.values_list("pk", flat=True))
        assert links == ([train[index]] if index in train else []), index
    assert timeline(ev[1])[0][1].endswith(
        f"; starts after job {train[1]} succeeded; each task of its array after the task of "
        f"the same index of array {train_array}; task 1 of array {evaluate.pk} (0-3)"
    )
    cycle(admin)  # the training tasks run; task 3 of eval has no counterpart: it runs too
    assert [job(me, ev[i])["state"] for i in range(4)] == ["pending"] * 3 + ["running"]
    reason = job(me, ev[1])["pending_reason"]
    assert reason["code"] == "DEPENDENCY"
    assert reason["message"].startswith(f"Waits for job {train[1]} (train [1]) to succeed")
    fail_run(admin, train[1])
    Job.objects.filter(pk=train[0]).update(sim_duration_minutes=1)
    cycle(admin)
    assert job(me, ev[1])["state"] == "cancelled", "its own counterpart failed"
    assert timeline(ev[1])[-1] == ("cancelled", f"cancelled: job {train[1]} it waited for failed")
    assert {job(me, ev[i])["state"] for i in (0, 2)} == {"pending"}, "theirs did not"


def test_refusals_name_the_field_and_write_nothing(api, demo):
    me = demo["researcher"]
    train = sweep(me, "0-2", max_retries=0)
    cycle(api("admin"))
    fail_run(api("admin"), tasks_of(train)[2])
    cycle(api("admin"))
    before = Job.objects.count()
    with pytest.raises(ValidationError) as caught:
        sweep(me, "0-3", name="eval", after_corresponding=[train.pk, 999_999])
    assert caught.value.message_dict == {
        "after_corresponding": [
            "unknown array 999999",
            f"task 2 of array {train.pk} failed; task 2 of this array could never start",
        ]
    }
    # after their ends, a failed counterpart is done: accepted
    ended = sweep(me, "0-3", name="eval", after_corresponding=[train.pk], after_condition="ended")
    assert Job.objects.get(array=ended, array_index=2).after.get().pk == tasks_of(train)[2]
    assert Job.objects.count() == before + 4
    # one job, or a batch: refused on the field
    with pytest.raises(ValidationError) as caught:
        submit_job(me, JobRequest(name="x", after_corresponding=(train.pk,), **BASE))
    assert list(caught.value.message_dict) == ["after_corresponding"]
    assert "for a job array only" in caught.value.message_dict["after_corresponding"][0]
    with pytest.raises(ValidationError) as caught:
        submit_jobs(me, [JobRequest(name="x", after_corresponding=(train.pk,), **BASE)])
    assert list(caught.value.message_dict) == ["jobs[0].after_corresponding"]


def test_the_api_takes_it_on_arrays_only(api, demo):
    me = api("researcher")
    train = sweep(demo["researcher"], "0-1")
    body = {"name": "eval", "gpus": 1, "queue": "llm-experiment", "array": "0-1",
            "after_corresponding": [train.pk]}  # fmt: skip
    made = me.post("/api/v1/arrays/", body, format="json")
    assert made.status_code == 201, made.data
    task = Job.objects.filter(array_id=made.json()["id"], array_index=0).get()
    assert job(me, task.pk)["after"] == [tasks_of(train)[0]]
    for bad, error in (
        ({"after_corresponding": ["1"]}, "after_corresponding"),
        ({"after_corresponding": [train.pk] * 21}, "after_corresponding"),
    ):
        response = me.post("/api/v1/arrays/", {**body, **bad}, format="json")
        assert response.status_code == 400 and list(response.data["errors"]) == [error]
    one_job = me.post("/api/v1/jobs/", {k: v for k, v in body.items() if k != "array"},
                      format="json")  # fmt: skip
    assert one_job.status_code == 400
    assert one_job.data["errors"] == {"after_corresponding": [
        "for a job array only: each of its tasks waits for the task of the same index; give "
        "the array's indices (array)"
    ]}  # fmt: skip
    # a form body gives the list once per id, as it gives after's
    made = me.post("/api/v1/arrays/", {**body, "after_corresponding": [train.pk, train.pk]})
    assert made.status_code == 201, made.data


def test_the_what_if_answers_for_the_first_task_as_the_loop_does(api, demo):
    from scheduling import whatif

    admin = api("admin")
    train = sweep(demo["researcher"], "0-1", sim_duration_minutes=90)
    cycle(admin)
    asked = JobRequest(name="eval", after_corresponding=(train.pk,), **BASE)
    answer = whatif.what_if(demo["researcher"], asked, "0-1")
    assert (answer.status, answer.code) == ("would_wait", "DEPENDENCY")
    assert answer.message.startswith(f"Waits for job {tasks_of(train)[0]} (train [0]) to succeed")
    with pytest.raises(ValidationError, match="for a job array only"):
        whatif.what_if(demo["researcher"], asked)
    loop_agrees(demo["researcher"], admin, asked, answer, "0-1")
