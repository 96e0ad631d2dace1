"""Contracts in time, end to end: the beat entry starts an approved contract at its start and
the scheduler uses it from the next cycle; R4 suggestions on the line page."""

from datetime import timedelta

import pytest

from monitoring.models import MetricSample
from monitoring.rollup import rollup
from portal.celery import beat_schedule
from quotas.models import BusinessLine, Queue, QuotaChange, QuotaPolicy
from quotas.tasks import quota_activation
from scheduling.clock import cluster_now
from scheduling.models import Eviction, Job

pytestmark = pytest.mark.django_db


def cycle(api) -> None:
    response = api("admin").post("/api/v1/scheduler/cycle/")
    assert response.status_code == 200, response.data


def test_the_beat_entry_runs_the_activation_task_every_minute():
    entry = beat_schedule(5.0)["quota-activation"]
    assert entry["task"] == quota_activation.name == "quotas.tasks.quota_activation"
    assert entry["schedule"] == 60.0


def test_the_scheduler_uses_a_new_contract_from_its_start_time(api):
    submitted = api("researcher").post(
        "/api/v1/jobs/", {"name": "big", "queue": "llm-core", "gpus": 16}, format="json"
    )
    assert submitted.status_code == 201, submitted.data
    job_id = submitted.data["id"]
    cycle(api)
    assert Job.objects.get(pk=job_id).pending_code == "QUOTA_EXCEEDED", "llm's quota is 14"

    start = cluster_now() + timedelta(hours=1)
    body = {"business_line": "llm", "quota_gpus": 24, "reason": "16-GPU pretraining run",
            "starts_at": start.isoformat(), "ends_at": (start + timedelta(hours=6)).isoformat()}  # fmt: skip
    created = api("lead").post("/api/v1/quota-requests/", body, format="json")
    assert created.status_code == 201, created.data
    approved = api("admin").post(
        f"/api/v1/quota-requests/{created.data['id']}/approve/", {"note": "ok"}, format="json"
    )
    assert approved.data["status"] == "scheduled"

    assert quota_activation()["applied"] == [], "not before its start"
    cycle(api)
    assert Job.objects.get(pk=job_id).state == "pending"

    advanced = api("admin").post("/api/v1/simulator/advance/", {"seconds": 3600}, format="json")
    assert advanced.status_code == 200
    result = quota_activation()
    assert result["applied"] == [created.data["id"]] and result["samples"] == 3 + 12
    assert BusinessLine.objects.get(name="llm").quota_gpus == 24
    cycle(api)
    assert Job.objects.get(pk=job_id).state == "running", "the next cycle used the new quota"

    api("admin").post("/api/v1/simulator/advance/", {"seconds": 6 * 3600}, format="json")
    assert quota_activation()["expired"] == [created.data["id"]]
    assert BusinessLine.objects.get(name="llm").quota_gpus == 14
    assert QuotaChange.objects.count() == 2
    detail = api("lead").get(f"/api/v1/quota-requests/{created.data['id']}/").data
    assert detail["status"] == "ended" and detail["previous"] == {"quota_gpus": 14}


def _evictions(
    demo, queue: Queue, now, sizes: list[int], used: int, every: timedelta = timedelta(hours=1)
) -> None:
    """Evictions of ``sizes`` GPUs, ``every`` apart back from ``now``, while the queue held
    ``used`` GPUs for the last 10 hours (hourly rollup samples); then the rollup computes
    the figures."""
    job = Job.objects.create(name="victim", owner=demo["researcher"], queue=queue,
                             tier=queue.tier, gpus=max(sizes))  # fmt: skip
    for h in range(10):  # the queue held ``used`` GPUs for the last 10 hours
        MetricSample.objects.create(
            at=now - timedelta(hours=10 - h), gpus_total=32, gpus_healthy=32,
            gpus_allocated=used, utilization=used / 32, fragmentation_gpus=0, pending_jobs=0,
            per_queue={str(queue.pk): {"name": queue.name, "used": used}},
        )  # fmt: skip
    for i, gpus in enumerate(sizes):
        Eviction.objects.create(job=job, queue=queue, at=now - every * (i + 1),
                                reason="preemption", gpus=gpus, gpu_seconds=gpus * 3600.0)  # fmt: skip
    rollup()


def test_a_queue_evicted_too_often_gets_a_guarantee_suggestion_with_numbers(client, demo):
    core = Queue.objects.get(name="llm-core")
    _evictions(demo, core, cluster_now(), [2] * 5, used=8)
    client.force_login(demo["lead"])
    page = client.get("/quotas/lines/llm/").content.decode()
    assert 'id="suggestion-llm-core"' in page
    # 5 x 2 GPU-hours lost over 8 GPUs x 10 h delivered: 12.5%; a guarantee of 7 (8 - 2 + 1)
    # forbids taking 2 GPUs from 8 in use.
    assert "5 evictions cost 10.0 GPU-hours, an eviction ratio of 12.5% (target 10.0%)" in page
    # the target reads the same in the card, the queue's row and the paragraph above them
    assert "12.5% (target 10.0%)</td>" in page and "above the target of 10.0% gets" in page
    assert "(target 10%)" not in page and "target of 10%" not in page
    assert "A guarantee of 7 GPUs (now 2) would have prevented 5 of them (100% of the lost" in page
    link = "/quotas/requests/new/?business_line=llm&amp;queue=llm-core&amp;guarantee_gpus=7"
    assert link in page
    form = client.get(link.replace("&amp;", "&")).content.decode()
    assert 'name="guarantee_gpus" value="7"' in form
    assert '<option value="llm-core" selected>' in form


def test_no_suggestion_while_the_ratio_is_under_target(client, demo):
    core = Queue.objects.get(name="llm-core")
    _evictions(demo, core, cluster_now(), [1] * 3, used=8)  # 3 of 80 GPU-hours
    client.force_login(demo["researcher2"])
    page = client.get("/quotas/lines/llm/").content.decode()
    assert 'id="no-suggestions"' in page and "suggestion-llm-core" not in page


@pytest.mark.parametrize("borrow_cap", [True, False])
def test_when_no_floor_within_quota_keeps_the_target_the_page_says_what_is_left(
    client, demo, borrow_cap
):
    """Three 4-GPU and twelve 1-GPU evictions from 8 GPUs in use (24 of 80 GPU-hours, 30%):
    a guarantee of 5 (the quota) prevents the three big ones only, 15% is left, and only a
    guarantee of 8 would reach the 10% target. What the page then advises depends on the
    eviction cap (off by default): the scheduler tightens that queue's borrowing only with
    it on."""
    QuotaPolicy.objects.create(borrow_cap=borrow_cap)
    core = Queue.objects.get(name="llm-core")
    Queue.objects.filter(pk=core.pk).update(quota_gpus=5)
    _evictions(demo, core, cluster_now(), [4] * 3 + [1] * 12, used=8,
               every=timedelta(minutes=30))  # fmt: skip
    client.force_login(demo["lead"])
    page = client.get("/quotas/lines/llm/").content.decode()
    assert "an eviction ratio of 30.0% (target 10.0%)" in page
    assert "No guaranteed floor within its quota would have kept it under its 10.0%" in page
    tightened = "borrowing is already tightened for it"
    if borrow_cap:
        assert f"none within its quota: {tightened} (#19); ask for more quota" in page
    else:
        assert tightened not in page
        assert "none within its quota: ask for more quota, or an admin turns on the " in page
