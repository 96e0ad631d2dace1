"""jobs/, nodes/, queues/, business-lines/ through the REST API."""

import pytest

from scheduling.models import Job, JobEvent

pytestmark = pytest.mark.django_db


def _submit(client, **body):
    payload = {"name": "llama-ft", "queue": "llm-finetune", "gpus": 4}
    payload.update(body)
    return client.post("/api/v1/jobs/", payload, format="json")


def test_a_researcher_submits_a_job_and_reads_it_back(api):
    client = api("researcher")
    response = _submit(client, checkpoint_path="nfs://ckpt/llama", model_name="llama-7b")
    assert response.status_code == 201, response.data
    body = response.data
    assert body["state"] == "pending" and body["tier"] == "finetune"
    assert body["gpus_per_node"] == 4 and body["rdma"] is False and body["preemptible"] is True
    detail = client.get(f"/api/v1/jobs/{body['id']}/").data
    assert detail["placement"] == [] and detail["events"][0]["kind"] == "submitted"


def test_multi_node_jobs_default_to_whole_nodes_with_rdma(api):
    response = _submit(api("researcher"), queue="llm-core", gpus=16)
    assert response.status_code == 201, response.data
    assert response.data["gpus_per_node"] == 8 and response.data["rdma"] is True
    assert response.data["preemptible"] is False  # core and above are not preemptible by default


@pytest.mark.parametrize(
    "body,field",
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": -3}, "gpus"),
        ({"gpus": 10**12}, "gpus"),
        ({"gpus": 1.5}, "gpus"),
        ({"gpus": "many"}, "gpus"),
        ({"gpus": 64}, "gpus"),  # the test cluster holds 32 GPUs
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": ["a"]}, "name"),
        ({"queue": "no-such-queue"}, "queue"),
        ({"queue": "search-rec-core"}, "queue"),  # not the researcher's line
        ({"queue": "llm-finetune", "tier": "urgent"}, "tier"),  # above the queue's tier
        ({"tier": "legendary"}, "tier"),
        ({"gpus": 12, "gpus_per_node": 8}, "gpus_per_node"),
        ({"gpus_per_node": 9}, "gpus_per_node"),
        ({"max_retries": 11}, "max_retries"),
        ({"checkpoint_path": "/tmp/ckpt"}, "checkpoint_path"),
        ({"checkpoint_path": "file:///local/ckpt"}, "checkpoint_path"),
        ({"checkpoint_interval_minutes": 0}, "checkpoint_interval_minutes"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_submissions_are_refused_with_the_field_named_and_store_nothing(api, body, field):
    response = _submit(api("researcher"), **body)
    assert response.status_code == 400, response.data
    assert field in response.data["errors"], response.data
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_malformed_json_is_a_400_not_a_500(api):
    response = api("researcher").post(
        "/api/v1/jobs/", data="{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert "errors" in response.data


def test_anonymous_callers_get_401_or_403(api):
    assert api(None).get("/api/v1/jobs/").status_code in (401, 403)
    assert _submit(api(None)).status_code in (401, 403)
    assert Job.objects.count() == 0


def test_other_lines_cannot_see_a_job(api):
    job_id = _submit(api("researcher")).data["id"]
    assert api("researcher2").get(f"/api/v1/jobs/{job_id}/").status_code == 404
    assert api("lead").get(f"/api/v1/jobs/{job_id}/").status_code == 200
    assert api("oncall").get(f"/api/v1/jobs/{job_id}/").status_code == 200
    ids = [j["id"] for j in api("researcher2").get("/api/v1/jobs/").data["results"]]
    assert job_id not in ids


def test_list_filters_by_state_queue_owner_and_mine(api):
    _submit(api("researcher"))
    _submit(api("lead"), queue="llm-core", gpus=8)
    admin = api("admin")
    assert admin.get("/api/v1/jobs/?queue=llm-core").data["count"] == 1
    assert admin.get("/api/v1/jobs/?owner=researcher").data["count"] == 1
    assert admin.get("/api/v1/jobs/?state=pending").data["count"] == 2
    assert admin.get("/api/v1/jobs/?state=running").data["count"] == 0
    assert api("lead").get("/api/v1/jobs/?mine=1").data["count"] == 1
    assert admin.get("/api/v1/jobs/?state=bogus").status_code == 400


def test_cancel_rules_owner_lead_admin_only(api):
    job_id = _submit(api("researcher")).data["id"]
    assert api("researcher2").post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 404
    assert api("oncall").post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 403
    assert Job.objects.get(pk=job_id).state == "pending"
    response = api("lead").post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 200 and response.data["state"] == "cancelled"
    again = api("researcher").post(f"/api/v1/jobs/{job_id}/cancel/")
    assert again.status_code == 409 and "already cancelled" in str(again.data)
    from core.models import AuditRecord

    assert AuditRecord.objects.filter(action="job.cancel", actor_name="lead").count() == 1


def test_a_job_cancelled_while_waiting_is_finished_at_its_cancel(api):
    """It held no GPUs, so nothing is left to release: it ends at the cancel, in cluster
    time (before, ``finished_at`` stayed empty for ever)."""
    client = api("researcher")
    job_id = _submit(client).data["id"]
    response = client.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 200
    job = Job.objects.get(pk=job_id)
    cancelled = job.events.get(kind="cancelled")
    assert job.finished_at is not None and job.finished_at == cancelled.at
    assert client.get(f"/api/v1/jobs/{job_id}/").data["finished_at"] is not None


def test_nodes_list_shows_free_gpus_and_detail_by_name(api):
    client = api("researcher")
    nodes = client.get("/api/v1/nodes/").data["results"]
    assert len(nodes) == 4 and all(n["gpus_free"] == 8 for n in nodes)
    name = nodes[0]["name"]
    assert client.get(f"/api/v1/nodes/{name}/").data["rack"] == nodes[0]["rack"]


def test_queues_and_lines_report_usage(api):
    _submit(api("researcher"), gpus=4)
    queues = {q["name"]: q for q in api("researcher").get("/api/v1/queues/").data["results"]}
    assert (
        queues["llm-finetune"]["pending_jobs"] == 1 and queues["llm-finetune"]["tier"] == "finetune"
    )
    lines = {x["name"]: x for x in api("researcher").get("/api/v1/business-lines/").data["results"]}
    assert lines["llm"]["pending_gpus"] == 4 and lines["llm"]["used_gpus"] == 0


def test_openapi_schema_is_served(api):
    response = api("researcher").get("/api/schema/")
    assert response.status_code == 200
    assert b"/api/v1/jobs/" in response.content
