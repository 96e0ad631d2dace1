"""Seeded demo history (demo/history.py): a fresh live demo gets a week of made-up metrics
samples so every dashboard window draws at once; they are flagged, plausible, reproducible
and kept out of every measured figure."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from demo.history import EVERY, HISTORY, history_points
from monitoring.models import MetricSample
from monitoring.rollup import rollup

END = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_a_week_every_five_minutes_ending_at_the_given_time():
    points = history_points(END, 10_000)
    assert len(points) == HISTORY // EVERY + 1
    assert points[-1].at == END and points[0].at == END - HISTORY
    assert all(b.at - a.at == EVERY for a, b in zip(points, points[1:], strict=False))


def test_every_seeded_sample_is_internally_consistent():
    for p in history_points(END, 10_000, seed=3):
        assert p.gpus_total == 10_000 and (p.gpus_total - p.gpus_healthy) % 8 == 0
        assert p.gpus_healthy >= 0.975 * p.gpus_total
        assert 0 <= p.gpus_allocated <= p.gpus_healthy
        assert p.utilization == round(p.gpus_allocated / p.gpus_healthy, 4)
        assert 0 <= p.fragmentation_gpus <= p.gpus_healthy - p.gpus_allocated
        assert p.pending_jobs >= 0


def test_the_history_is_plausible_a_busy_cluster_with_days_and_weekends():
    points = history_points(END, 10_000)
    utilization = [p.utilization for p in points]
    assert 0.75 < sum(utilization) / len(utilization) < 0.95
    frag = sorted(p.fragmentation_gpus for p in points)
    pending = sorted(p.pending_jobs for p in points)
    assert 200 < frag[len(frag) // 2] < 1000 and 1500 < pending[len(pending) // 2] < 4000
    afternoons = [p.utilization for p in points if p.at.hour == 15 and p.at.weekday() < 5]
    nights = [p.utilization for p in points if p.at.hour == 3 and p.at.weekday() < 5]
    assert sum(afternoons) / len(afternoons) > sum(nights) / len(nights) + 0.05


def test_the_history_is_reproducible_from_the_demo_seed():
    assert history_points(END, 800, seed=1) == history_points(END, 800, seed=1)
    assert history_points(END, 800, seed=1) != history_points(END, 800, seed=2)


@pytest.mark.django_db
def test_seed_demo_writes_it_once_flagged_and_without_per_queue_figures(monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-123")
    out = io.StringIO()
    call_command("seed_demo", nodes=16, nodes_per_rack=8, uniform=True, stdout=out)
    written = MetricSample.objects.count()
    assert written == HISTORY // EVERY + 1
    assert "seeded demo history: 2017 metrics samples" in out.getvalue()
    assert "flagged as seeded (not measured)" in out.getvalue()
    assert not MetricSample.objects.filter(seeded=False).exists()
    assert not MetricSample.objects.exclude(per_queue={}).exists()
    assert not MetricSample.objects.exclude(per_line={}).exists()
    assert set(MetricSample.objects.values_list("gpus_total", flat=True)) == {128}
    call_command("seed_demo", nodes=16, nodes_per_rack=8, uniform=True, stdout=io.StringIO())
    assert MetricSample.objects.count() == written, "a second seed adds no history"


@pytest.mark.django_db
@pytest.mark.parametrize("flag", ["no_history", "no_workload"])
def test_no_history_when_asked_or_when_the_demo_runs_no_workload(monkeypatch, flag):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-123")
    call_command("seed_demo", nodes=4, nodes_per_rack=4, uniform=True, stdout=io.StringIO(),
                 **{flag: True})  # fmt: skip
    assert not MetricSample.objects.exists()


@pytest.mark.django_db
def test_measured_figures_ignore_the_seeded_history(monkeypatch):
    """The rollup's delivered GPU time (the eviction ratio's denominator) integrates the
    per-queue use of past samples: seeded ones carry none, so they add nothing."""
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-123")
    call_command("seed_demo", nodes=16, nodes_per_rack=8, uniform=True, stdout=io.StringIO())
    real = rollup()
    assert real.seeded is False and real.per_queue
    assert all(row["delivered_gpu_s"] == 0 for row in real.per_queue.values())
    assert all(row["evictions"] == 0 for row in real.per_queue.values())
    later = MetricSample.objects.order_by("-at").first()
    assert later.pk == real.pk and later.at >= real.at - timedelta(seconds=1)
