"""The submit form shows the engine's what-if: ``/jobs/feasibility/`` and the page without
JavaScript give the same verdict, estimated start and place in line (#15)."""

from __future__ import annotations

import html
from datetime import datetime

import pytest
from django.test import Client

from quotas.models import BusinessLine, Queue
from scheduling import whatif
from scheduling.cycle import run_cycle
from scheduling.services import JobRequest, submit_jobs

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_cache():
    whatif.clear_cache()
    yield
    whatif.clear_cache()


@pytest.fixture
def client(demo) -> Client:
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    c = Client()
    c.force_login(demo["researcher"])
    return c


def queue_id(name: str) -> str:
    return str(Queue.objects.get(name=name).pk)


def busy(demo) -> None:
    """All 32 GPUs held by two-hour core jobs of the lead's."""
    submit_jobs(
        demo["lead"],
        [JobRequest(name=f"f{i}", queue="llm-core", gpus=8, estimated_runtime_minutes=120)
         for i in range(4)],
    )  # fmt: skip
    run_cycle()


def test_the_endpoint_gives_the_engines_verdict_with_its_start_and_place(demo, client):
    busy(demo)
    body = client.get("/jobs/feasibility/", {"queue": queue_id("llm-core"), "gpus": "8"}).json()
    assert body["status"] == "would_wait" and body["code"] == "INSUFFICIENT_GPUS"
    assert body["title"] == "Would wait: not enough free GPUs"
    assert body["position"] == 1 and body["remedy"]
    start = datetime.fromisoformat(body["estimated_start"])
    assert body["estimated_start_text"].startswith(start.strftime("%Y-%m-%d %H:%M UTC"))
    assert "(in 2 h)" in body["estimated_start_text"]
    labels = [label for label, _ in body["detail_rows"]]
    assert "Matching GPUs left free" in labels
    assert body["as_of"]["cycle"] and "cycle #" in body["as_of_text"]


def test_a_job_that_would_start_names_its_nodes(client):
    body = client.get("/jobs/feasibility/", {"queue": queue_id("llm-core"), "gpus": "16"}).json()
    assert (body["status"], body["code"], body["title"]) == ("fits_now", "", "Would start now")
    assert len(body["nodes"]) == 2 and body["estimated_start_text"] == "now"
    assert body["borrowed"] is False and body["position"] is None


def test_the_runtime_estimate_is_part_of_the_question(demo, client):
    """Backfill depends on the predicted runtime: a short job fits before a reservation, a
    long one does not. The form sends the estimate with the rest."""
    submit_jobs(
        demo["lead"],
        [JobRequest(name=f"f{i}", queue="llm-core", gpus=8, estimated_runtime_minutes=120)
         for i in range(3)]
        + [JobRequest(name="big", queue="llm-core", gpus=32, estimated_runtime_minutes=600)],
    )  # fmt: skip
    run_cycle()  # three run for 2 h; the 32-GPU job waits with all four nodes reserved
    base = {"queue": queue_id("llm-finetune"), "gpus": "8"}
    short = client.get("/jobs/feasibility/", {**base, "estimated_runtime_minutes": "30"}).json()
    long = client.get("/jobs/feasibility/", {**base, "estimated_runtime_minutes": "6000"}).json()
    assert short["status"] == "fits_now", short
    assert long["status"] == "would_wait", long


def test_the_page_without_javascript_shows_the_same_answer(demo, client):
    busy(demo)
    answer = client.get("/jobs/feasibility/", {"queue": queue_id("llm-core"), "gpus": "8"}).json()
    data = {"action": "check", "name": "x", "queue": queue_id("llm-core"), "gpus": "8",
            "max_retries": "3", "checkpoint_interval_minutes": "60"}  # fmt: skip
    response = client.post("/jobs/new/", data)
    page = html.unescape(response.content.decode())
    shown = response.context["feasibility"]
    assert (shown["status"], shown["code"], shown["estimated_start"]) == (
        answer["status"], answer["code"], answer["estimated_start"],
    )  # fmt: skip
    assert 'data-status="would_wait"' in page and 'data-code="INSUFFICIENT_GPUS"' in page
    for text in (answer["title"], answer["message"], answer["estimated_start_text"],
                 f"place in line: {answer['position']}", answer["remedy"]):  # fmt: skip
        assert text in page, text


