"""The demo workload offers what it claims (#19): every cluster minute's arrivals, whatever
the cadence of the calls. At 60x beat's calls land minutes of cluster time apart, and a busy
worker runs them later still (a wall minute apart: an hour of cluster time); the workload
used to catch up at most 30 minutes per call and so dropped about half of its arrivals."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from demo import workload
from quotas.models import Queue
from scheduling.models import ClusterSettings, Job
from scheduling.selectors import cluster_shape

pytestmark = pytest.mark.django_db

HOUR = 3600.0
T0 = 1_780_000_020.0  # a cluster time 20 s into a minute


@pytest.fixture
def cluster():
    call_command("seed_demo", nodes=64, nodes_per_rack=8, uniform=True, no_history=True,
                 stdout=None)  # fmt: skip
    row = ClusterSettings.load()
    assert row.workload_enabled
    return {"seed": row.seed, "gpus": cluster_shape()[1],
            "pairs": list(Queue.objects.values_list("name", "tier"))}  # fmt: skip


def expected(cluster: dict, first_minute: int, last_minute: int) -> list:
    """The generator's arrivals of every minute in the range, as (job name, minute)."""
    return [
        (workload.job_request(g).name, m)
        for m in range(first_minute, last_minute + 1)
        for g in workload.generator(cluster["seed"] * 1_000_003 + m, cluster["gpus"]).next_jobs(
            m * 60.0, 60, cluster["pairs"]
        )
    ]


def submitted_after(first_id: int) -> list:
    return [
        (name, int(at.timestamp() // 60))
        for name, at in Job.objects.filter(pk__gt=first_id)
        .order_by("id")
        .values_list("name", "submitted_at")
    ]


def test_a_call_every_cluster_hour_submits_every_minute_of_arrivals(cluster):
    """Six calls an hour of cluster time apart (a wall minute apart at 60x)."""
    assert workload.generate(T0) > 0  # the first call fills the empty cluster
    start = Job.objects.order_by("-id").values_list("id", flat=True).first()
    offers = [workload.offer(T0 + k * HOUR) for k in range(1, 7)]
    minute0 = int(T0 // 60)
    want = expected(cluster, minute0 + 1, minute0 + 360)
    assert len(want) > 100
    assert submitted_after(start) == want
    assert [o.minutes for o in offers] == [60] * 6
    assert sum(o.submitted for o in offers) == len(want)
    assert sum(o.dropped for o in offers) == 0


def test_the_offer_reports_the_gpu_time_it_submitted(cluster):
    workload.generate(T0)
    done = workload.offer(T0 + 2 * HOUR)
    minute0 = int(T0 // 60)
    jobs = [
        g
        for m in range(minute0 + 1, minute0 + 121)
        for g in workload.generator(cluster["seed"] * 1_000_003 + m, cluster["gpus"]).next_jobs(
            m * 60.0, 60, cluster["pairs"]
        )
    ]
    assert done.submitted == len(jobs)
    assert done.submitted_gpu_s == pytest.approx(sum(g.gpus * g.duration_s for g in jobs))


def test_a_full_backlog_drops_whole_minutes_and_counts_them(cluster, monkeypatch):
    workload.generate(T0)
    waiting = Job.objects.filter(state=Job.State.PENDING).count()
    monkeypatch.setattr(workload, "MAX_PENDING", waiting + 10)
    done = workload.offer(T0 + 3 * HOUR)
    minute0 = int(T0 // 60)
    everything = expected(cluster, minute0 + 1, minute0 + 180)
    # minutes are submitted until ten more jobs wait, the rest are dropped, none lost
    assert 10 <= done.submitted < 10 + max(len(b) for b in _by_minute(everything))
    assert done.submitted + done.dropped == len(everything)
    assert done.dropped > 0 and done.dropped_gpu_s > 0
    assert ClusterSettings.load().workload_minute == minute0 + 180


def _by_minute(jobs: list) -> list[list]:
    out: dict[int, list] = {}
    for name, m in jobs:
        out.setdefault(m, []).append(name)
    return list(out.values())


def test_a_jump_of_the_clock_brings_only_its_last_hours(cluster):
    workload.generate(T0)
    start = Job.objects.order_by("-id").values_list("id", flat=True).first()
    jump = T0 + 7 * 24 * HOUR  # simulator/advance of a week
    done = workload.offer(jump)
    last = int(jump // 60)
    assert done.minutes == workload.MAX_CATCH_UP_MINUTES
    first = last - workload.MAX_CATCH_UP_MINUTES + 1
    assert {m for _, m in submitted_after(start)} <= set(range(first, last + 1))
    assert done.submitted == len(expected(cluster, first, last))
