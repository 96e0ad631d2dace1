"""``after`` on ``POST /api/v1/jobs/`` and in ``GET /api/v1/jobs/{id}/``: what a job may wait
for (jobs the submitter may view that could still succeed), every bad value a 400 in the
API's error envelope that stores nothing, and what the dependency shows to whom."""

from __future__ import annotations

import pytest

from scheduling import limits
from scheduling.models import Job, JobEvent
from tests.drills import cycle, make_quotas_roomy

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy(demo):
    make_quotas_roomy()


def post(client, **body):
    payload = {"name": "eval", "queue": "llm-core", "gpus": 8}
    payload.update(body)
    return client.post("/api/v1/jobs/", payload, format="json")


def submitted(client, **body) -> int:
    response = post(client, **body)
    assert response.status_code == 201, response.data
    return response.data["id"]


def refused(client, after, field: str = "after") -> list[str]:
    """``after`` is refused: a 400 naming ``field``, and nothing more stored."""
    jobs, events = Job.objects.count(), JobEvent.objects.count()
    links = Job.after.through.objects.count()
    response = post(client, after=after)
    assert response.status_code == 400, response.data
    assert list(response.data["errors"]) == [field], response.data
    assert (Job.objects.count(), JobEvent.objects.count()) == (jobs, events)
    assert Job.after.through.objects.count() == links
    return [str(m) for m in _messages(response.data["errors"][field])]


def _messages(errors) -> list:
    """DRF nests a list child's errors by index ({"0": [...]}); flatten them."""
    if isinstance(errors, dict):
        return [m for v in errors.values() for m in _messages(v)]
    if isinstance(errors, list):
        return [m for v in errors for m in _messages(v)]
    return [errors]


@pytest.mark.parametrize(
    "after",
    [
        "12", 12, {"id": 12}, None, ["12x"], ["٧"], ["１２"], [-3], [0],
        [1.5], [True], [[12]], [10**30], [limits.JOB_ID_MAX + 1], [""], ["-"],
        list(range(1, limits.AFTER_MAX + 2)),
    ],
)  # fmt: skip
def test_bad_after_values_are_a_400_that_stores_nothing(api, after):
    assert refused(api("researcher"), after)


@pytest.mark.parametrize("after", [["1\x00"], ["\x00"], "\x00"])
def test_a_nul_in_after_is_refused_as_in_any_field(api, after):
    assert refused(api("researcher"), after, field="non_field_errors") == [
        "control characters are not allowed in the body"
    ]


def test_unknown_and_invisible_jobs_read_the_same(api):
    me, other = api("researcher"), api("researcher2")
    theirs = submitted(other, queue="search-rec-experiment", name="theirs")
    mine = submitted(me, name="mine")
    assert refused(me, [mine, theirs]) == [f"unknown job {theirs}"]
    assert refused(me, [999_999]) == ["unknown job 999999"]
    assert refused(me, [limits.JOB_ID_MAX]) == [f"unknown job {limits.JOB_ID_MAX}"]
    # the lead of the llm line may not see the other line's job either; an admin may
    assert refused(api("lead"), [theirs]) == [f"unknown job {theirs}"]
    assert submitted(api("admin"), after=[theirs])


def test_a_job_that_failed_or_was_cancelled_can_never_be_waited_for(api):
    me = api("researcher")
    failed, cancelled = submitted(me, name="a"), submitted(me, name="b")
    Job.objects.filter(pk=failed).update(state="failed")  # as the loop leaves a job for good
    assert me.post(f"/api/v1/jobs/{cancelled}/cancel/").status_code == 200
    assert refused(me, [failed, cancelled]) == [
        f"job {failed} failed; a job after it could never start",
        f"job {cancelled} was cancelled; a job after it could never start",
    ]


def test_an_accepted_after_collapses_duplicates_and_is_read_back(api):
    me = api("researcher")
    a, b = submitted(me, name="a"), submitted(me, name="b")
    response = post(me, after=[b, a, b, a])
    assert response.status_code == 201, response.data
    assert (response.data["after"], response.data["waiting_for"]) == ([a, b], [a, b])
    job = Job.objects.get(pk=response.data["id"])
    assert sorted(job.after.values_list("pk", flat=True)) == [a, b]
    assert job.events.get().message.endswith(f"; starts after jobs {b} and {a} succeeded")
    assert post(me, after=list(range(1, 1))).status_code == 201, "an empty list: no dependency"
    twenty = [submitted(me, name=f"j{i}") for i in range(limits.AFTER_MAX)]
    assert post(me, after=twenty).status_code == 201
    assert post(me, after=[*twenty, twenty[0]]).status_code == 400, "21 entries, even repeated"


def test_a_job_after_one_that_already_succeeded_is_not_held(api):
    admin, me = api("admin"), api("researcher")
    done = submitted(me, name="done")
    Job.objects.filter(pk=done).update(state="succeeded")
    then = submitted(me, after=[done])
    cycle(admin)
    detail = me.get(f"/api/v1/jobs/{then}/").data
    assert detail["state"] == "running"
    assert (detail["after"], detail["waiting_for"]) == ([done], [])


def test_the_dependency_shows_nothing_a_viewer_could_not_see_before(api):
    """An admin's job waits for a job in another line: the llm line's members see the waiting
    job, its verdict names the other job by id only (no name), with no link."""
    admin, me, lead = api("admin"), api("researcher"), api("lead")
    hidden = submitted(admin, queue="search-rec-core", name="secret-model")
    cycle(admin)
    then = submitted(admin, name="eval", after=[hidden])
    cycle(admin)
    for viewer in (me, lead):
        detail = viewer.get(f"/api/v1/jobs/{then}/").data
        reason = detail["pending_reason"]
        assert reason["code"] == "DEPENDENCY"
        assert reason["message"].startswith(f"Waits for job {hidden} to succeed: running")
        assert "secret-model" not in str(reason)
        assert reason["job_links"] == {}, "no link to a job they may not see"
        assert viewer.get(f"/api/v1/jobs/{hidden}/").status_code == 404, "still hidden"
        assert viewer.post(f"/api/v1/jobs/{hidden}/cancel/").status_code == 404
    admin_view = admin.get(f"/api/v1/jobs/{then}/").data["pending_reason"]
    assert admin_view["job_links"] == {str(hidden): f"/jobs/{hidden}/"}


def test_a_form_body_gives_after_once_per_id_and_any_other_field_still_once(api):
    me = api("researcher")
    a, b = submitted(me, name="a"), submitted(me, name="b")
    body = f"name=eval&queue=llm-core&gpus=8&after={a}&after={b}"
    form = "application/x-www-form-urlencoded"
    response = me.generic("POST", "/api/v1/jobs/", body, content_type=form)
    assert response.status_code == 201, response.content
    assert response.json()["after"] == [a, b]
    twice = me.generic("POST", "/api/v1/jobs/", body + "&gpus=16", content_type=form)
    assert twice.status_code == 400
    assert twice.json() == {"errors": {"non_field_errors": ["the field 'gpus' is given 2 times"]}}
