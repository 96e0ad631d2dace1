"""Migrations (consolidation, #19) are counted apart from evictions: the eviction ratio keeps
its definition (preemptions and inference yields over delivered GPU time), the rollup, the
metrics summary and ``/metrics`` show the migrations beside it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from core import telemetry
from monitoring.rollup import (
    get_eviction_figures,
    list_evictions_with_use,
    list_window_evictions,
    rollup,
)
from quotas.models import Queue
from scheduling.clock import cluster_now
from scheduling.models import CONSOLIDATION, Eviction, Job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_counters():
    telemetry.reset()
    yield
    telemetry.reset()


@pytest.fixture
def history(demo):
    """One preemption and two migrations of llm-experiment an hour ago, after two samples
    of its use (so the window has delivered GPU time)."""
    queue = Queue.objects.get(name="llm-experiment")
    job = Job.objects.create(name="j", owner=demo["researcher"], queue=queue, tier="experiment",
                             gpus=4, gpus_per_node=4)  # fmt: skip
    rollup()
    at = cluster_now() - timedelta(minutes=1)
    Eviction.objects.create(job=job, queue=queue, at=at, reason="preemption", gpus=4,
                            gpu_seconds=4000.0)  # fmt: skip
    for _ in range(2):
        Eviction.objects.create(job=job, queue=queue, at=at, reason=CONSOLIDATION, gpus=2,
                                gpu_seconds=9000.0)  # fmt: skip
    return queue


def test_the_ratio_leaves_migrations_out_and_the_rollup_counts_them(history):
    now = cluster_now()
    since = now - timedelta(hours=72)
    rows = list_window_evictions(since, now)[history.pk]
    assert [(gpus, gpu_s) for _at, gpus, gpu_s in rows] == [(4, 4000.0)]
    assert [(gpus, gpu_s) for _at, gpus, gpu_s, _used in list_evictions_with_use(
        history.pk, since, now)] == [(4, 4000.0)]  # fmt: skip
    rollup()
    figures = get_eviction_figures()
    row = figures.by_queue[history.pk]
    assert (row["evictions"], row["evicted_gpu_s"], row["migrations"]) == (1, 4000.0, 2)
    assert figures.migrations(history.pk) == 2
    assert figures.migrations(Queue.objects.get(name="llm-core").pk) == 0


def test_the_summary_shows_migrations_beside_the_ratio(history, api):
    rollup()
    data = api("researcher").get("/api/v1/metrics/summary/").data
    assert data["migrations_by_queue"]["llm-experiment"] == 2
    assert data["migrations_by_queue"]["llm-core"] == 0
    assert set(data["migrations_by_queue"]) == set(data["eviction_ratio_by_queue"])


def test_metrics_export_a_migrations_counter_per_queue(demo, monkeypatch):
    monkeypatch.setenv("METRICS_TOKEN", "scrape-me-" + "s" * 30)
    telemetry.MIGRATIONS.labels("llm-experiment").inc(3)
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me-" + "s" * 30)
    assert response.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }
    assert samples[("gpuportal_migrations_total", (("queue", "llm-experiment"),))] == 3
    # every queue has a series from the start
    for name in Queue.objects.values_list("name", flat=True):
        assert ("gpuportal_migrations_total", (("queue", name),)) in samples
        # and the quota swaps (#19), apart from both
        assert ("gpuportal_quota_swaps_total", (("queue", name),)) in samples
        assert ("gpuportal_quota_swap_displaced_total", (("queue", name),)) in samples
    assert samples[("gpuportal_preemptions_total",
                    (("queue", "llm-experiment"), ("reason", "preemption")))] == 0  # fmt: skip
