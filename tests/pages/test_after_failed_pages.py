"""A job after others' failure (``after_condition`` ``failed``, Slurm's afternotok) on the
pages: the submit form's "Start once they have" offers it and stores it (on every task of
an array); the what-if under the form asked with it ("Would wait for other jobs to fail");
the job page's "Starts after" line says when it starts and when it is cancelled, counts an
array's tasks ended and succeeded, and titles its verdict; the pages list the jobs waiting
for a job's or an array's failure apart."""

from __future__ import annotations

import json
import re

import pytest

from quotas.models import Queue
from scheduling.models import Job, JobArray, JobEvent
from tests.drills import cycle, make_quotas_roomy
from tests.pages.test_after_condition_pages import a_job, form_data, new_array
from tests.pages.test_array_after_pages import page, signed_in, text

pytestmark = pytest.mark.django_db

FAILED = "failed"


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def test_the_form_submits_a_job_after_another_s_failure(demo):
    first = a_job(demo["researcher"])
    client = signed_in(demo, "researcher")
    response = client.post(
        "/jobs/new/", form_data(name="fallback", after=str(first.pk), after_condition=FAILED)
    )
    job = Job.objects.get(name="fallback")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.after_condition == "failed"
    submitted = JobEvent.objects.get(job=job, kind="submitted").message
    assert submitted.endswith(
        f"; starts after job {first.pk} ended without succeeding (failed or cancelled)"
    )
    help_text = text(page(client, "/jobs/new/"), "id_after_condition_helptext")
    assert "Failed or been cancelled: it runs only if they all did" in help_text


def test_an_array_submitted_after_an_array_s_failure_has_every_task_wait_so(demo):
    sweep = new_array(demo["researcher"])
    response = signed_in(demo, "researcher").post(
        "/jobs/new/",
        form_data(name="alert", array="0-1", after_arrays=str(sweep.pk), after_condition=FAILED),
    )
    alert = JobArray.objects.get(name="alert")
    assert response["Location"] == f"/arrays/{alert.pk}/"
    assert set(alert.tasks.values_list("after_condition", flat=True)) == {"failed"}


def test_the_what_if_asked_with_failed_would_wait_for_the_job_to_fail(demo, api):
    first = a_job(demo["researcher"])
    cycle(api("admin"))
    client = signed_in(demo, "researcher")
    queue = Queue.objects.get(name="llm-core").pk
    answer = client.get(
        f"/jobs/feasibility/?queue={queue}&gpus=8&after={first.pk}&after_condition=failed"
    )
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["title"] == "Would wait for other jobs to fail"
    assert body["message"].startswith(
        f"Waits for job {first.pk} (train) to end without succeeding: running"
    )
    assert [
        "Starts once they have", "ended without succeeding (failed or cancelled)"
    ] in body["detail_rows"]  # fmt: skip
    assert not Job.objects.filter(name="cleanup").exists(), "a what-if stores nothing"


def test_the_job_page_says_when_it_starts_and_when_it_is_cancelled(demo, api):
    admin, me = api("admin"), demo["researcher"]
    first = a_job(me)
    sweep = new_array(me)
    cycle(admin)
    then = a_job(me, "fallback", after=[first.pk], after_arrays=[sweep.pk], after_condition=FAILED)
    cycle(admin)
    client = signed_in(demo, "researcher")
    html = page(client, f"/jobs/{then.pk}/")
    line = re.search(r'<p id="starts-after">(.*?)</p>', html, re.S)[1]
    assert line == (
        f'Starts after: <a href="/jobs/{first.pk}/">job {first.pk} (train)</a>, running; '
        f'<a href="/arrays/{sweep.pk}/">array {sweep.pk} (sweep)</a>: 0 of 3 tasks ended, 0 '
        "succeeded. It starts only once all of them have ended without succeeding (failed or "
        "cancelled; an array: once all its tasks ended, not all of them succeeded), and is "
        "cancelled if one succeeds (an array: if all its tasks do)."
    )
    assert text(html, "verdict-title") == "Waiting for other jobs to fail"
    assert text(html, "verdict-message").startswith(
        f"Waits for 1 job and 1 array to end without succeeding: job {first.pk} (train): running"
    )
    config = json.loads(text(html, "job-live-config"))
    assert config["titles"]["DEPENDENCY"] == "Waiting for other jobs to fail"
    # the job and the array it waits for list it apart from those after their success
    after_success = a_job(me, "eval", after=[first.pk])
    waited = re.search(r'<p id="waited-for-by">(.*?)</p>', page(client, f"/jobs/{first.pk}/"))[1]
    assert waited == (
        f'Jobs waiting for it to succeed: <a href="/jobs/{after_success.pk}/">job '
        f"{after_success.pk} (eval)</a>, pending. Jobs waiting for it to end without "
        f'succeeding: <a href="/jobs/{then.pk}/">job {then.pk} (fallback)</a>, pending.'
    )
    dependents = text(page(client, f"/arrays/{sweep.pk}/"), "array-dependents")
    assert dependents == (
        f"Jobs waiting for this array to end with a task not succeeded: job {then.pk} "
        "(fallback), pending."
    )
