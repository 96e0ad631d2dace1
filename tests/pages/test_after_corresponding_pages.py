"""Each task after the same task of arrays on the submit form: the field sits with Array
("Many copies"), each new task is linked to the task of its index; without Array the
service's refusal is shown on the field and nothing is stored; the what-if under the form
answers for the first task."""

from __future__ import annotations

import pytest

from scheduling.array_services import submit_array
from scheduling.models import Job, JobArray
from scheduling.services import JobRequest
from tests.drills import cycle, make_quotas_roomy
from tests.pages.test_array_after_pages import form_data, page, signed_in, text

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def train(user) -> JobArray:
    request = JobRequest(name="train", queue="llm-core", gpus=8, sim_duration_minutes=90)
    return submit_array(user, request, "0-1")


def test_the_field_sits_with_array_and_links_each_task_to_its_counterpart(demo):
    html = page(signed_in(demo, "researcher"), "/jobs/new/")
    start = html.index("<legend>Many copies (a job array)</legend>")
    fieldset = html[start : html.index("</fieldset>", start)]
    assert 'name="after_corresponding"' in fieldset
    assert "aftercorr" in text(html, "id_after_corresponding_helptext")
    first = train(demo["researcher"])
    client = signed_in(demo, "researcher")
    response = client.post("/jobs/new/", form_data(
        name="eval", array="0-2", after_corresponding=str(first.pk)))  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:500]
    counterparts = dict(first.tasks.values_list("array_index", "pk"))
    made = JobArray.objects.get(name="eval")
    for task in made.tasks.all():
        expected = [counterparts[task.array_index]] if task.array_index in counterparts else []
        assert list(task.after.values_list("pk", flat=True)) == expected


def test_without_an_array_it_is_refused_on_the_field(demo):
    first = train(demo["researcher"])
    client = signed_in(demo, "researcher")
    response = client.post("/jobs/new/", form_data(name="eval", after_corresponding=str(first.pk)))
    assert response.status_code == 200  # the form again, as for any refusal
    html = response.content.decode()
    assert "The job was not submitted" in html and 'href="#id_after_corresponding"' in html
    assert "for a job array only" in text(html, "id_after_corresponding_error")
    assert not Job.objects.filter(name="eval").exists()


def test_the_what_if_answers_for_the_first_task(demo, api):
    first = train(demo["researcher"])
    cycle(api("admin"))
    client = signed_in(demo, "researcher")
    html = client.post("/jobs/new/", form_data(
        action="check", name="eval", array="0-1", after_corresponding=str(first.pk)
    )).content.decode()  # fmt: skip
    task0 = first.tasks.get(array_index=0).pk
    assert text(html, "feasibility-text").startswith(
        f"Waits for job {task0} (train [0]) to succeed"
    )


def test_the_pages_name_a_task_with_its_index_as_the_job_list_does(demo, api):
    import re

    me = demo["researcher"]
    first = train(me)
    evaluate = submit_array(
        me, JobRequest(name="eval", queue="llm-core", gpus=8, after_corresponding=(first.pk,)),
        "0-1",
    )  # fmt: skip
    cycle(api("admin"))
    upstream = first.tasks.get(array_index=1).pk
    task = evaluate.tasks.get(array_index=1).pk
    client = signed_in(demo, "researcher")
    html = page(client, f"/jobs/{task}/")
    line = re.search(r'<p id="starts-after">(.*?)</p>', html, re.S)[1]
    assert line.startswith(
        f'Starts after: <a href="/jobs/{upstream}/">job {upstream} (train [1])</a>, running.'
    )
    assert text(html, "verdict-message").startswith(
        f"Waits for job {upstream} (train [1]) to succeed: running, predicted to end "
    )
    waited = re.search(r'<p id="waited-for-by">(.*?)</p>', page(client, f"/jobs/{upstream}/"))[1]
    assert waited == (
        f'Jobs waiting for it to succeed: <a href="/jobs/{task}/">job {task} (eval [1])</a>, '
        "pending."
    )
    listed = page(client, "/jobs/?mine=1")
    assert f"#{upstream} train [1]</a>" in listed, "as the job list names it"
