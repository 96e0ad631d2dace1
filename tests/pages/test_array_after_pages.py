"""A job after whole job arrays on the pages: the submit form's "Start after arrays" field
(ids separated by commas or spaces; bad input, an unknown or unseen array and one that can
no longer succeed refused on the field, nothing stored; the what-if holds the job for
them), the job page's "Starts after" line (each array linked, with how many of its tasks
succeeded, where the viewer may see it; by id alone where not) and the array page's "Jobs
waiting for this array to succeed" (only those the viewer may see)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from quotas.models import Queue
from scheduling import limits
from scheduling.array_services import cancel_array, submit_array
from scheduling.models import Job, JobArray, JobEvent
from scheduling.services import JobRequest, submit_job
from tests.drills import advance, cycle, make_quotas_roomy

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def signed_in(demo, username: str) -> Client:
    client = Client()
    client.force_login(demo[username])
    return client


def form_data(**overrides: str) -> dict[str, str]:
    data = {
        "action": "submit", "name": "aggregate",
        "queue": str(Queue.objects.get(name="llm-core").pk), "gpus": "8", "max_retries": "3",
        "checkpoint_interval_minutes": "60", "sim_duration_minutes": "30",
    }  # fmt: skip
    data.update(overrides)
    return data


def new_array(user, spec: str = "0-5%2", queue: str = "llm-experiment", **over) -> JobArray:
    fields = {"name": "sweep", "queue": queue, "gpus": 4, "sim_duration_minutes": 30}
    fields.update(over)
    return submit_array(user, JobRequest(**fields), spec)


def after(user, arrays: list[int], name: str = "aggregate", queue: str = "llm-core") -> Job:
    return submit_job(user, JobRequest(name=name, queue=queue, gpus=8, after_arrays=arrays))


def text(html: str, element_id: str) -> str:
    """The text of the element with ``element_id`` (tags dropped, spaces squeezed)."""
    match = re.search(rf'<(\w+)[^>]*\bid="{element_id}"[^>]*>(.*?)</\1>', html, re.S)
    assert match, f"no #{element_id}"
    return " ".join(re.sub(r"<[^>]+>", "", match[2]).split())


def page(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (url, response.status_code)
    return response.content.decode()


# -- the submit form --------------------------------------------------------------------------


def test_the_form_has_the_field_in_the_pipeline_with_its_help(demo):
    html = page(signed_in(demo, "researcher"), "/jobs/new/")
    assert 'name="after_arrays"' in html and re.search(r'<label[^>]*for="id_after_arrays"', html)
    pipeline = html[html.index("<legend>Pipeline</legend>") : html.index("</fieldset>", html.index("<legend>Pipeline"))]  # fmt: skip
    assert 'id="id_after"' in pipeline and 'id="id_after_arrays"' in pipeline
    help_text = text(html, "id_after_arrays_helptext")
    assert "every task of which must succeed first, e.g. 42, 43" in help_text
    assert f"(at most {limits.AFTER_ARRAYS_MAX})" in help_text
    assert (
        "If one of their tasks fails for good or is cancelled, this job is cancelled (unless "
        "it starts once they have ended or failed, below)." in help_text
    )


def test_the_form_takes_ids_separated_by_commas_or_spaces_and_stores_them(demo):
    me = demo["researcher"]
    one, two = new_array(me, "0-1"), new_array(me, "0-2", name="other")
    response = signed_in(demo, "researcher").post(
        "/jobs/new/", form_data(after_arrays=f" {two.pk}, {one.pk}  {two.pk} ")
    )
    job = Job.objects.get(name="aggregate")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert sorted(job.after_arrays.values_list("pk", flat=True)) == sorted([one.pk, two.pk])
    assert not job.after.exists()
    submitted = JobEvent.objects.get(job=job, kind="submitted").message
    assert submitted.endswith(
        f"; starts after every task of arrays {two.pk} and {one.pk} succeeded"
    )
    # empty: a job that waits for nothing, as before
    assert signed_in(demo, "researcher").post(
        "/jobs/new/", form_data(name="solo", after_arrays="  ")
    ).status_code == 302  # fmt: skip
    assert not Job.objects.get(name="solo").after_arrays.exists()


def test_jobs_and_arrays_together_and_an_array_of_tasks_after_an_array(demo):
    me = demo["researcher"]
    first = new_array(me, "0-1")
    lone = submit_job(me, JobRequest(name="convert", queue="llm-core", gpus=8))
    client = signed_in(demo, "researcher")
    response = client.post("/jobs/new/", form_data(after=str(lone.pk), after_arrays=str(first.pk)))
    assert response.status_code == 302
    job = Job.objects.get(name="aggregate")
    assert list(job.after.values_list("pk", flat=True)) == [lone.pk]
    assert list(job.after_arrays.values_list("pk", flat=True)) == [first.pk]
    # an array whose every task waits for the first array
    response = client.post(
        "/jobs/new/", form_data(name="second", array="0-2", after_arrays=str(first.pk))
    )
    second = JobArray.objects.get(name="second")
    assert response["Location"] == f"/arrays/{second.pk}/"
    for task in second.tasks.all():
        assert list(task.after_arrays.values_list("pk", flat=True)) == [first.pk]


BAD_IDS = [
    ("12x", "not an array id: '12x' (give ids like 42, 43)"),
    ("-3", "not an array id: '-3'"),
    ("0", "not an array id: '0'"),
    ("٧", "not an array id"),
    ("1.5", "not an array id"),
    ("9" * 30, "not an array id"),
    (", ".join(str(i) for i in range(1, 22)), "at most 20 arrays, not 21"),
    ("999999", "unknown array 999999"),
]


@pytest.mark.parametrize(("value", "message"), BAD_IDS)
def test_bad_ids_are_refused_on_the_field_and_nothing_is_stored(demo, value, message):
    response = signed_in(demo, "researcher").post("/jobs/new/", form_data(after_arrays=value))
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert message in " ".join(errors["after_arrays"]), errors
    html = response.content.decode()
    assert "The job was not submitted" in html and 'href="#id_after_arrays"' in html
    assert message.replace("'", "&#x27;") in text(html, "id_after_arrays_error")
    assert f'value="{value}"' in html, "what was typed is kept on the form"
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_another_line_s_array_is_unknown_to_the_form_and_nothing_is_stored(demo):
    theirs = new_array(demo["researcher2"], "0-1", queue="search-rec-experiment", name="ranker")
    before = Job.objects.count()
    response = signed_in(demo, "researcher").post(
        "/jobs/new/", form_data(after_arrays=str(theirs.pk))
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert f"unknown array {theirs.pk}" in text(html, "id_after_arrays_error")
    assert "ranker" not in html
    assert Job.objects.count() == before and not Job.objects.filter(name="aggregate").exists()


def test_an_array_that_can_no_longer_succeed_is_refused_on_the_field(demo):
    me = demo["researcher"]
    gone = new_array(me, "0-2")
    cancel_array(me, gone.pk)
    response = signed_in(demo, "researcher").post(
        "/jobs/new/", form_data(after_arrays=str(gone.pk), after="987654")
    )
    html = response.content.decode()
    assert f"task 0 of array {gone.pk} was cancelled; a job after it could never start" in text(
        html, "id_after_arrays_error"
    )
    assert "unknown job 987654" in text(html, "id_after_error"), "both fields say theirs"
    assert not Job.objects.filter(name="aggregate").exists()


def test_the_what_if_holds_the_job_for_the_arrays(demo):
    me = demo["researcher"]
    array = new_array(me, "0-3")
    client = signed_in(demo, "researcher")
    html = client.post(
        "/jobs/new/", form_data(action="check", after_arrays=str(array.pk))
    ).content.decode()
    assert text(html, "feasibility-title") == "Would wait for other jobs to succeed"
    assert text(html, "feasibility-code") == "DEPENDENCY"
    assert text(html, "feasibility-text").startswith(
        f"Waits for array {array.pk} (sweep) to succeed: 4 tasks have not: 4 waiting to start"
    )
    assert not Job.objects.filter(name="aggregate").exists(), "a what-if stores nothing"
    # the page's script asks /jobs/feasibility/ with the field (jobs_submit.js)
    queue = Queue.objects.get(name="llm-core").pk
    answer = client.get(f"/jobs/feasibility/?queue={queue}&gpus=8&after_arrays={array.pk}")
    assert answer.status_code == 200 and answer.json()["code"] == "DEPENDENCY"
    refused = client.get(f"/jobs/feasibility/?queue={queue}&gpus=8&after_arrays=999999")
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"after_arrays": ["unknown array 999999"]}
    bad = client.get(f"/jobs/feasibility/?queue={queue}&gpus=8&after_arrays=x")
    assert bad.status_code == 400 and "after_arrays" in bad.json()["errors"]
    # without the field it would start now: the field, not the cluster, holds it
    free = client.get(f"/jobs/feasibility/?queue={queue}&gpus=8")
    assert free.json()["status"] == "fits_now"


# -- the job page -----------------------------------------------------------------------------


def test_the_job_page_says_each_array_it_starts_after_with_its_tasks_succeeded(demo, api):
    admin, me = api("admin"), demo["researcher"]
    array = new_array(me, "0-5%2")  # two at a time, 30 minutes each
    other = new_array(me, "0", name="tokenize", gpus=8)
    lone = submit_job(
        me, JobRequest(name="convert", queue="llm-core", gpus=8, sim_duration_minutes=600)
    )
    then = submit_job(
        me,
        JobRequest(
            name="aggregate", queue="llm-core", gpus=8, after=[lone.pk],
            after_arrays=[array.pk, other.pk],
        ),
    )  # fmt: skip
    cycle(admin)
    advance(admin, 31 * 60)
    cycle(admin)  # two of the sweep's tasks and the tokenizer succeeded
    html = page(signed_in(demo, "researcher"), f"/jobs/{then.pk}/")
    line = re.search(r'<p id="starts-after">(.*?)</p>', html, re.S)[1]
    assert line == (
        f'Starts after: <a href="/jobs/{lone.pk}/">job {lone.pk} (convert)</a>, running; '
        f'<a href="/arrays/{array.pk}/">array {array.pk} (sweep)</a>: 2 of 6 tasks succeeded; '
        f'<a href="/arrays/{other.pk}/">array {other.pk} (tokenize)</a>: 1 of 1 task succeeded. '
        "It starts only once all of them have succeeded (every task of each array), and is "
        "cancelled if one fails or is cancelled."
    )
    assert 'id="pipeline" class="card" data-live-part' in html
    assert text(html, "verdict-code") == "DEPENDENCY"
    assert re.match(
        rf"Waits for 1 job and 1 array to succeed: job {lone.pk} \(convert\): running, "
        rf"predicted to end .*; array {array.pk} \(sweep\): 4 tasks have not: 2 running, the "
        r"last predicted to end .*; 2 waiting to start, the last predicted to end at the "
        r"earliest .*\.$",
        text(html, "verdict-message"),
    ), text(html, "verdict-message")
    # the array that has succeeded is no longer waited for: the verdict leaves it out
    assert "tokenize" not in text(html, "verdict-message")


def test_a_job_after_arrays_alone_says_them_without_jobs(demo):
    me = demo["researcher"]
    array = new_array(me, "0-2")
    then = after(me, [array.pk])
    html = page(signed_in(demo, "researcher"), f"/jobs/{then.pk}/")
    assert text(html, "starts-after") == (
        f"Starts after: array {array.pk} (sweep): 0 of 3 tasks succeeded. It starts only once "
        "all of them have succeeded (every task of each array), and is cancelled if one fails "
        "or is cancelled."
    )
    assert 'id="waited-for-by"' not in html


def test_another_line_s_viewer_sees_no_name_of_an_array_it_may_not_see(demo):
    theirs = new_array(demo["researcher2"], "0-1", queue="search-rec-experiment", name="ranker")
    # an admin's job in the llm line, after the search-rec line's array
    then = after(demo["admin"], [theirs.pk], name="joint-eval")
    html = page(signed_in(demo, "researcher"), f"/jobs/{then.pk}/")
    assert text(html, "starts-after").startswith(
        f"Starts after: array {theirs.pk} (not one you may see). It starts only once"
    )
    assert "ranker" not in html and f'href="/arrays/{theirs.pk}/"' not in html
    assert "tasks succeeded" not in html
    # the array's own line sees it named and counted on its page, but not the waiting job
    page(signed_in(demo, "researcher2"), f"/jobs/{then.pk}/", 404)
    html = page(signed_in(demo, "researcher2"), f"/arrays/{theirs.pk}/")
    assert 'id="array-dependents"' not in html and "joint-eval" not in html
    # an admin sees both, named
    html = page(signed_in(demo, "admin"), f"/jobs/{then.pk}/")
    assert f'<a href="/arrays/{theirs.pk}/">array {theirs.pk} (ranker)</a>: 0 of 2 tasks' in html


def test_the_job_page_reads_its_arrays_in_one_query(demo):
    me = demo["researcher"]
    arrays = [new_array(me, "0-9", name=f"sweep-{i}") for i in range(3)]
    plain = submit_job(me, JobRequest(name="plain", queue="llm-core", gpus=8))
    one, three = after(me, [arrays[0].pk], name="one"), after(me, [a.pk for a in arrays])
    client = signed_in(demo, "researcher")
    client.get("/jobs/")  # warm the session

    def queries(job: Job) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(f"/jobs/{job.pk}/").status_code == 200
        return [q["sql"] for q in captured]

    without, with_one, with_three = queries(plain), queries(one), queries(three)
    # a job waiting for no array reads none (its links of both kinds are one query)
    assert not [q for q in without if 'FROM "scheduling_jobarray"' in q]
    # one query more for its arrays, whether one or three: their succeeded tasks counted
    # and whether the viewer sees each, together
    assert len(with_one) == len(with_three) == len(without) + 1, with_three
    assert len([q for q in with_three if q.startswith('SELECT "scheduling_jobarray"')]) == 1
    assert page(client, f"/jobs/{three.pk}/").count("0 of 10 tasks succeeded") == 3


# -- the array page ---------------------------------------------------------------------------


def test_the_array_page_lists_the_jobs_waiting_for_it_that_the_viewer_may_see(demo, api):
    me = demo["researcher"]
    array = new_array(me, "0-1")
    first = after(me, [array.pk], name="aggregate")
    second = submit_job(
        me,
        JobRequest(name="report", queue="llm-experiment", gpus=8, after_arrays=[array.pk]),
    )
    # an admin's job of another line waits for it too: not the llm line's to see
    hidden = after(demo["admin"], [array.pk], name="ranker-eval", queue="search-rec-core")
    html = page(signed_in(demo, "researcher"), f"/arrays/{array.pk}/")
    assert re.search(r'<p id="array-dependents"[^>]*>(.*?)</p>', html, re.S)[1] == (
        f'Jobs waiting for this array to succeed: <a href="/jobs/{first.pk}/">job {first.pk} '
        f'(aggregate)</a>, pending; <a href="/jobs/{second.pk}/">job {second.pk} (report)</a>, '
        "pending."
    )
    assert "ranker-eval" not in html and f'href="/jobs/{hidden.pk}/"' not in html
    html = page(signed_in(demo, "admin"), f"/arrays/{array.pk}/")
    assert f"job {hidden.pk} (ranker-eval), pending." in text(html, "array-dependents")
    # an array nothing waits for says nothing of it
    html = page(signed_in(demo, "researcher"), f"/arrays/{new_array(me, '0').pk}/")
    assert 'id="array-dependents"' not in html


def test_the_array_page_follows_its_dependents_states(demo, api):
    admin, me = api("admin"), demo["researcher"]
    array = new_array(me, "0-1")
    then = after(me, [array.pk])
    cycle(admin)
    advance(admin, 31 * 60)
    cycle(admin)  # both tasks succeeded; the job starts in that cycle
    assert set(array.tasks.values_list("state", flat=True)) == {"succeeded"}
    html = page(signed_in(demo, "researcher"), f"/arrays/{array.pk}/")
    assert text(html, "array-dependents") == (
        f"Jobs waiting for this array to succeed: job {then.pk} (aggregate), running."
    )
    html = page(signed_in(demo, "researcher"), f"/jobs/{then.pk}/")
    assert f"array {array.pk} (sweep)</a>: 2 of 2 tasks succeeded." in html
