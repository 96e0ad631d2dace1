"""Job arrays through the REST API (``scheduling.array_api``): ``POST/GET arrays/``,
``GET/PATCH arrays/{id}/``, ``POST arrays/{id}/cancel/``, and the tasks as jobs
(``array``/``array_index``, ``GET jobs/?array=ID``), on the small simulated cluster
(4 x 8 GPUs). Every bad input is a 400 naming its field and writes nothing; who may see
and act follows the jobs' rules (404 unseen, 403 seen but not theirs)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.models import AuditRecord
from scheduling.models import Job, JobArray, JobEvent
from tests.concurrency.threads import cluster_held
from tests.drills import cycle, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db

BODY = {"name": "sweep", "queue": "llm-experiment", "gpus": 4, "sim_duration_minutes": 90}
PROGRESS_KEYS = {
    "pending", "running", "preempting", "succeeded", "failed", "cancelled", "held_back",
    "gpus_held",
}  # fmt: skip


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def post_array(client, spec: str = "0-3", **over):
    return client.post("/api/v1/arrays/", {**BODY, "array": spec, **over}, format="json")


def made(client, spec: str = "0-3", **over) -> dict:
    response = post_array(client, spec, **over)
    assert response.status_code == 201, response.data
    return response.data


def nothing_written(before: int) -> bool:
    return not JobArray.objects.exists() and Job.objects.count() == before


# -- submitting ------------------------------------------------------------------------------


def test_submit_answers_the_array_with_its_tasks_in_index_order(api):
    me = api("researcher")
    array = made(me, "7,0-2%2", tier="experiment", after=[submit(me, name="prep")])
    tasks = list(Job.objects.filter(array_id=array["id"]).order_by("array_index"))
    assert array["tasks"] == [t.pk for t in tasks]
    assert [t.array_index for t in tasks] == [0, 1, 2, 7]
    assert {k: array[k] for k in ("name", "queue", "owner", "spec", "size", "max_running")} == {
        "name": "sweep", "queue": "llm-experiment", "owner": "researcher", "spec": "0-2,7%2",
        "size": 4, "max_running": 2,
    }  # fmt: skip
    assert array["created_at"]
    assert array["progress"] == {**dict.fromkeys(PROGRESS_KEYS, 0), "pending": 4}
    # every field of a job submission reached every task, ``after`` included
    assert {(t.gpus, t.tier, t.state) for t in tasks} == {(4, "experiment", "pending")}
    assert all(t.after.count() == 1 for t in tasks)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("", "may not be blank"),
        ("0-5%0", "%0 would run no task"),
        ("0-1000", "at most 1,000 tasks in one array"),
        ("0-99999999999999999999", "is above 99,999"),
        ("٣-٧", "is not an index or a range"),
        ("０-３", "is not an index or a range"),
        ("0 - 3", "is not an index or a range"),
        (" 0-3", "is not an index or a range"),
        ("5-1", "a range runs from low to high"),
        ("0-4:0", "a step is at least 1"),
        ("1,1", "index 1 is asked for twice"),
        ("0-3%x", "after % give the most tasks"),
        ("-1", "is not an index or a range"),
        ("1" * 201, "at most 200 characters"),
        ("0-3\n", "is not an index or a range"),
    ],
)
def test_a_bad_spec_is_a_400_on_array_and_writes_nothing(api, spec, words):
    jobs = Job.objects.count()
    response = post_array(api("researcher"), spec)
    assert response.status_code == 400, response.data
    assert list(response.data["errors"]) == ["array"]
    assert words in response.data["errors"]["array"][0]
    assert nothing_written(jobs)


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"array": 7}, {"array"}),
        ({"array": None}, {"array"}),
        ({"array": ["0-3"]}, {"array"}),
        ({"array": {"a": 1}}, {"array"}),
        ({"array": "0-3", "gpus": "four"}, {"gpus"}),
        ({"array": "x", "gpus": 0}, {"array", "gpus"}),  # every bad field in one answer
        ({"array": "0-3", "gpus": 100_000}, {"gpus"}),
        ({"array": "0-3", "queue": "no-such"}, {"queue"}),
        ({"array": "0-3", "after": [987654]}, {"after"}),
        ({"array": "0-3", "after": "12"}, {"after"}),
        ({"array": "0-3", "arrays": "0-3"}, {"arrays"}),  # unknown field
        ({"array": "0-3", "max_running": 3}, {"max_running"}),  # not a submission field
    ],
)
def test_bad_fields_are_400s_keyed_by_field(api, body, fields):
    jobs = Job.objects.count()
    response = api("researcher").post("/api/v1/arrays/", {**BODY, **body}, format="json")
    assert response.status_code == 400, response.data
    assert set(response.data["errors"]) == fields
    assert nothing_written(jobs)


def test_array_is_required(api):
    response = api("researcher").post("/api/v1/arrays/", BODY, format="json")
    assert response.status_code == 400
    assert set(response.data["errors"]) == {"array"}


def test_a_form_encoded_submission_works_too(api):
    response = api("researcher").post("/api/v1/arrays/", {**BODY, "array": "0-1"})
    assert response.status_code == 201, response.data
    assert response.data["size"] == 2


def test_a_queue_not_theirs_is_a_400_on_queue(api):
    jobs = Job.objects.count()
    response = post_array(api("researcher2"))
    assert response.status_code == 400 and set(response.data["errors"]) == {"queue"}
    assert nothing_written(jobs)


def test_anonymous_is_401(api):
    assert post_array(api(None)).status_code == 401
    assert api(None).get("/api/v1/arrays/").status_code == 401


# -- reading ---------------------------------------------------------------------------------


def test_list_and_detail_count_the_tasks_by_state(api):
    me, admin = api("researcher"), api("admin")
    older = made(me, "0-1")
    array = made(me, "0-5%2")
    cycle(admin)
    listed = me.get("/api/v1/arrays/").data
    assert listed["count"] == 2
    assert [a["id"] for a in listed["results"]] == [array["id"], older["id"]], "newest first"
    detail = me.get(f"/api/v1/arrays/{array['id']}/").data
    assert detail == listed["results"][0]
    assert detail["progress"] == {
        **dict.fromkeys(PROGRESS_KEYS, 0), "running": 2, "pending": 4, "held_back": 4,
        "gpus_held": 8,
    }  # fmt: skip
    paged = me.get("/api/v1/arrays/?limit=1&offset=1").data
    assert [a["id"] for a in paged["results"]] == [older["id"]]


def test_the_list_is_one_query_whatever_its_length(api):
    me = api("researcher")

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert me.get("/api/v1/arrays/").status_code == 200
        return len(captured)

    made(me, "0-9")
    one = queries()
    for _ in range(4):
        made(me, "0-9")
    assert queries() == one <= 2  # the count, the page (its tasks and progress with it)


@pytest.mark.parametrize(
    "ident", ["999999", "٣", "３", "99999999999999999999", "0", "-1", "1.0", "x"]
)
def test_an_unknown_or_odd_id_is_a_404(api, ident):
    admin = api("admin")
    made(api("researcher"))
    assert admin.get(f"/api/v1/arrays/{ident}/").status_code == 404
    assert (
        admin.patch(f"/api/v1/arrays/{ident}/", {"max_running": 1}, format="json").status_code
        == 404
    )
    assert admin.post(f"/api/v1/arrays/{ident}/cancel/").status_code == 404


def test_unknown_list_filters_are_400s(api):
    response = api("researcher").get("/api/v1/arrays/?state=running")
    assert response.status_code == 400 and "state" in response.data["errors"]


# -- who may see and act -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "sees", "acts"),
    [
        ("researcher", 200, 200),  # the owner
        ("lead", 200, 200),  # the lead of the array's line
        ("admin", 200, 200),
        ("oncall", 200, 403),  # sees every array, acts on none
        ("researcher2", 404, 404),  # another line's: not even seen
    ],
)
def test_each_role_sees_and_acts_as_on_jobs(api, role, sees, acts):
    array = made(api("researcher"), "0-3")
    client = api(role)
    assert client.get(f"/api/v1/arrays/{array['id']}/").status_code == sees
    listed = [a["id"] for a in client.get("/api/v1/arrays/").data["results"]]
    assert listed == ([array["id"]] if sees == 200 else [])
    url = f"/api/v1/arrays/{array['id']}/"
    patched = client.patch(url, {"max_running": 2}, format="json")
    assert patched.status_code == acts, patched.data
    assert JobArray.objects.get().max_running == (2 if acts == 200 else None)
    cancelled = client.post(f"{url}cancel/")
    assert cancelled.status_code == acts
    states = set(Job.objects.filter(array_id=array["id"]).values_list("state", flat=True))
    assert states == ({"cancelled"} if acts == 200 else {"pending"})
    if acts == 200:
        assert patched.data["max_running"] == 2 and patched.data["tasks"] == array["tasks"]
        assert cancelled.data == {"cancelled": array["tasks"]}
    else:
        detail = "detail" in (patched.data or {})
        assert detail, patched.data


def test_acting_on_someone_elses_array_is_audited_with_the_callers_address(api):
    array = made(api("researcher"), "0-3%1")
    lead = api("lead")
    url = f"/api/v1/arrays/{array['id']}/"
    assert (
        lead.patch(url, {"max_running": 3}, format="json", REMOTE_ADDR="10.1.2.3").status_code
        == 200
    )
    assert lead.post(f"{url}cancel/", REMOTE_ADDR="10.1.2.4").status_code == 200
    records = {r.action: r for r in AuditRecord.objects.filter(action__startswith="array.")}
    assert set(records) == {"array.max_running", "array.cancel"}
    limit, cancel = records["array.max_running"], records["array.cancel"]
    assert (limit.actor_name, limit.target_id, limit.before, limit.after) == (
        "lead", str(array["id"]), {"max_running": 1}, {"max_running": 3},
    )  # fmt: skip
    assert str(limit.source_ip) == "10.1.2.3" and str(cancel.source_ip) == "10.1.2.4"
    assert cancel.after == {"cancelled": 4}


def test_the_owners_own_actions_are_not_audited(api):
    me = api("researcher")
    array = made(me, "0-1")
    url = f"/api/v1/arrays/{array['id']}/"
    assert me.patch(url, {"max_running": 1}, format="json").status_code == 200
    assert me.post(f"{url}cancel/").status_code == 200
    assert not AuditRecord.objects.filter(action__startswith="array.").exists()


# -- the bound and cancelling ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_running": 0}, "max_running"),
        ({"max_running": -1}, "max_running"),
        ({"max_running": 5}, "max_running"),  # above the array's 4 tasks
        ({"max_running": 1001}, "max_running"),
        ({"max_running": 10**30}, "max_running"),
        ({"max_running": True}, "max_running"),
        ({"max_running": 2.5}, "max_running"),
        ({"max_running": "٣"}, "max_running"),
        ({"max_running": [2]}, "max_running"),
        ({}, "max_running"),
        ({"max_running": 2, "name": "renamed"}, "name"),  # only the bound may change
        ({"max_running": 2, "spec": "0-9"}, "spec"),
    ],
)
def test_a_bad_bound_is_a_400_and_changes_nothing(api, body, field):
    me = api("researcher")
    array = made(me, "0-3%1")
    response = me.patch(f"/api/v1/arrays/{array['id']}/", body, format="json")
    assert response.status_code == 400, response.data
    assert field in response.data["errors"]
    assert JobArray.objects.values_list("name", "spec", "max_running").get() == (
        "sweep", "0-3%1", 1,
    )  # fmt: skip


def test_null_lifts_the_bound_and_put_is_not_allowed(api):
    me, admin = api("researcher"), api("admin")
    array = made(me, "0-3%1")
    url = f"/api/v1/arrays/{array['id']}/"
    response = me.patch(url, {"max_running": None}, format="json")
    assert response.status_code == 200 and response.data["max_running"] is None
    cycle(admin)
    assert me.get(url).data["progress"]["running"] == 4
    assert me.put(url, {"max_running": 1}, format="json").status_code == 405
    assert me.delete(url).status_code == 405


def test_cancel_twice_cancels_nothing_the_second_time(api):
    me = api("researcher")
    array = made(me, "0-2")
    url = f"/api/v1/arrays/{array['id']}/cancel/"
    assert me.post(url).data == {"cancelled": array["tasks"]}
    assert me.post(url).data == {"cancelled": []}
    assert JobEvent.objects.filter(kind="cancelled").count() == 3


# -- the tasks as jobs -----------------------------------------------------------------------


def test_jobs_carry_their_array_and_index_and_filter_by_array(api):
    me = api("researcher")
    array = made(me, "3-5")
    other = made(me, "0")
    plain = submit(me, name="plain")
    listed = me.get(f"/api/v1/jobs/?array={array['id']}").data
    assert sorted(j["id"] for j in listed["results"]) == array["tasks"]
    assert {(j["array"], j["array_index"]) for j in listed["results"]} == {
        (array["id"], 3), (array["id"], 4), (array["id"], 5),
    }  # fmt: skip
    detail = me.get(f"/api/v1/jobs/{other['tasks'][0]}/").data
    assert (detail["array"], detail["array_index"]) == (other["id"], 0)
    assert {k: me.get(f"/api/v1/jobs/{plain}/").data[k] for k in ("array", "array_index")} == {
        "array": None, "array_index": None,
    }  # fmt: skip
    assert me.get("/api/v1/jobs/?array=999999").data["count"] == 0


def test_an_unseen_arrays_tasks_are_not_listed(api):
    array = made(api("researcher"), "0-1")
    assert api("researcher2").get(f"/api/v1/jobs/?array={array['id']}").data["count"] == 0


@pytest.mark.parametrize("value", ["x", "٣", "1.5", "-1", "0", "99999999999999999999", ""])
def test_a_bad_array_filter_is_a_400(api, value):
    response = api("researcher").get("/api/v1/jobs/", {"array": value})
    assert response.status_code == 400, response.data
    assert "array" in response.data["errors"]


def test_a_held_back_task_explains_itself_as_array_limit(api):
    me, admin = api("researcher"), api("admin")
    array = made(me, "0-2%1")
    cycle(admin)
    waiting = me.get(f"/api/v1/jobs/{array['tasks'][2]}/").data
    reason = waiting["pending_reason"]
    assert reason["code"] == "ARRAY_LIMIT"
    assert reason["details"]["array"] == array["id"] and reason["details"]["tasks_before"] == 1
    assert "gpuctl array-limit" in reason["remedy"]


def test_in_a_form_an_empty_or_absent_bound_is_null(api):
    """A form has no null (as for the portal's other nullable fields); JSON must name it."""
    me = api("researcher")
    array = made(me, "0-3%1")
    url = f"/api/v1/arrays/{array['id']}/"
    assert me.patch(url, {"max_running": "2"}, format="multipart").data["max_running"] == 2
    assert me.patch(url, {"max_running": ""}, format="multipart").data["max_running"] is None
    assert me.patch(url, {"max_running": "2"}, format="multipart").status_code == 200
    assert me.patch(url, {}, format="multipart").data["max_running"] is None
    assert me.patch(url, {}, format="json").status_code == 400


@pytest.mark.django_db(transaction=True)
def test_cancelling_while_the_loop_holds_the_cluster_is_a_409_and_cancels_nothing(
    api, demo, monkeypatch
):
    """The cancel waits for a cycle under way (the cluster lock); past its wait, a 409 in
    the API's envelope, every task as it was."""
    from scheduling import array_services

    me = api("researcher")
    made = me.post("/api/v1/arrays/", {"name": "s", "queue": "llm-experiment", "gpus": 1,
                                       "array": "0-2"}, format="json")  # fmt: skip
    assert made.status_code == 201, made.data
    monkeypatch.setattr(array_services, "LOCK_WAIT_S", 0.5)
    with cluster_held():
        response = me.post(f"/api/v1/arrays/{made.data['id']}/cancel/")
    assert response.status_code == 409, response.data
    assert "busy" in response.json()["errors"]["non_field_errors"][0]
    states = set(Job.objects.filter(array_id=made.data["id"]).values_list("state", flat=True))
    assert states == {"pending"}
