"""Idle GPUs by cause in the live portal (#19): the loop's plans, counted on /metrics and in
the rollup, on the small seeded cluster (4 nodes x 8 GPUs) through PostgreSQL."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from monitoring import idle
from monitoring.idle_account import idle_now, idle_totals
from monitoring.models import IdleAccount
from monitoring.rollup import AS_OF, rollup
from scheduling.models import Job, Node
from scheduling.nodes.services import cordon_node
from tests.drills import advance, cycle, submit

pytestmark = pytest.mark.django_db


def scrape(user) -> dict[str, dict[str, float]]:
    """``/metrics`` as ``{family: {cause: value}}`` for the two idle families."""
    client = Client()
    client.force_login(user)
    response = client.get("/metrics")
    assert response.status_code == 200
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            if s.name in ("gpuportal_idle_gpu_seconds_total", "gpuportal_idle_gpus"):
                out.setdefault(s.name, {})[s.labels["cause"]] = s.value
    return out


def test_every_cause_has_a_zero_series_from_the_start(demo):
    got = scrape(demo["admin"])
    assert got["gpuportal_idle_gpu_seconds_total"] == dict.fromkeys(idle.CAUSES, 0.0)
    assert got["gpuportal_idle_gpus"] == dict.fromkeys(idle.CAUSES, 0.0)


def test_a_job_over_quota_that_may_not_borrow_counts_as_quota(demo, api):
    admin, me = api("admin"), api("researcher")
    cycle(admin)  # the simulator's first save: nothing waits, nothing is counted
    cordoned = Node.objects.order_by("name").first().name
    cordon_node(demo["oncall"], cordoned, "disk check")
    # llm-finetune's quota is 5 GPUs: 8 GPUs that may not be preempted cannot borrow.
    job_id = submit(me, name="ft", queue="llm-finetune", gpus=8, preemptible=False)
    cycle(admin)
    assert Job.objects.get(pk=job_id).pending_code == "QUOTA_EXCEEDED"
    # 32 GPUs idle while it waits: the cordoned node's 8 are out of service, the job
    # claims its 8 for its cause, the other 16 are more than any waiting job asks.
    claims = {"unavailable": 8, "quota": 8, "beyond_demand": 16}
    assert {c: g for c, g in idle_now().items() if g} == claims
    advance(admin, 600)
    cycle(admin)
    expected = {c: 600.0 * claims.get(c, 0) for c in idle.CAUSES}
    assert idle_totals()[1] == expected
    assert scrape(demo["admin"])["gpuportal_idle_gpu_seconds_total"] == expected
    sample = rollup()
    stored = {c: v for c, v in sample.idle_gpu_s.items() if c != AS_OF}
    assert stored == expected
    assert sample.idle_gpu_s[AS_OF] == IdleAccount.objects.get().at.timestamp()


def test_gpus_freed_between_cycles_await_the_next_one(demo, api):
    """A job ends between two cycles while another waits over quota: its GPUs were free
    for part of the interval (half of it, as the loop sees only the two ends)."""
    admin, me = api("admin"), api("researcher")
    cycle(admin)
    submit(me, name="short", queue="llm-core", gpus=8, sim_duration_minutes=5)
    cycle(admin)  # starts: 24 GPUs idle and nobody waits
    submit(me, name="ft", queue="llm-finetune", gpus=8, preemptible=False)
    advance(admin, 60)
    cycle(admin)  # ft waits over quota: 24 idle GPUs, its 8 quota, 16 beyond demand
    advance(admin, 600)  # "short" ends 5 minutes after its start, within this interval
    cycle(admin)
    _, totals = idle_totals()
    assert totals["quota"] == 8 * 600
    assert totals["beyond_demand"] == 16 * 600
    assert totals["awaiting_cycle"] == 8 * 600 / 2
    assert {c: g for c, g in idle_now().items() if g} == {"quota": 8, "beyond_demand": 24}


def test_a_failing_count_never_stops_the_cycle(demo, api, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("bug in the idle count")

    monkeypatch.setattr("monitoring.idle.plan_idle", broken)
    admin, me = api("admin"), api("researcher")
    job_id = submit(me, name="runs", queue="llm-core", gpus=8)
    assert cycle(admin)["starts"] == 1
    assert Job.objects.get(pk=job_id).state == Job.State.RUNNING
    assert not IdleAccount.objects.exists()
