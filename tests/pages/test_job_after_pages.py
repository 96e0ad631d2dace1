"""Job dependencies on the pages: the submit form's "Start after jobs" field (comma or space
separated ids; bad input refused on the field, nothing stored), and the job page's
"Pipeline": what it starts after (named and linked only where the viewer may see the job)
and the jobs waiting for it."""

from __future__ import annotations

import pytest
from django.test import Client

from quotas.models import BusinessLine, Queue
from scheduling.cycle import run_cycle
from scheduling.models import Job, JobEvent
from scheduling.services import JobRequest, submit_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy(demo):
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form_data(**overrides) -> dict:
    data = {
        "action": "submit", "name": "eval", "queue": str(Queue.objects.get(name="llm-core").pk),
        "gpus": "8", "max_retries": "3", "checkpoint_interval_minutes": "60",
    }  # fmt: skip
    data.update(overrides)
    return data


def a_job(user, name: str, queue: str = "llm-core", after=()) -> Job:
    return submit_job(user, JobRequest(name=name, queue=queue, gpus=8, after=after))


def test_the_form_takes_ids_separated_by_commas_or_spaces(demo):
    me = demo["researcher"]
    a, b = a_job(me, "pretrain"), a_job(me, "convert")
    response = client_of(me).post("/jobs/new/", form_data(after=f" {a.pk}, {b.pk}  {a.pk} "))
    job = Job.objects.get(name="eval")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert sorted(job.after.values_list("pk", flat=True)) == [a.pk, b.pk]
    assert client_of(me).post("/jobs/new/", form_data(name="solo", after="")).status_code == 302
    assert not Job.objects.get(name="solo").after.exists()


@pytest.mark.parametrize(
    ("after", "message"),
    [
        ("12x", "not a job id: '12x'"),
        ("-3", "not a job id: '-3'"),
        ("0", "not a job id: '0'"),
        ("٧", "not a job id"),
        ("1.5", "not a job id"),
        ("9" * 30, "not a job id"),
        (", ".join(str(i) for i in range(1, 22)), "at most 20 jobs, not 21"),
        ("999999", "unknown job 999999"),
    ],
)
def test_bad_ids_are_refused_on_the_field_and_nothing_is_stored(demo, after, message):
    response = client_of(demo["researcher"]).post("/jobs/new/", form_data(after=after))
    assert response.status_code == 200
    form = response.context["form"]
    assert message in " ".join(form.errors["after"]), form.errors
    assert 'href="#id_after"' in response.content.decode()
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_a_nul_in_the_ids_is_refused_as_in_any_field(demo):
    response = client_of(demo["researcher"]).post("/jobs/new/", form_data(after="1\x002"))
    assert response.status_code == 400
    assert "control characters are not allowed" in response.content.decode()
    assert Job.objects.count() == 0


def test_the_job_page_shows_the_pipeline_both_ways(demo):
    me = demo["researcher"]
    first = a_job(me, "pretrain-7b")
    run_cycle(wait_s=10)
    then = a_job(me, "eval-7b", after=[first.pk])
    run_cycle(wait_s=10)
    page = client_of(me).get(f"/jobs/{then.pk}/").content.decode()
    assert (
        f'Starts after: <a href="/jobs/{first.pk}/">job {first.pk} (pretrain-7b)</a>, running.'
        in page
    )
    assert "Waiting for other jobs to succeed" in page and "DEPENDENCY" in page
    assert 'id="pipeline" class="card" data-live-part' in page
    upstream = client_of(me).get(f"/jobs/{first.pk}/").content.decode()
    assert (
        f'Jobs waiting for it to succeed: <a href="/jobs/{then.pk}/">job {then.pk} (eval-7b)'
        "</a>, pending." in upstream
    )
    plain = client_of(me).get(f"/jobs/{a_job(me, 'alone').pk}/").content.decode()
    assert 'id="pipeline"' not in plain


def test_the_pipeline_names_only_jobs_the_viewer_may_see(demo):
    admin, me = demo["admin"], demo["researcher"]
    hidden = a_job(admin, "secret-model", queue="search-rec-core")
    then = a_job(admin, "eval", after=[hidden.pk])
    page = client_of(me).get(f"/jobs/{then.pk}/").content.decode()
    assert f"Starts after: job {hidden.pk} (not one you may see)." in page
    assert "secret-model" not in page and f'href="/jobs/{hidden.pk}/"' not in page
    # the other line's members see the hidden job, but not the waiting one, on its page
    theirs = client_of(demo["researcher2"]).get(f"/jobs/{hidden.pk}/")
    assert theirs.status_code == 200
    assert 'id="pipeline"' not in theirs.content.decode() and "eval" not in theirs.content.decode()
    assert client_of(demo["researcher2"]).get(f"/jobs/{then.pk}/").status_code == 404
