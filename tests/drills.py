"""Driving the portal through its API in tests: submit, run a cycle, move the simulated clock."""

from __future__ import annotations

from datetime import UTC, datetime


def when(iso: str) -> datetime:
    """An API time (``...Z``) as an aware datetime."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def make_quotas_roomy() -> None:
    """Quotas far above the 32-GPU test cluster, so placement, not quota, is under test."""
    from quotas.models import BusinessLine, Queue

    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)


def submit(client, **body) -> int:
    payload = {"name": "job", "queue": "llm-experiment", "gpus": 8, "sim_duration_minutes": 600}
    payload.update(body)
    response = client.post("/api/v1/jobs/", payload, format="json")
    assert response.status_code == 201, response.data
    return response.data["id"]


def cycle(admin) -> dict:
    response = admin.post("/api/v1/scheduler/cycle/")
    assert response.status_code == 200, response.data
    return response.data


def advance(admin, seconds: float) -> None:
    response = admin.post("/api/v1/simulator/advance/", {"seconds": seconds}, format="json")
    assert response.status_code == 200, response.data


def job(client, job_id: int) -> dict:
    response = client.get(f"/api/v1/jobs/{job_id}/")
    assert response.status_code == 200, response.data
    return response.data


def api_tokens(users: dict) -> dict[str, str]:
    """An API token per user (``{username: user}``, the ``demo`` fixture), for clients that
    talk to a live web server rather than through the test client."""
    from rest_framework.authtoken.models import Token

    return {name: Token.objects.get_or_create(user=user)[0].key for name, user in users.items()}


BUSY_START = datetime(2030, 1, 7, 9, tzinfo=UTC)  # a Monday morning, cluster time


def start_busy_cluster() -> None:
    """Start the seeded demo's simulated cluster at a fixed cluster instant, not at the
    wall clock: the demo's arrivals are drawn per cluster minute (and online inference
    follows the time of day), so a cluster started "now" was busy on some runs and nearly
    idle on others (the walks' "the cluster is busy" checks failed at 15:00 UTC on
    2026-12-01). The instant lies after every row the seed stamps, so the one clock only
    moves forward."""
    from scheduling.cycle import run_cycle

    assert datetime.now(UTC) < BUSY_START, "move BUSY_START past today"
    run_cycle(wall_now=BUSY_START.timestamp(), wait_s=30)
