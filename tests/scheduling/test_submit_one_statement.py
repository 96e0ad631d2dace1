"""A submission writes its job and the job's ``submitted`` event in one statement (#16): one
round trip for both rows, all or nothing, in the transaction that holds the person's
submission lock (``scheduling.submission_lock``) from before their active jobs are
counted; and through the API with a token it costs seven queries in all."""

from __future__ import annotations

import pytest
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduling import services
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest, submit_job

pytestmark = pytest.mark.django_db

REQUEST = JobRequest(name="one", queue="llm-experiment", gpus=1)


def test_the_job_and_its_event_are_one_insert_under_the_persons_lock(demo):
    with CaptureQueriesContext(connection) as ctx:
        submit_job(demo["researcher"], REQUEST)
    statements = [q["sql"] for q in ctx.captured_queries]
    # (the test's own transaction makes the submission's a savepoint: left out)
    own = [s for s in statements if "SAVEPOINT" not in s]
    writes = [s for s in own if not s.lstrip().upper().startswith("SELECT")]
    assert len(writes) == 1, statements  # no second INSERT
    assert "scheduling_job" in writes[0] and "scheduling_jobevent" in writes[0]
    locked = next(i for i, s in enumerate(own) if "pg_advisory_xact_lock" in s)
    counted = next(i for i, s in enumerate(own) if s.startswith("SELECT COUNT(*)"))
    assert locked < counted < own.index(writes[0]), own


def test_what_it_writes_is_what_it_returns(demo):
    job = submit_job(demo["researcher"], REQUEST)
    assert not job._state.adding and job._state.db == "default"
    (event,) = job.events.all()  # prefetched: no query
    stored_job, (stored_event,) = Job.objects.get(pk=job.pk), JobEvent.objects.filter(job=job)
    assert (stored_event.pk, stored_event.kind, stored_event.message) == (
        event.pk, "submitted", "submitted by researcher to llm-experiment: 1 GPU, tier experiment"
    )  # fmt: skip
    assert stored_event.at == stored_job.submitted_at == stored_job.updated_at == event.at
    assert stored_job.state == Job.State.PENDING and stored_job.owner == demo["researcher"]


def test_all_or_nothing(demo):
    """A statement the database refuses (here the event's text) leaves no job behind."""
    fields = services.resolve_job_request(demo["researcher"], REQUEST)
    job = Job(owner=demo["researcher"], state=Job.State.PENDING, **fields)
    before = Job.objects.count()
    with pytest.raises(DataError), transaction.atomic():
        services._insert_with_first_event(job, "submitted", "NUL \x00 in the text")
    assert Job.objects.count() == before


def test_inside_a_callers_transaction_it_rolls_back_with_it(demo):
    before = Job.objects.count()
    with transaction.atomic():
        submit_job(demo["researcher"], REQUEST)
        transaction.set_rollback(True)
    assert Job.objects.count() == before


def test_a_token_submission_takes_seven_queries(demo):
    """Token with user and role, queue, cluster shape, the person's submission lock, their
    active jobs (their bound, ``check_active_jobs``), cluster clock, job + event (and, in
    the test's transaction, the savepoint and its release)."""
    client = APIClient()
    key = Token.objects.get_or_create(user=demo["researcher"])[0].key
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    body = {"name": "q", "queue": "llm-experiment", "gpus": 1}
    assert client.post("/api/v1/jobs/", body, format="json").status_code == 201
    with CaptureQueriesContext(connection) as ctx:
        response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    queries = [q["sql"] for q in ctx.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert len(queries) == 7, [sql[:60] for sql in queries]
    assert response.json()["events"][0]["kind"] == "submitted"
