"""One at a time by name on the pages: the submit form's "One at a time by name" box in its
Pipeline, stored on the job (and on every task of an array) with its links to the older
jobs of the name; the what-if under the form, and the page script's ``/jobs/feasibility/``
with the name, answer "Waits for job 12 (train) to end"; the job page says why it waits
for them ("One at a time by name (Slurm's singleton) ...")."""

from __future__ import annotations

import re

import pytest

from quotas.models import Queue
from scheduling.models import Job, JobArray
from tests.drills import cycle, make_quotas_roomy
from tests.pages.test_after_condition_pages import a_job
from tests.pages.test_array_after_pages import form_data, page, signed_in, text

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def test_the_form_offers_the_box_in_its_pipeline(demo):
    html = page(signed_in(demo, "researcher"), "/jobs/new/")
    start = html.index("<legend>Pipeline</legend>")
    pipeline = html[start : html.index("</fieldset>", start)]
    assert re.search(
        r'<label[^>]*for="id_singleton"><input type="checkbox" name="singleton"[^>]*'
        r'id="id_singleton"> One at a time by name</label>',
        pipeline,
    )
    assert "--dependency=singleton" in text(html, "id_singleton_helptext")


def test_the_form_submits_a_singleton_that_waits_for_the_older_job_of_its_name(demo):
    me = demo["researcher"]
    first = a_job(me)
    other = a_job(me, "eval")
    client = signed_in(demo, "researcher")
    response = client.post("/jobs/new/", form_data(name="train", singleton="on"))
    job = Job.objects.get(name="train", singleton=True)
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.after_condition == "ended"
    assert list(job.after.values_list("pk", flat=True)) == [first.pk], other
    # an array: every task
    client.post("/jobs/new/", form_data(name="train", singleton="on", array="0-1"))
    array = JobArray.objects.get(name="train")
    for task in array.tasks.all():
        assert task.singleton
        assert sorted(task.after.values_list("pk", flat=True)) == [first.pk, job.pk]


def test_the_what_if_asked_for_a_singleton_waits_for_the_job_of_its_name(demo, api):
    admin, me = api("admin"), demo["researcher"]
    first = a_job(me)
    cycle(admin)  # it runs
    client = signed_in(demo, "researcher")
    html = client.post(
        "/jobs/new/", form_data(action="check", name="train", singleton="on")
    ).content.decode()
    assert text(html, "feasibility-title") == "Would wait for other jobs to end"
    assert text(html, "feasibility-text").startswith(
        f"Waits for job {first.pk} (train) to end: running, predicted to end "
    )
    assert not Job.objects.filter(singleton=True).exists(), "a what-if stores nothing"
    # the page's script asks /jobs/feasibility/ with the box and the name (jobs_submit.js)
    queue = Queue.objects.get(name="llm-core").pk
    asked = f"/jobs/feasibility/?queue={queue}&gpus=8&singleton=on"
    body = client.get(f"{asked}&name=train").json()
    assert body["message"].startswith(f"Waits for job {first.pk} (train) to end: running")
    for other in (
        asked,
        f"{asked}&name=eval",
        f"/jobs/feasibility/?queue={queue}&gpus=8&name=train",
    ):
        body = client.get(other).json()
        assert body["status"] == "fits_now", (other, body)


def test_the_job_page_says_why_a_singleton_waits(demo, api):
    admin, me = api("admin"), demo["researcher"]
    first = a_job(me)
    cycle(admin)
    client = signed_in(demo, "researcher")
    client.post("/jobs/new/", form_data(name="train", singleton="on"))
    then = Job.objects.get(name="train", singleton=True)
    cycle(admin)
    html = page(client, f"/jobs/{then.pk}/")
    assert text(html, "starts-after").startswith(
        f"Starts after: job {first.pk} (train), running. It starts once all of them have ended"
    )
    assert text(html, "singleton") == (
        "One at a time by name (Slurm's singleton): it was made to wait for researcher's jobs "
        "named “train” that were still waiting or running when it was submitted (above, with "
        "any it was asked to wait for)."
    )
    assert text(html, "verdict-title") == "Waiting for other jobs to end"
    alone = a_job(me, "solo", singleton=True)
    assert text(page(client, f"/jobs/{alone.pk}/"), "singleton").endswith(
        "when it was submitted; there were none."
    )
    # not a singleton: no such line
    assert 'id="singleton"' not in page(client, f"/jobs/{first.pk}/")


def test_the_job_list_filters_by_name_and_the_singleton_line_links_there(demo):
    me = demo["researcher"]
    parts = [a_job(me, "pretrain", singleton=True) for _ in range(2)]
    a_job(me, "pretrain-eval")
    a_job(demo["lead"], "pretrain")  # another person's: not among "mine"
    client = signed_in(demo, "researcher")
    html = page(client, f"/jobs/{parts[1].pk}/")
    link = re.search(r'<p id="singleton">.*?<a href="([^"]+)">jobs named “pretrain”</a>', html)
    assert link and link[1] == "/jobs/?mine=1&amp;name=pretrain"
    listed = page(client, "/jobs/?mine=1&name=pretrain")
    shown = {int(n) for n in re.findall(r'href="/jobs/(\d+)/"', listed)}
    assert shown == {p.pk for p in parts}, "exactly that name, only mine"
    assert re.search(r'<input type="text" name="name" value="pretrain"[^>]*id="id_name"', listed)
    # someone else looking at the job: the same words, no link to their own list
    lead = page(signed_in(demo, "lead"), f"/jobs/{parts[1].pk}/")
    assert "jobs named “pretrain”</a>" not in lead and "jobs named “pretrain”" in lead
    # a name longer than any job's: refused on the field, nothing listed
    refused = client.get("/jobs/?name=" + "x" * 101)
    assert refused.status_code == 400
    assert not re.findall(r'href="/jobs/(\d+)/"', refused.content.decode())
