"""The bound on one person's active jobs (``settings.ACTIVE_JOBS_PER_PERSON``, Slurm's
MaxSubmitJobs per user): a submission past it is refused with its numbers, through every
way in (one job, a batch, an array; the API and the form), and nothing is written; a job
that ends makes room again; the demo's generator is not bound; 0 means no bound."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduling.array_services import submit_array
from scheduling.models import Job
from scheduling.services import JobRequest, cancel_job, submit_job, submit_jobs

pytestmark = pytest.mark.django_db


def request(name: str = "j") -> JobRequest:
    return JobRequest(name=name, queue="llm-experiment", gpus=1)


@pytest.fixture
def bound_of_three(settings, demo):
    settings.ACTIVE_JOBS_PER_PERSON = 3
    return demo["researcher"]


def test_the_fourth_job_is_refused_with_the_numbers(bound_of_three):
    me = bound_of_three
    first = [submit_job(me, request()).pk for _ in range(3)]
    with pytest.raises(ValidationError) as caught:
        submit_job(me, request("fourth"))
    assert caught.value.messages == [
        "you have 3 active jobs (pending or running) and may have at most 3 at once; this "
        "submission adds 1: wait for some to end, or cancel some"
    ]
    assert not Job.objects.filter(name="fourth").exists()
    cancel_job(me, first[0])
    assert submit_job(me, request("fourth")).name == "fourth", "an ended job makes room"


def test_a_batch_and_an_array_count_every_job(bound_of_three):
    me = bound_of_three
    submit_job(me, request())
    with pytest.raises(ValidationError, match="this submission adds 3"):
        submit_array(me, request("sweep"), "0-2")
    with pytest.raises(ValidationError, match="this submission adds 3"):
        submit_jobs(me, [request("b")] * 3)
    assert Job.objects.filter(owner=me).count() == 1
    assert len(submit_array(me, request("sweep"), "0-1").task_ids) == 2


def test_others_and_the_demo_generator_are_not_bound_by_one_person(bound_of_three, demo):
    me = bound_of_three
    for _ in range(3):
        submit_job(me, request())
    assert submit_job(demo["lead"], request("lead's")).pk
    made = submit_jobs(demo["researcher"], [request("gen")] * 5, per_person_bound=False)
    assert len(made) == 5


def test_no_bound_when_zero(settings, demo):
    settings.ACTIVE_JOBS_PER_PERSON = 0
    assert len(submit_jobs(demo["researcher"], [request()] * 20)) == 20


def test_the_api_and_the_form_say_why(bound_of_three, api, client):
    me = bound_of_three
    for _ in range(3):
        submit_job(me, request())
    response = api("researcher").post(
        "/api/v1/jobs/", {"name": "x", "queue": "llm-experiment", "gpus": 1}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"]["non_field_errors"][0].startswith("you have 3 active jobs")
    client.force_login(me)
    page = client.post(
        "/jobs/new/", {"name": "x", "queue": "llm-experiment", "gpus": "1", "tier": ""}
    )
    assert page.status_code == 200
    text = page.content.decode()
    assert "you have 3 active jobs (pending or running)" in text
    assert "None:" not in text
    assert Job.objects.filter(owner=me).count() == 3


def test_the_count_reads_the_partial_index_of_active_jobs(bound_of_three):
    """A person's finished jobs (a year of them) are not read to count their active ones."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduling.services import _count_active_jobs

    me = bound_of_three
    with CaptureQueriesContext(connection) as ctx:  # the count the bound runs, as it runs it
        _count_active_jobs(me.pk)
    (counted,) = ctx.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: ask what it could use
        cursor.execute(f"EXPLAIN {counted['sql']}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "job_active_owner_idx" in plan, plan
