"""Job arrays on the pages: the submit form's Array field (a spec submits an array through
``submit_array``; a bad one is refused on the field, nothing written), the array page per
role (its figures, its tasks, the bound and cancel-all forms for whoever may act, a 403 for
others who post, a 404 for those who may not see it), the task's line on the job page and
its ``ARRAY_LIMIT`` verdict, the job list's ``sweep [7]`` and ``?array=`` filter, and the
Django admin's read-only arrays."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from core.models import AuditRecord
from quotas.models import Queue
from scheduling import arrays
from scheduling.array_services import submit_array
from scheduling.models import Job, JobArray
from scheduling.services import JobRequest
from tests.concurrency.threads import cluster_held
from tests.drills import cycle, make_quotas_roomy
from tests.pages.test_confirmations import confirm_form, signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def form_data(**overrides: str) -> dict[str, str]:
    data = {
        "action": "submit",
        "name": "sweep",
        "queue": str(Queue.objects.get(name="llm-experiment").pk),
        "gpus": "4",
        "max_retries": "3",
        "checkpoint_interval_minutes": "60",
        "sim_duration_minutes": "90",
    }
    data.update(overrides)
    return data


def new_array(demo, spec: str = "0-5%2", **over) -> JobArray:
    fields = {"name": "sweep", "queue": "llm-experiment", "gpus": 4, "sim_duration_minutes": 90}
    fields.update(over)
    return submit_array(demo["researcher"], JobRequest(**fields), spec)


def body(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (url, response.status_code)
    return response.content.decode()


def text(html: str, element_id: str) -> str:
    """The text of the element with ``element_id`` (tags dropped, spaces squeezed)."""
    match = re.search(rf'<(\w+)[^>]*\bid="{element_id}"[^>]*>(.*?)</\1>', html, re.S)
    assert match, f"no #{element_id}"
    return " ".join(re.sub(r"<[^>]+>", " ", match[2]).split())


# -- the submit form --------------------------------------------------------------------------


def test_the_form_has_the_array_field_with_its_help(demo):
    page = body(signed_in(demo, "researcher"), "/jobs/new/")
    assert 'id="id_array"' in page and re.search(r'<label[^>]*for="id_array"', page)
    assert "as Slurm&#x27;s --array: 0-99, 1,3,5-9 or 0-99%10 (at most 10 at once)" in page
    assert "Each task gets PORTAL_ARRAY_TASK_ID." in page


def test_a_spec_submits_an_array_and_opens_its_page(demo):
    me = signed_in(demo, "researcher")
    response = me.post("/jobs/new/", form_data(array="0-5%2"), follow=True)
    array = JobArray.objects.get()
    assert response.redirect_chain == [(f"/arrays/{array.pk}/", 302)]
    page = response.content.decode()
    assert f"Array {array.pk} submitted: 6 tasks wait for the next cycle." in page
    assert (array.spec, array.size, array.max_running, array.owner) == (
        "0-5%2", 6, 2, demo["researcher"],
    )  # fmt: skip
    tasks = Job.objects.filter(array=array)
    assert sorted(tasks.values_list("array_index", flat=True)) == list(range(6))
    assert set(tasks.values_list("gpus", "name")) == {(4, "sweep")}


def test_an_empty_array_field_submits_one_job_as_before(demo):
    me = signed_in(demo, "researcher")
    response = me.post("/jobs/new/", form_data(array="  "))
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.array is None and not JobArray.objects.exists()


BAD_SPECS = ["0-5%0", "5-1", "x", "1,1", "0-1000", "100000", "0-9%", ",", "0-5:0", "٣", "1 2",
             "-3", "0-1" + ",2" * 80]  # fmt: skip


@pytest.mark.parametrize("spec", BAD_SPECS)
def test_a_bad_spec_is_refused_on_the_field_and_nothing_is_written(demo, spec):
    me = signed_in(demo, "researcher")
    response = me.post("/jobs/new/", form_data(array=spec))
    assert response.status_code == 200
    page = response.content.decode()
    try:
        arrays.parse(spec)
    except arrays.ArraySpecError as exc:
        why = str(exc)
    else:  # longer than the field takes: the form's own words
        why = f"at most {arrays.SPEC_MAX} characters"
    assert why[:30].replace("'", "&#x27;") in text(page, "id_array_error")
    assert "The job was not submitted" in page
    assert not JobArray.objects.exists() and not Job.objects.exists()


def test_a_bad_spec_and_a_bad_field_are_both_said(demo):
    me = signed_in(demo, "researcher")
    page = me.post("/jobs/new/", form_data(array="9-1", gpus="0")).content.decode()
    assert 'id="id_array_error"' in page and 'id="id_gpus_error"' in page
    assert not Job.objects.exists()


def test_the_service_s_refusal_lands_on_its_field(demo):
    me = signed_in(demo, "researcher")
    page = me.post("/jobs/new/", form_data(array="0-3", after="987654")).content.decode()
    assert 'id="id_after_error"' in page
    assert not JobArray.objects.exists() and not Job.objects.exists()


@pytest.mark.parametrize(
    ("spec", "title", "says"),
    [
        ("0-5%2", "Would start 2 of its 6 tasks now", "2 of its 6 tasks would start now, at "
         "most 2 at once: the other 4 wait for their places"),
        ("not a spec", "Would be refused", "Not valid yet: "),
    ],
)  # fmt: skip
def test_the_what_if_answers_for_the_array_on_the_form(demo, spec, title, says):
    """The array's tasks are asked together (``whatif.tasks_answer``); a spec the form
    refuses is the what-if's refusal too, and the spec is kept on the form."""
    me = signed_in(demo, "researcher")
    response = me.post("/jobs/new/", form_data(action="check", array=spec))
    assert response.status_code == 200
    page = response.content.decode()
    assert text(page, "feasibility-title") == title
    assert says in text(page, "feasibility-text")
    assert f'value="{spec}"' in page, "the spec is kept on the form"
    assert not Job.objects.exists()


