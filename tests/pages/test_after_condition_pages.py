"""A job after others' ends, whatever the outcome, on the pages: the submit form's "Start
once they have" choice in its Pipeline (succeeded, the default, Slurm's afterok; or ended,
afterany) stored on the job, or on every task of an array; refused on the field with no job
or array named, or with a value it does not offer (nothing stored); the what-if under the
form asked with it ("Waits for job 12 (train) to end"); the job page's "Starts after" line
("It starts once all of them have ended, whatever the outcome", never the cancel sentence)
and the pages' lists of the jobs waiting for a job or an array, by what each waits for."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas.models import Queue
from scheduling.array_services import submit_array
from scheduling.models import Job, JobArray, JobEvent
from scheduling.services import JobRequest, submit_job
from tests.drills import cycle, make_quotas_roomy
from tests.pages import test_array_after_pages as after_pages
from tests.pages.test_array_after_pages import page, signed_in, text
from tests.scheduling.test_job_dependencies import fail_run

pytestmark = pytest.mark.django_db

ENDED = "ended"
CANCEL_SENTENCE = "is cancelled if one fails or is cancelled"


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def form_data(**overrides: str) -> dict[str, str]:
    return after_pages.form_data(**{"name": "cleanup", **overrides})


def a_job(user, name: str = "train", **over) -> Job:
    fields = {"name": name, "queue": "llm-core", "gpus": 8, "sim_duration_minutes": 90}
    fields.update(over)
    return submit_job(user, JobRequest(**fields))


def new_array(user, spec: str = "0-2", **over) -> JobArray:
    fields = {"name": "sweep", "queue": "llm-experiment", "gpus": 4, "sim_duration_minutes": 30}
    fields.update(over)
    return submit_array(user, JobRequest(**fields), spec)


# -- the submit form --------------------------------------------------------------------------


def test_the_form_offers_the_choice_in_its_pipeline_succeeded_by_default(demo):
    html = page(signed_in(demo, "researcher"), "/jobs/new/")
    start = html.index("<legend>Pipeline</legend>")
    pipeline = html[start : html.index("</fieldset>", start)]
    assert re.search(r'<label[^>]*for="id_after_condition"[^>]*>Start once they have', pipeline)
    select = re.search(r'<select name="after_condition"[^>]*>(.*?)</select>', pipeline, re.S)
    assert select, "a select in the Pipeline fieldset"
    options = re.findall(r'<option value="(\w+)"( selected)?>([^<]*)</option>', select[1])
    assert options == [
        ("succeeded", " selected", "succeeded (Slurm&#x27;s afterok)"),
        ("ended", "", "ended, whatever the outcome (Slurm&#x27;s afterany)"),
        ("failed", "", "failed or been cancelled (Slurm&#x27;s afternotok)"),
    ]
    assert "never cancelled for their outcome" in text(html, "id_after_condition_helptext")


def test_the_form_submits_a_job_after_another_s_end(demo):
    me = demo["researcher"]
    first = a_job(me)
    client = signed_in(demo, "researcher")
    response = client.post("/jobs/new/", form_data(after=str(first.pk), after_condition=ENDED))
    job = Job.objects.get(name="cleanup")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.after_condition == "ended"
    assert list(job.after.values_list("pk", flat=True)) == [first.pk]
    submitted = JobEvent.objects.get(job=job, kind="submitted").message
    assert submitted.endswith(f"; starts after job {first.pk} ended, whatever the outcome")
    # left as it is: after their success, as before
    client.post("/jobs/new/", form_data(name="eval", after=str(first.pk)))
    assert Job.objects.get(name="eval").after_condition == "succeeded"


def test_an_array_submitted_after_an_array_s_end_has_every_task_wait_so(demo):
    me = demo["researcher"]
    sweep = new_array(me)
    response = signed_in(demo, "researcher").post(
        "/jobs/new/",
        form_data(name="collect", array="0-2", after_arrays=str(sweep.pk), after_condition=ENDED),
    )
    collect = JobArray.objects.get(name="collect")
    assert response["Location"] == f"/arrays/{collect.pk}/"
    assert set(collect.tasks.values_list("after_condition", flat=True)) == {"ended"}
    assert collect.tasks.count() == 3


def test_the_array_page_titles_its_tasks_waiting_for_an_end_so(demo, api):
    me = demo["researcher"]
    sweep = new_array(me)
    collect = new_array(me, "0-1", name="collect", after_arrays=(sweep.pk,),
                        after_condition=ENDED)  # fmt: skip
    after_success = new_array(me, "0-1", name="eval", after_arrays=(sweep.pk,))
    cycle(api("admin"))
    client = signed_in(demo, "researcher")
    ended = page(client, f"/arrays/{collect.pk}/")
    assert ended.count(">Waiting for other jobs to end</span>") == 2
    assert "Waiting for other jobs to succeed" not in ended
    succeeded = page(client, f"/arrays/{after_success.pk}/")
    assert succeeded.count(">Waiting for other jobs to succeed</span>") == 2


def test_ended_with_nothing_to_wait_for_is_refused_on_the_field_and_nothing_is_stored(demo):
    response = signed_in(demo, "researcher").post("/jobs/new/", form_data(after_condition=ENDED))
    assert response.status_code == 200
    html = response.content.decode()
    assert "The job was not submitted" in html and 'href="#id_after_condition"' in html
    assert text(html, "id_after_condition_error") == (
        "ended needs jobs (after) or arrays (after_arrays)"
    )
    assert response.context["form"].errors == {
        "after_condition": ["ended needs jobs (after) or arrays (after_arrays)"]
    }
    assert not Job.objects.exists() and not JobEvent.objects.exists()


@pytest.mark.parametrize("value", ["afterany", "ENDED", "afternotok", "ended "])
def test_a_value_the_form_does_not_offer_is_refused_and_nothing_is_stored(demo, value):
    first = a_job(demo["researcher"])
    before = Job.objects.count()
    response = signed_in(demo, "researcher").post(
        "/jobs/new/", form_data(after=str(first.pk), after_condition=value)
    )
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert list(errors) == ["after_condition"]
    assert "is not one of the available choices" in " ".join(errors["after_condition"])
    assert Job.objects.count() == before and not Job.objects.filter(name="cleanup").exists()


# -- the what-if under the form ---------------------------------------------------------------


def test_the_what_if_asked_with_the_choice_waits_for_the_job_to_end(demo, api):
    admin, me = api("admin"), demo["researcher"]
    first = a_job(me)
    cycle(admin)  # it runs
    client = signed_in(demo, "researcher")
    html = client.post(
        "/jobs/new/", form_data(action="check", after=str(first.pk), after_condition=ENDED)
    ).content.decode()
    assert text(html, "feasibility-title") == "Would wait for other jobs to end"
    assert text(html, "feasibility-code") == "DEPENDENCY"
    assert text(html, "feasibility-text").startswith(
        f"Waits for job {first.pk} (train) to end: running, predicted to end "
    )
    assert not Job.objects.filter(name="cleanup").exists(), "a what-if stores nothing"
    # the page's script asks /jobs/feasibility/ with the field (jobs_submit.js)
    queue = Queue.objects.get(name="llm-core").pk
    asked = f"/jobs/feasibility/?queue={queue}&gpus=8&after={first.pk}"
    answer = client.get(f"{asked}&after_condition=ended")
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["title"] == "Would wait for other jobs to end"
    assert body["message"].startswith(f"Waits for job {first.pk} (train) to end: running")
    assert body["details"]["after_condition"] == "ended"
    assert ["Starts once they have", "ended, whatever the outcome"] in body["detail_rows"]
    # without it (or with the default), after its success, as before
    for default in (asked, f"{asked}&after_condition=succeeded"):
        body = client.get(default).json()
        assert body["title"] == "Would wait for other jobs to succeed"
        assert body["message"].startswith(f"Waits for job {first.pk} (train) to succeed")
    # the service's refusal and the form's, on the field
    refused = client.get(f"/jobs/feasibility/?queue={queue}&gpus=8&after_condition=ended")
    assert refused.status_code == 400
    assert refused.json()["errors"] == {
        "after_condition": ["ended needs jobs (after) or arrays (after_arrays)"]
    }
    bad = client.get(f"{asked}&after_condition=afterany")
    assert bad.status_code == 400 and list(bad.json()["errors"]) == ["after_condition"]


def test_the_what_if_after_a_failed_job_s_end_would_start_now(demo, api):
    admin, me = api("admin"), demo["researcher"]
    first = a_job(me, max_retries=0)
    cycle(admin)
    fail_run(admin, first.pk)
    cycle(admin)
    assert Job.objects.get(pk=first.pk).state == "failed"
    client = signed_in(demo, "researcher")
    queue = Queue.objects.get(name="llm-core").pk
    asked = f"/jobs/feasibility/?queue={queue}&gpus=8&after={first.pk}"
    # after its success it could never start; after its end, it has ended: nothing holds it
    refused = client.get(asked)
    assert refused.status_code == 400
    assert "a job after it could never start" in " ".join(refused.json()["errors"]["after"])
    answer = client.get(f"{asked}&after_condition=ended")
    assert answer.status_code == 200 and answer.json()["status"] == "fits_now", answer.json()


# -- the job page -----------------------------------------------------------------------------


def test_the_job_page_says_it_starts_once_they_have_ended_whatever_the_outcome(demo, api):
    admin, me = api("admin"), demo["researcher"]
    first = a_job(me)
    cycle(admin)
    then = a_job(me, "cleanup", after=[first.pk], after_condition=ENDED)
    cycle(admin)
    html = page(signed_in(demo, "researcher"), f"/jobs/{then.pk}/")
    line = re.search(r'<p id="starts-after">(.*?)</p>', html, re.S)[1]
    assert line == (
        f'Starts after: <a href="/jobs/{first.pk}/">job {first.pk} (train)</a>, running. '
        "It starts once all of them have ended, whatever the outcome, even if one fails or is "
        "cancelled."
    )
    assert CANCEL_SENTENCE not in html and "have succeeded" not in line
    assert text(html, "verdict-code") == "DEPENDENCY"
    assert text(html, "verdict-title") == "Waiting for other jobs to end"
    assert text(html, "verdict-message").startswith(
        f"Waits for job {first.pk} (train) to end: running, predicted to end "
    )
    # the page's script titles the verdicts it refetches as the page does (jobs_detail.js)
    config = json.loads(text(html, "job-live-config"))
    assert config["titles"]["DEPENDENCY"] == "Waiting for other jobs to end"
    # the job it waits for lists it as waiting for its end
    upstream = page(signed_in(demo, "researcher"), f"/jobs/{first.pk}/")
    assert text(upstream, "waited-for-by") == (
        f"Jobs waiting for it to end, whatever the outcome: job {then.pk} (cleanup), pending."
    )
    # the job list titles it so too
    listed = page(signed_in(demo, "researcher"), "/jobs/")
    row = re.search(
        rf'<tr[^>]*>(?:(?!</tr>).)*href="/jobs/{then.pk}/"(?:(?!</tr>).)*</tr>', listed, re.S
    )
    assert row and "Waiting for other jobs to end" in row[0]


def test_the_job_page_counts_the_tasks_ended_of_an_array_it_waits_for_to_end(demo):
    me = demo["researcher"]
    sweep = new_array(me)
    then = a_job(me, "collect", after_arrays=[sweep.pk], after_condition=ENDED)
    html = page(signed_in(demo, "researcher"), f"/jobs/{then.pk}/")
    assert text(html, "starts-after") == (
        f"Starts after: array {sweep.pk} (sweep): 0 of 3 tasks ended. It starts once all of "
        "them have ended, whatever the outcome (every task of each array), even if one fails "
        "or is cancelled."
    )
    assert CANCEL_SENTENCE not in html


def test_the_default_still_reads_as_before(demo, api):
    admin, me = api("admin"), demo["researcher"]
    first = a_job(me)
    sweep = new_array(me)
    cycle(admin)
    then = a_job(me, "eval", after=[first.pk], after_arrays=[sweep.pk])
    cycle(admin)
    html = page(signed_in(demo, "researcher"), f"/jobs/{then.pk}/")
    assert text(html, "starts-after") == (
        f"Starts after: job {first.pk} (train), running; array {sweep.pk} (sweep): 0 of 3 "
        "tasks succeeded. It starts only once all of them have succeeded (every task of each "
        "array), and is cancelled if one fails or is cancelled."
    )
    assert text(html, "verdict-title") == "Waiting for other jobs to succeed"
    assert json.loads(text(html, "job-live-config"))["titles"]["DEPENDENCY"] == (
        "Waiting for other jobs to succeed"
    )
    upstream = page(signed_in(demo, "researcher"), f"/jobs/{first.pk}/")
    assert text(upstream, "waited-for-by") == (
        f"Jobs waiting for it to succeed: job {then.pk} (eval), pending."
    )
    assert "whatever the outcome" not in upstream


def test_the_pages_list_the_jobs_waiting_by_what_they_wait_for_in_the_same_queries(demo):
    me = demo["researcher"]
    first, sweep = a_job(me), new_array(me)
    client = signed_in(demo, "researcher")
    client.get("/jobs/")  # warm the session

    def queries(url: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200
        return len(captured)

    eval_ = a_job(me, "eval", after=[first.pk], after_arrays=[sweep.pk])
    one = queries(f"/jobs/{first.pk}/"), queries(f"/arrays/{sweep.pk}/")
    cleanup = a_job(me, "cleanup", after=[first.pk], after_arrays=[sweep.pk], after_condition=ENDED)
    report = a_job(me, "report", after=[first.pk], after_arrays=[sweep.pk])
    assert (queries(f"/jobs/{first.pk}/"), queries(f"/arrays/{sweep.pk}/")) == one
    html = page(client, f"/jobs/{first.pk}/")
    assert text(html, "waited-for-by") == (
        f"Jobs waiting for it to succeed: job {eval_.pk} (eval), pending; job {report.pk} "
        f"(report), pending. Jobs waiting for it to end, whatever the outcome: job "
        f"{cleanup.pk} (cleanup), pending."
    )
    html = page(client, f"/arrays/{sweep.pk}/")
    assert text(html, "array-dependents") == (
        f"Jobs waiting for this array to succeed: job {eval_.pk} (eval), pending; job "
        f"{report.pk} (report), pending. Jobs waiting for this array to end, whatever the "
        f"outcome: job {cleanup.pk} (cleanup), pending."
    )
    assert f'<a href="/jobs/{cleanup.pk}/">job {cleanup.pk} (cleanup)</a>' in html
