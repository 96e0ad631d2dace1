"""A job the plan starts but the backend could not launch says why it waits: LAUNCH_RETRY.

Driven through the API on the small simulated cluster (4 x 8 GPUs), as the backoff tests
of ``tests/reliability/test_backend_errors.py``: the simulator's next calls fail
transiently, and cluster time moves only through ``simulator/advance``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from scheduling.backend_factory import get_backend
from scheduling.cycle import verdicts
from scheduling.models import Job
from scheduling.views import CODE_TITLES
from tests.drills import advance, cycle, job, make_quotas_roomy, submit, when

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def roomy_quotas(demo):
    make_quotas_roomy()


@pytest.fixture
def published(monkeypatch):
    """The live events the loop publishes with the verdicts, as (channel, kind, payload)."""
    sent: list[tuple[str, str, dict]] = []
    real = verdicts.publish_on_commit

    def record(channel, kind, payload):
        sent.append((channel, kind, payload))
        real(channel, kind, payload)

    monkeypatch.setattr(verdicts, "publish_on_commit", record)
    return sent


def inject_backend_errors(count: int) -> None:
    """The simulator's next ``count`` calls fail transiently (saved with its state)."""
    with transaction.atomic():
        backend = get_backend(advance=False)
        backend.sim.inject_api_errors(count)
        backend.close()


def reason_codes_published(sent, job_id: int) -> list[str]:
    return [
        p["pending_code"]
        for channel, kind, p in sent
        if channel == f"job.{job_id}" and kind == "job.updated" and "pending_code" in p
    ]


def test_a_job_whose_launch_fails_transiently_says_why_it_waits_until_it_starts(api, published):
    admin, me = api("admin"), api("researcher")
    job_id = submit(me)
    inject_backend_errors(3)

    summary = cycle(admin)
    assert summary["starts"] == 0
    failed_at = when(summary["cluster_time"])
    detail = job(me, job_id)
    assert detail["state"] == "pending"
    reason = detail["pending_reason"]
    assert reason["code"] == "LAUNCH_RETRY"
    assert "could not start it" in reason["message"]
    assert "simulated backend outage" in reason["message"], "the backend's error, in words"
    details = reason["details"]
    assert details["attempts"] == 1
    assert details["backoff_seconds"] == 10 and details["failing_for_seconds"] == 0
    assert "simulated backend outage" in details["error"]
    next_attempt = when(details["next_attempt_at"])
    assert next_attempt - failed_at == timedelta(seconds=10)
    assert when(detail["estimated_start"]) == next_attempt
    assert "retries automatically" in reason["remedy"]
    assert "backend_error" in reason["remedy"]
    assert detail["queue_position"] is None
    # counted with the other reasons: the cycle summary and the metrics summary
    assert summary["pending_by_reason"] == {"LAUNCH_RETRY": 1} and summary["pending"] == 1
    metrics = admin.get("/api/v1/metrics/summary/").data
    assert metrics["pending_by_reason"] == {"LAUNCH_RETRY": 1}
    # the job's watchers heard of the new reason in the same cycle
    assert reason_codes_published(published, job_id) == ["LAUNCH_RETRY"]

    # Inside the backoff window the backend is not asked again: the reason stays as it is.
    for step in (0, 5, 4):
        if step:
            advance(admin, step)
        summary = cycle(admin)
        assert summary["pending_by_reason"] == {"LAUNCH_RETRY": 1}
        backing_off = job(me, job_id)
        assert backing_off["state"] == "pending"
        assert backing_off["pending_reason"] == reason, "attempts do not grow while waiting"
        assert backing_off["estimated_start"] == detail["estimated_start"]
    assert reason_codes_published(published, job_id) == ["LAUNCH_RETRY"], "nothing new to say"

    advance(admin, 1)  # 10 s: the second attempt fails; the streak is 10 s old, wait 10 s
    cycle(admin)
    details = job(me, job_id)["pending_reason"]["details"]
    assert (details["attempts"], details["failing_for_seconds"], details["backoff_seconds"]) == (
        2, 10, 10
    )  # fmt: skip
    assert when(details["next_attempt_at"]) - failed_at == timedelta(seconds=20)

    advance(admin, 10)  # 20 s: the third fails; wait 20 s
    cycle(admin)
    details = job(me, job_id)["pending_reason"]["details"]
    assert (details["attempts"], details["backoff_seconds"]) == (3, 20)
    assert when(details["next_attempt_at"]) - failed_at == timedelta(seconds=40)
    advance(admin, 19)
    cycle(admin)
    assert job(me, job_id)["pending_reason"]["details"] == details

    advance(admin, 1)  # 40 s: the backend answers again
    summary = cycle(admin)
    assert summary["starts"] == 1
    started = job(me, job_id)
    assert started["state"] == "running"
    assert started["pending_reason"] is None and started["estimated_start"] is None
    assert Job.objects.get(pk=job_id).pending_code == ""
    assert "LAUNCH_RETRY" not in summary["pending_by_reason"]
    assert "LAUNCH_RETRY" not in admin.get("/api/v1/metrics/summary/").data["pending_by_reason"]


def test_the_job_page_says_it_in_words(api, client, demo):
    admin, me = api("admin"), api("researcher")
    job_id = submit(me)
    inject_backend_errors(1)
    cycle(admin)
    client.force_login(demo["researcher"])
    body = client.get(f"/jobs/{job_id}/").content.decode()
    assert CODE_TITLES["LAUNCH_RETRY"] in body
    assert "Launch attempts failed in a row" in body and "simulated backend outage" in body
    assert "retries automatically" in body


def test_a_job_backing_off_after_another_reason_gets_the_launch_reason_back(api):
    """Between two attempts the engine gave it another reason (say, work ahead took the
    GPUs); when it is its turn again but it still backs off, it says so, with the error."""
    admin, me = api("admin"), api("researcher")
    job_id = submit(me)
    inject_backend_errors(1)
    cycle(admin)
    assert job(me, job_id)["pending_reason"]["code"] == "LAUNCH_RETRY"
    Job.objects.filter(pk=job_id).update(
        pending_code="PRIORITY", pending_message="work ahead", pending_details={"ahead_jobs": 1}
    )

    advance(admin, 5)
    cycle(admin)
    reason = job(me, job_id)["pending_reason"]
    assert reason["code"] == "LAUNCH_RETRY"
    assert reason["details"]["attempts"] == 1
    assert "simulated backend outage" in reason["details"]["error"]
    assert "still waiting" not in reason["details"]["error"], "the error, not the event's words"

    advance(admin, 5)
    cycle(admin)
    assert job(me, job_id)["state"] == "running"
