"""quota-requests/ through the REST API: every role on every path, bad input, impact."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from core.models import AuditRecord
from quotas.models import BusinessLine, QuotaChange, QuotaRequest
from scheduling.models import Job
from tests.quotas.conftest import run_job

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "researcher", "researcher2", "lead", "oncall", "admin")
BODY = {"business_line": "llm", "quota_gpus": 20, "guarantee_gpus": 6, "reason": "Q3 pretraining"}


def client_for(api, role):
    return api(None if role == "anonymous" else role)


@pytest.fixture
def req_id(api) -> int:
    response = api("lead").post("/api/v1/quota-requests/", BODY, format="json")
    assert response.status_code == 201, response.data
    return response.data["id"]


def state_of_everything() -> tuple:
    return (
        list(QuotaRequest.objects.order_by("pk").values()),
        list(BusinessLine.objects.order_by("pk").values_list("quota_gpus", "guarantee_gpus")),
        QuotaChange.objects.count(),
        AuditRecord.objects.count(),
    )


# path, method, body, {role: status}; roles not named get 403 (anonymous 401)
PATHS = [
    ("quota-requests/", "get", None, {r: 200 for r in ROLES[1:]}),
    ("quota-requests/{id}/", "get", None, {"researcher": 200, "lead": 200, "admin": 200, "researcher2": 404, "oncall": 404}),
    ("quota-requests/{id}/impact/", "get", None, {"researcher": 200, "lead": 200, "admin": 200, "researcher2": 404, "oncall": 404}),
    ("quota-requests/", "post", BODY, {"lead": 201}),
    ("quota-requests/{id}/approve/", "post", {"note": "ok"}, {"admin": 200, "researcher2": 404, "oncall": 404}),
    ("quota-requests/{id}/reject/", "post", {"note": "no"}, {"admin": 200, "researcher2": 404, "oncall": 404}),
    ("quota-requests/{id}/withdraw/", "post", {}, {"lead": 200, "researcher2": 404, "oncall": 404}),
]  # fmt: skip


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("path,method,body,allowed", PATHS, ids=lambda v: str(v)[:40])
def test_every_role_on_every_path(api, req_id, role, path, method, body, allowed):
    expected = 401 if role == "anonymous" else allowed.get(role, 403)
    before = state_of_everything()
    url = "/api/v1/" + path.format(id=req_id)
    response = getattr(client_for(api, role), method)(url, body, format="json")
    assert response.status_code == expected, (role, response.status_code, response.data)
    if expected >= 400:
        assert state_of_everything() == before, f"{role} changed something through {path}"


def test_the_list_is_scoped_to_the_callers_lines(api, lead_everywhere):
    ids = {}
    for line in ("llm", "search-rec"):
        response = api("lead").post("/api/v1/quota-requests/", {**BODY, "business_line": line, "quota_gpus": 10, "guarantee_gpus": 4}, format="json")  # fmt: skip
        assert response.status_code == 201, response.data
        ids[line] = response.data["id"]

    def listed(role):
        return {
            r["id"] for r in client_for(api, role).get("/api/v1/quota-requests/").data["results"]
        }

    assert listed("admin") == set(ids.values())
    assert listed("lead") == set(ids.values())
    assert listed("researcher") == {ids["llm"]}
    assert listed("researcher2") == {ids["search-rec"]}
    assert listed("oncall") == set()
    filtered = api("admin").get("/api/v1/quota-requests/?business_line=search-rec&state=pending")
    assert [r["id"] for r in filtered.data["results"]] == [ids["search-rec"]]


def test_a_lead_requests_and_an_admin_approves_through_the_api(api):
    created = api("lead").post("/api/v1/quota-requests/", BODY, format="json")
    assert created.status_code == 201
    body = created.data
    assert (body["business_line"], body["queue"], body["state"], body["requester"]) == (
        "llm",
        None,
        "pending",
        "lead",
    )
    impact = api("admin").get(f"/api/v1/quota-requests/{body['id']}/impact/").data
    assert impact["fits"] is True and impact["guarantees"]["total_after"] == 12
    approved = api("admin").post(
        f"/api/v1/quota-requests/{body['id']}/approve/", {"note": "go"}, format="json"
    )
    assert approved.status_code == 200, approved.data
    assert (approved.data["state"], approved.data["status"], approved.data["decided_by"]) == (
        "approved",
        "active",
        "admin",
    )
    line = api("lead").get("/api/v1/business-lines/?name=llm").data["results"][0]
    assert (line["quota_gpus"], line["guarantee_gpus"]) == (20, 6)


def test_a_request_with_a_later_start_is_scheduled(api):
    start = timezone.now() + timedelta(days=2)
    body = {
        **BODY,
        "starts_at": start.isoformat(),
        "ends_at": (start + timedelta(days=7)).isoformat(),
    }
    created = api("lead").post("/api/v1/quota-requests/", body, format="json").data
    approved = api("admin").post(
        f"/api/v1/quota-requests/{created['id']}/approve/", {}, format="json"
    )
    assert approved.data["status"] == "scheduled" and approved.data["applied_at"] is None
    assert BusinessLine.objects.get(name="llm").quota_gpus == 14


NEXT_YEAR = datetime.now(UTC).year + 1  # the demo's cluster clock starts at the wall clock
BAD = [
    ({"guarantee_gpus": 30, "quota_gpus": 20}, "guarantee_gpus"),
    ({"quota_gpus": -5}, "quota_gpus"),
    ({"guarantee_gpus": -1}, "guarantee_gpus"),
    ({"quota_gpus": 5000}, "quota_gpus"),
    ({"quota_gpus": "lots"}, "quota_gpus"),
    ({"quota_gpus": 1.5}, "quota_gpus"),
    ({"business_line": "nope"}, "business_line"),
    ({"business_line": ""}, "business_line"),
    ({"queue": "search-rec-core"}, "queue"),
    ({"queue": "ghost-queue"}, "queue"),
    (
        {"starts_at": f"{NEXT_YEAR}-01-02T00:00:00Z", "ends_at": f"{NEXT_YEAR}-01-01T00:00:00Z"},
        "ends_at",
    ),
    ({"ends_at": "9999-12-31T00:00:00Z"}, "ends_at"),  # beyond the two-year horizon
    ({"starts_at": "9999-12-31T00:00:00Z"}, "starts_at"),
    ({"starts_at": "0001-01-01T00:00:00Z"}, "starts_at"),  # shown west of UTC: a 500
    ({"starts_at": "next tuesday"}, "starts_at"),
    ({"reason": ""}, "reason"),
    ({"colour": "blue"}, "colour"),
    ({"quota_gpus": None, "guarantee_gpus": None}, "quota_gpus"),
]


@pytest.mark.parametrize("change,field", BAD, ids=lambda v: str(v)[:40])
def test_bad_requests_are_400_with_the_field_and_store_nothing(api, change, field):
    before = state_of_everything()
    response = api("lead").post("/api/v1/quota-requests/", {**BODY, **change}, format="json")
    assert response.status_code == 400, response.data
    assert field in response.data["errors"], response.data
    assert all(isinstance(m, str) and m for m in response.data["errors"][field])
    assert state_of_everything() == before


def test_a_researcher_is_refused_before_their_body_is_even_read(api):
    response = api("researcher").post("/api/v1/quota-requests/", {"quota_gpus": "x"}, format="json")
    assert response.status_code == 403
    assert "team lead" in str(response.data["detail"])


def test_decisions_say_what_is_wrong(api, req_id):
    admin = api("admin")
    assert (
        admin.post("/api/v1/quota-requests/999999/approve/", {}, format="json").status_code == 404
    )
    no_note = admin.post(f"/api/v1/quota-requests/{req_id}/reject/", {"note": ""}, format="json")
    assert no_note.status_code == 400 and "note" in no_note.data["errors"]
    odd = admin.post(f"/api/v1/quota-requests/{req_id}/approve/", {"veto": True}, format="json")
    assert odd.status_code == 400 and "veto" in odd.data["errors"]
    assert (
        admin.post(f"/api/v1/quota-requests/{req_id}/approve/", {}, format="json").status_code
        == 200
    )
    again = admin.post(f"/api/v1/quota-requests/{req_id}/reject/", {"note": "x"}, format="json")
    assert again.status_code == 409 and "already approved" in again.data["errors"]["state"][0]
    late = api("lead").post(f"/api/v1/quota-requests/{req_id}/withdraw/", {}, format="json")
    assert late.status_code == 409 and "state" in late.data["errors"]


def test_an_approval_that_does_not_fit_is_400_and_changes_nothing(api):
    body = {**BODY, "quota_gpus": 30, "guarantee_gpus": 30}
    created = api("lead").post("/api/v1/quota-requests/", body, format="json").data
    impact = api("admin").get(f"/api/v1/quota-requests/{created['id']}/impact/").data
    assert impact["fits"] is False and impact["notes"][0].startswith("Does not fit")
    before = state_of_everything()
    refused = api("admin").post(
        f"/api/v1/quota-requests/{created['id']}/approve/", {}, format="json"
    )
    assert refused.status_code == 400 and "guarantee_gpus" in refused.data["errors"]
    assert state_of_everything() == before


def test_the_impact_names_reclaimed_borrowing_and_affected_jobs(api, demo):
    """search-rec borrows 8 GPUs beyond its quota of 8; llm has 16 GPUs waiting. Raising
    llm's quota from 14 to 24 lets llm reclaim that borrowing."""
    rs = demo["researcher2"]
    run_job(rs, "search-rec-core", 8, preemptible=False, name="rec-core")
    borrowed = run_job(rs, "search-rec-experiment", 8, name="rec-borrow")
    run_job(demo["researcher"], "llm-core", 14, preemptible=False, name="llm-core")
    Job.objects.create(name="waiting", owner=demo["researcher"], queue_id=Job.objects.get(name="llm-core").queue_id,
                       tier="core", gpus=8, preemptible=False)  # fmt: skip
    created = api("lead").post("/api/v1/quota-requests/", {**BODY, "quota_gpus": 24, "guarantee_gpus": 5}, format="json").data  # fmt: skip
    impact = api("admin").get(f"/api/v1/quota-requests/{created['id']}/impact/").data
    assert impact["demand_gpus"] == 8 and impact["free_gpus"] == 2
    assert (impact["before"]["headroom_gpus"], impact["after"]["headroom_gpus"]) == (0, 10)
    assert [j["id"] for j in impact["likely_preempted"]] == [borrowed.pk]
    assert impact["likely_preempted"][0]["owner"] == "researcher2"
    assert impact["borrowing_shrinks"] == [
        {"line": "search-rec", "borrowed_gpus": 8, "reclaimable_gpus": 8, "at_risk_gpus": 8}
    ]
    assert impact["recent_use"]["samples"] == 0 and "takes_effect" in impact


def test_a_quota_cut_names_the_jobs_that_become_reclaimable(api, demo):
    hours_ago = timezone.now() - timedelta(hours=2)
    old = run_job(demo["researcher"], "llm-core", 4, started_at=hours_ago, name="old")
    new = run_job(demo["researcher"], "llm-core", 4, started_at=timezone.now(), name="new")
    body = {**BODY, "queue": "llm-core", "quota_gpus": 4, "guarantee_gpus": None}
    created = api("lead").post("/api/v1/quota-requests/", body, format="json")
    assert created.status_code == 201, created.data
    impact = api("lead").get(f"/api/v1/quota-requests/{created.data['id']}/impact/").data
    assert [j["id"] for j in impact["newly_reclaimable"]] == [new.pk], "the newest above the cut"
    assert (impact["before"]["borrowed_gpus"], impact["after"]["borrowed_gpus"]) == (0, 4)
    assert old.pk not in [j["id"] for j in impact["likely_preempted"]]