# -- the array page ---------------------------------------------------------------------------


def test_the_array_page_says_where_its_tasks_stand(demo, api):
    array = new_array(demo)
    cycle(api("admin"))
    page = body(signed_in(demo, "researcher"), f"/arrays/{array.pk}/")
    assert f"Array {array.pk}: sweep" in page
    assert "queue llm-experiment" in page and "owner researcher" in page
    assert text(page, "array-spec") == "0-5%2"
    assert text(page, "array-bound") == "at most 2 at once"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", text(page, "array-created"))
    states = dict(re.findall(r'<tr data-state="(\w+)">.*?data-count="(\d+)"', page))
    assert states == {"pending": "4", "running": "2"}
    assert text(page, "array-size") == "6"
    assert text(page, "array-held-back") == "4 waiting tasks ( ARRAY_LIMIT )"
    assert text(page, "array-gpus") == "8"
    rows = re.findall(r'<tr data-job-id="(\d+)" data-index="(\d+)">(.*?)</tr>', page, re.S)
    assert [int(index) for _, index, _ in rows] == list(range(6))
    held = [row for row in rows if "ARRAY_LIMIT" in row[2]]
    assert len(held) == 4
    assert all("Its array runs at most so many tasks at once" in row[2] for row in held)
    # tasks 2 and 3 take the places the running two free (their predicted ends); 4 and 5
    # the places 2 and 3 free in turn (their predicted runtimes after those ends)
    starts = [re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", row[2]) for row in held]
    assert all(starts), [row[2] for row in held]
    first, second, third, fourth = (m[0] for m in starts)
    assert first <= second < third <= fourth, (first, second, third, fourth)
    assert "unknown" not in held[3][2]
    assert "Cancel all 6 active tasks" in page and 'id="bound-form"' in page


def test_the_array_page_shows_times_in_the_viewer_s_zone(demo, api):
    array = new_array(demo)
    cycle(api("admin"))
    me = signed_in(demo, "researcher")
    me.cookies["tz"] = "Asia/Tokyo"
    page = body(me, f"/arrays/{array.pk}/")
    assert text(page, "array-created").endswith("JST")
    assert " UTC<" not in page


def test_who_sees_the_array_page_and_who_may_act(demo):
    array = new_array(demo)
    for username in ("researcher", "lead", "admin"):
        page = body(signed_in(demo, username), f"/arrays/{array.pk}/")
        assert 'id="bound-form"' in page and 'id="array-cancel-form"' in page, username
    oncall = signed_in(demo, "oncall")
    page = body(oncall, f"/arrays/{array.pk}/")
    assert 'id="bound-form"' not in page and 'id="array-cancel-form"' not in page
    assert oncall.post(f"/arrays/{array.pk}/bound/", {"max_running": "3"}).status_code == 403
    assert oncall.post(f"/arrays/{array.pk}/cancel/", {"confirm": "1"}).status_code == 403
    other = signed_in(demo, "researcher2")
    assert other.get(f"/arrays/{array.pk}/").status_code == 404
    assert other.post(f"/arrays/{array.pk}/bound/", {"max_running": "3"}).status_code == 404
    assert other.post(f"/arrays/{array.pk}/cancel/", {"confirm": "1"}).status_code == 404
    assert signed_in(demo, "admin").get("/arrays/999999/").status_code == 404
    anonymous = Client().get(f"/arrays/{array.pk}/")
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    array.refresh_from_db()
    assert array.max_running == 2 and not Job.objects.filter(state="cancelled").exists()


def test_the_array_page_takes_only_a_page_number(demo):
    array = new_array(demo, "0-119")
    me = signed_in(demo, "researcher")
    first = body(me, f"/arrays/{array.pk}/")
    assert text(first, "task-count") == "120 tasks, page 1 of 3, by index."
    third = body(me, f"/arrays/{array.pk}/?page=3")
    assert 'data-index="100"' in third and 'data-index="99"' not in third
    bad = body(me, f"/arrays/{array.pk}/?page=x", status=400)
    assert "Page: a page number" in bad and "data-index" not in bad
    assert me.get(f"/arrays/{array.pk}/?state=running").status_code == 400


def test_csrf_is_required_to_act(demo):
    array = new_array(demo)
    client = Client(enforce_csrf_checks=True)
    client.force_login(demo["researcher"])
    assert client.post(f"/arrays/{array.pk}/bound/", {"max_running": "5"}).status_code == 403
    array.refresh_from_db()
    assert array.max_running == 2


# -- the bound ---------------------------------------------------------------------------------


def test_the_owner_changes_the_bound_without_an_audit_record(demo):
    array = new_array(demo)
    me = signed_in(demo, "researcher")
    response = me.post(f"/arrays/{array.pk}/bound/", {"max_running": "4"}, follow=True)
    assert response.redirect_chain == [(f"/arrays/{array.pk}/", 302)]
    page = response.content.decode()
    assert f"Array {array.pk} now runs at most 4 tasks at once" in page
    assert text(page, "array-bound") == "at most 4 at once"
    assert text(page, "array-spec") == "0-5%4 (submitted as 0-5%2 )"
    me.post(f"/arrays/{array.pk}/bound/", {"max_running": ""})
    array.refresh_from_db()
    assert array.max_running is None
    assert text(body(me, f"/arrays/{array.pk}/"), "array-bound") == "no bound"
    assert not AuditRecord.objects.filter(action="array.max_running").exists()


def test_a_lead_s_change_of_the_bound_is_audited(demo):
    array = new_array(demo)
    lead = signed_in(demo, "lead")
    assert lead.post(f"/arrays/{array.pk}/bound/", {"max_running": "5"}).status_code == 302
    record = AuditRecord.objects.get(action="array.max_running")
    assert (record.actor, record.before, record.after) == (
        demo["lead"], {"max_running": 2}, {"max_running": 5},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("value", "why"),
    [("0", "at least 1"), ("7", "the array has 6 tasks; at most 6"), ("abc", "digits 0-9"),
     ("٣", "digits 0-9"), ("-1", "digits 0-9"), ("2.5", "digits 0-9"),
     ("1234567", "at most 6 characters")],
)  # fmt: skip
def test_a_bad_bound_is_said_on_the_page_and_changes_nothing(demo, value, why):
    array = new_array(demo)
    response = signed_in(demo, "researcher").post(
        f"/arrays/{array.pk}/bound/", {"max_running": value}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert why in text(page, "id_max_running_error")
    assert f'value="{value}"' in page, "the value is kept to correct"
    array.refresh_from_db()
    assert array.max_running == 2


def test_the_page_s_methods(demo):
    array = new_array(demo)
    me = signed_in(demo, "researcher")
    assert me.get(f"/arrays/{array.pk}/bound/").status_code == 405
    assert me.get(f"/arrays/{array.pk}/cancel/").status_code == 405
    assert me.post(f"/arrays/{array.pk}/").status_code == 405


# -- cancel all --------------------------------------------------------------------------------


def test_cancelling_every_task_asks_first_then_cancels_and_audits_a_lead(demo, api):
    array = new_array(demo)
    cycle(api("admin"))
    lead = signed_in(demo, "lead")
    first = lead.post(f"/arrays/{array.pk}/cancel/")
    assert first.status_code == 200
    page = first.content.decode()
    assert f"Cancel the 6 active tasks of array {array.pk} (sweep)?" in page
    assert "2 holding GPUs and 4 waiting" in page
    assert "<strong>8 GPUs</strong> are released" in page
    assert "<strong>4 waiting tasks</strong> never start" in page
    assert page.count('<tr><td><a href="/jobs/') == 2, "the running tasks, listed"
    assert not Job.objects.filter(state="cancelled").exists(), "the first step changes nothing"

    action, fields = confirm_form(first)
    assert action == f"/arrays/{array.pk}/cancel/" and fields["confirm"] == "1"
    second = lead.post(action, fields, follow=True)
    assert second.redirect_chain == [(f"/arrays/{array.pk}/", 302)]
    page = second.content.decode()
    assert (
        f"Array {array.pk}: 6 tasks cancelled; the 2 running ones&#x27; GPUs are released at "
        "the next cycle." in page
    )
    assert "Every task has ended: nothing left to cancel." in page
    assert set(Job.objects.filter(array=array).values_list("state", flat=True)) == {"cancelled"}
    record = AuditRecord.objects.get(action="array.cancel")
    assert record.actor == demo["lead"] and record.after == {"cancelled": 6}

    again = lead.post(action, fields, follow=True).content.decode()
    assert "has no active task left: nothing cancelled" in again


def test_an_array_with_no_task_running_loses_no_work_and_says_only_that(demo):
    """Nothing runs yet: the confirmation counts the waiting tasks only (no "0.0 GPU-hours
    lost", no "0 GPUs released"), and the flash says nothing of running tasks."""
    array = new_array(demo, "0-2")
    me = signed_in(demo, "researcher")
    first = me.post(f"/arrays/{array.pk}/cancel/")
    page = first.content.decode()
    assert "<strong>3 waiting tasks</strong> never start" in page
    assert "GPU-hours" not in page and "released" not in page
    action, fields = confirm_form(first)
    done = me.post(action, fields, follow=True).content.decode()
    assert f"Array {array.pk}: 3 tasks cancelled.</li>" in done


def test_a_confirmation_that_saw_other_tasks_is_shown_again(demo, api):
    array = new_array(demo)
    me = signed_in(demo, "researcher")
    action, fields = confirm_form(me.post(f"/arrays/{array.pk}/cancel/"))
    cycle(api("admin"))  # two tasks start meanwhile
    again = me.post(action, fields)
    assert again.status_code == 409
    assert "Nothing was done" in again.content.decode()
    assert not Job.objects.filter(state="cancelled").exists()
    assert me.post(action, confirm_form(again)[1]).status_code == 302
    assert set(Job.objects.filter(array=array).values_list("state", flat=True)) == {"cancelled"}
    assert not AuditRecord.objects.filter(action="array.cancel").exists(), "their own"


@pytest.mark.django_db(transaction=True)
def test_cancelling_while_the_loop_holds_the_cluster_says_so_and_cancels_nothing(demo, monkeypatch):
    """The cancel waits for a cycle under way (``cancel_array`` takes the cluster lock); past
    its wait, the array page again with why (503), every task as it was."""
    from scheduling import array_services

    make_quotas_roomy()
    array = new_array(demo)
    me = signed_in(demo, "researcher")
    action, fields = confirm_form(me.post(f"/arrays/{array.pk}/cancel/"))
    monkeypatch.setattr(array_services, "LOCK_WAIT_S", 0.5)
    with cluster_held():
        answer = me.post(action, fields)
    assert answer.status_code == 503
    assert "Nothing was cancelled: the scheduling loop is busy" in answer.content.decode()
    assert set(Job.objects.filter(array=array).values_list("state", flat=True)) == {"pending"}


# -- the job page and the job list -------------------------------------------------------------


def test_a_task_s_page_names_its_array_and_its_array_limit_verdict(demo, api):
    array = new_array(demo)
    cycle(api("admin"))
    task = Job.objects.get(array=array, array_index=3)
    page = body(signed_in(demo, "lead"), f"/jobs/{task.pk}/")
    assert text(page, "job-array") == f"Task 3 of array {array.pk} (sweep, 0-5%2)"
    assert f'<a href="/arrays/{array.pk}/">array {array.pk} (sweep, 0-5%2)</a>' in page
    assert text(page, "verdict-code") == "ARRAY_LIMIT"
    assert text(page, "verdict-title") == "Its array runs at most so many tasks at once"
    assert text(page, "verdict-message") == (
        f"Its array {array.pk} runs at most 2 tasks at once: 2 tasks hold GPUs, and 1 "
        "waiting task goes before task 3."
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", text(page, "estimated-start"))
    assert "raise the bound on the array&#x27;s page" in page
    details = text(page, "verdict-details")
    assert f"Its array {array.pk} " in details and "Its waiting tasks before this one 1" in details


def test_a_job_outside_any_array_has_no_array_line(demo, api):
    from tests.drills import submit

    job_id = submit(api("researcher"), name="single")
    assert 'id="job-array"' not in body(signed_in(demo, "researcher"), f"/jobs/{job_id}/")


def test_the_job_list_names_tasks_by_index_and_lists_an_array_s_tasks(demo, api):
    from tests.drills import submit

    array = new_array(demo, "0-2")
    submit(api("researcher"), name="single")
    me = signed_in(demo, "lead")  # not theirs: the array's tasks whoever's they are
    everything = body(me, "/jobs/?mine=0")
    assert "sweep [2]</a>" in everything and "single</a>" in everything
    page = body(me, f"/jobs/?array={array.pk}")
    assert "single</a>" not in page
    assert re.findall(r"sweep \[(\d)\]</a>", page) == ["0", "1", "2"], "by index"
    assert text(page, "array-filter").startswith(f"The tasks of array {array.pk} (sweep, 0-2)")
    assert f'name="array" value="{array.pk}"' in page, "kept by the Filter button"
    csv = re.search(r'<a href="([^"]+)" id="jobs-csv"', page)[1].replace("&amp;", "&")
    assert f"array={array.pk}" in csv, "the export lists the same tasks"
    rows = b"".join(me.get(csv).streaming_content).decode().splitlines()
    assert len(rows) == 4 and all("sweep" in row for row in rows[1:]), rows
    assert "sweep [1]" in body(me, f"/jobs/?array={array.pk}&state=pending")


@pytest.mark.parametrize("value", ["abc", "999999", "٣", "-1", "9" * 30, "1.5"])
def test_a_bad_array_filter_is_said_not_a_500(demo, value):
    new_array(demo)
    page = body(signed_in(demo, "researcher"), f"/jobs/?array={value}", status=400)
    assert "Array: no array “" in text(page, "array-error")
    assert "data-job-id" not in page


def test_another_line_s_array_is_no_filter_for_them(demo):
    array = new_array(demo)
    page = body(signed_in(demo, "researcher2"), f"/jobs/?array={array.pk}", status=400)
    assert f"no array “{array.pk}” among those you may see" in page


# -- the Django admin --------------------------------------------------------------------------


def test_the_admin_shows_arrays_read_only(demo):
    array = new_array(demo)
    admin = signed_in(demo, "admin")
    listing = body(admin, "/admin/scheduling/jobarray/")
    assert "0-5%2" in listing and "sweep" in listing
    change = body(admin, f"/admin/scheduling/jobarray/{array.pk}/change/")
    assert 'name="_save"' not in change and 'name="max_running"' not in change
    assert admin.get("/admin/scheduling/jobarray/add/").status_code == 403
    posted = admin.post(
        f"/admin/scheduling/jobarray/{array.pk}/change/",
        {"name": "renamed", "spec": "0-1", "size": "2", "max_running": "1"},
    )
    assert posted.status_code == 403
    assert (
        admin.post(f"/admin/scheduling/jobarray/{array.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    array.refresh_from_db()
    assert (array.name, array.spec, array.max_running) == ("sweep", "0-5%2", 2)
    assert signed_in(demo, "lead").get("/admin/scheduling/jobarray/").status_code == 302


# -- the verdict's facts and the pages' cost ----------------------------------------------------


def test_an_array_limit_verdict_s_facts_read_in_words():
    from scheduling.verdict_text import facts

    rows = facts({"array": 12345, "array_index": 10000, "max_running": 2000,
                  "tasks_holding_gpus": 2000, "tasks_waiting_to_start": 0, "tasks_before": 1500,
                  "place_opens_at": "2026-12-01T10:00:00Z"})  # fmt: skip
    assert [(row["label"], row["text"]) for row in rows] == [
        ("Its array", "12345"),
        ("Its index in the array", "10000"),
        ("Most of its tasks at once", "2,000"),
        ("Its tasks holding GPUs", "2,000"),
        ("Its tasks about to start", "0"),
        ("Its waiting tasks before this one", "1,500"),
        ("A place opens at", "2026-12-01 10:00 UTC"),
    ]


@pytest.mark.parametrize("size", [3, 120])
def test_the_array_pages_do_a_fixed_number_of_queries(
    demo, api, size, django_assert_max_num_queries
):
    array = new_array(demo, f"0-{size - 1}%2")
    cycle(api("admin"))
    task = Job.objects.get(array=array, array_index=2)
    me = signed_in(demo, "researcher")
    me.get("/jobs/")  # warm the session
    with django_assert_max_num_queries(9):
        assert me.get(f"/arrays/{array.pk}/").status_code == 200
    with django_assert_max_num_queries(9):
        assert me.get(f"/jobs/?array={array.pk}").status_code == 200
    with django_assert_max_num_queries(11):  # the job page's 10, and the task's array
        assert me.get(f"/jobs/{task.pk}/").status_code == 200


def test_a_refused_bound_s_page_links_its_task_pages_to_the_array_page(demo):
    array = new_array(demo, "0-119")
    response = signed_in(demo, "researcher").post(
        f"/arrays/{array.pk}/bound/", {"max_running": "0"}
    )
    assert response.status_code == 400
    assert f'href="/arrays/{array.pk}/?page=2" rel="next"' in response.content.decode()