def test_an_arrays_tasks_are_asked_together_on_the_endpoint_and_the_page(demo, client):
    """The form's Array field is part of the question: its tasks, up to its bound, are
    planned together (``whatif.tasks_answer``), and the page without JavaScript says the
    same."""
    ask = {"queue": queue_id("llm-core"), "gpus": "4"}
    body = client.get("/jobs/feasibility/", {**ask, "array": "0-7"}).json()
    assert (body["status"], body["title"]) == ("fits_now", "Would start all 8 tasks now")
    assert body["tasks"] == {"total": 8, "start_now": 8, "at_once": None}
    assert body["message"].startswith("All 8 tasks would start now, on 4 nodes (")
    body = client.get("/jobs/feasibility/", {**ask, "array": "0-9"}).json()
    assert (body["status"], body["code"]) == ("would_wait", "INSUFFICIENT_GPUS")
    assert body["title"] == "Would start 8 of its 10 tasks now"
    assert body["message"].startswith("8 of its 10 tasks would start now; task 8 would wait: ")
    assert "with its 10 tasks added" in body["as_of_text"]
    body = client.get("/jobs/feasibility/", {**ask, "array": "0-9%3"}).json()
    assert (body["code"], body["title"]) == ("ARRAY_LIMIT", "Would start 3 of its 10 tasks now")
    assert "with the first 3 of its 10 tasks (its bound) added" in body["as_of_text"]
    one = client.get("/jobs/feasibility/", ask).json()
    assert one["title"] == "Would start now" and "tasks" not in one
    bad = client.get("/jobs/feasibility/", {**ask, "array": "9-1"})
    assert bad.status_code == 400 and list(bad.json()["errors"]) == ["array"]
    data = {"action": "check", "name": "x", "queue": queue_id("llm-core"), "gpus": "4",
            "array": "0-9", "max_retries": "3", "checkpoint_interval_minutes": "60"}  # fmt: skip
    page = html.unescape(client.post("/jobs/new/", data).content.decode())
    assert "Would start 8 of its 10 tasks now" in page
    assert "8 of its 10 tasks would start now; task 8 would wait: " in page


def test_the_empty_form_asks_for_a_queue_and_gpus(client):
    page = client.get("/jobs/new/").content.decode()
    assert 'data-status="unknown"' in page and "Choose a queue and a GPU count to see." in page
    for element in ("feasibility-title", "feasibility-code", "feasibility-text", "feasibility-when",
                    "feasibility-start", "feasibility-position", "feasibility-remedy",
                    "feasibility-details", "feasibility-asof"):  # fmt: skip
        assert f'id="{element}"' in page, element


def test_a_request_the_service_refuses_is_a_400_naming_the_field(client):
    bad = client.get(
        "/jobs/feasibility/", {"queue": queue_id("llm-finetune"), "gpus": "8", "tier": "urgent"}
    )
    assert bad.status_code == 400 and "tier" in bad.json()["errors"]
    data = {"action": "check", "name": "x", "queue": queue_id("llm-finetune"), "gpus": "8",
            "tier": "urgent", "max_retries": "3", "checkpoint_interval_minutes": "60"}  # fmt: skip
    shown = client.post("/jobs/new/", data).context["feasibility"]
    assert shown["status"] == "invalid" and "tier" in shown["message"]


@pytest.mark.parametrize(
    "params",
    [
        {"queue": "llm-core", "gpus": "99999999999999999999"},
        {"queue": "llm-core", "gpus": "8", "estimated_runtime_minutes": "-1"},
        {"queue": "llm-core", "gpus": "8", "model_name": "x" * 500},
        {"queue": "llm-core\x00", "gpus": "8"},
        {"queue": "llm-core", "gpus": "8", "gpus_per_node": "3"},
        {"queue": "llm-core", "gpus": "8", "rdma": "maybe", "preemptible": "perhaps"},
    ],
)
def test_odd_input_is_a_400_never_a_500(client, params):
    response = client.get("/jobs/feasibility/", params)
    assert response.status_code == 400
    if response["Content-Type"] == "application/json":  # (a NUL is refused before the view)
        assert response.json()["errors"]


def test_a_cluster_that_cannot_be_read_is_no_answer_not_an_error(client, monkeypatch):
    from scheduling.backends.base import TransientBackendError
    from scheduling.backends.simulator import SimulatorBackend

    def down(self):
        raise TransientBackendError("connection refused")

    monkeypatch.setattr(SimulatorBackend, "observe", down)
    response = client.get("/jobs/feasibility/", {"queue": queue_id("llm-core"), "gpus": "8"})
    assert response.status_code == 503
    assert response.json() == {
        "errors": {"cluster": ["the cluster did not answer: connection refused"]}
    }
    data = {"action": "check", "name": "x", "queue": queue_id("llm-core"), "gpus": "8",
            "max_retries": "3", "checkpoint_interval_minutes": "60"}  # fmt: skip
    shown = client.post("/jobs/new/", data).context["feasibility"]
    assert (shown["status"], shown["title"]) == ("unknown", "No answer now")
