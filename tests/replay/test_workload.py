"""Layouts: isolated pools per queue, or one shared pool with quotas and guarantees."""

from __future__ import annotations

import pytest

from replay import build_layout, load_workload
from replay.metrics import FragMeter, Meter, quantile
from replay.traces.readers import read_philly_capacities
from replay.workload import ISOLATED_TARGET_LOAD, demand_gpus


@pytest.fixture(scope="module")
def philly_day():
    return load_workload("philly", "2017-10-02:2017-10-03")


def test_philly_isolated_pools_are_the_published_vc_sizes(philly_day):
    layout = build_layout(philly_day)
    caps = read_philly_capacities()
    assert layout.kind == "isolated"
    assert layout.pools == caps and layout.capacity == caps
    assert layout.total_gpus == 2816
    assert all(q is None for q in layout.quota.values())


def test_philly_shared_pool_quotas_are_the_vc_capacities(philly_day):
    layout = build_layout(philly_day, 2816)
    assert layout.pools == {"shared": 2816}
    assert layout.quota == read_philly_capacities()
    assert layout.guarantee == layout.quota  # they add up to the pool exactly
    smaller = build_layout(philly_day, 1408)
    assert smaller.quota == layout.quota
    assert sum(smaller.guarantee.values()) <= 1408
    assert smaller.guarantee["6214e9"] == 256  # 512 * 1408 / 2816


def test_itp_capacities_follow_demand_and_fit_the_largest_job():
    w = load_workload("itp", "0:1d")
    layout = build_layout(w)
    demand = demand_gpus(w)
    for q in w.queues:
        cap = layout.capacity[q]
        assert cap % 8 == 0
        assert cap >= max(j.gpus for j in w.jobs if j.queue == q)
        assert cap >= demand[q] / ISOLATED_TARGET_LOAD
        assert cap - 8 < max(
            max(j.gpus for j in w.jobs if j.queue == q), demand[q] / ISOLATED_TARGET_LOAD
        )
    shared = build_layout(w, 512)
    assert shared.quota == layout.capacity
    assert sum(shared.guarantee.values()) <= 512


def test_meter_integrates_inside_the_window_only():
    m = Meter(capacity=10, window=100, bucket_s=50)
    m.at(0)
    m.busy = 4
    m.waiting = 1
    m.at(20)
    m.waiting = 0
    m.at(60)
    m.busy = 10
    m.at(150)  # 50 s of it past the window
    assert m.busy_s == 4 * 60 + 10 * 40
    assert m.utilization() == pytest.approx((240 + 400) / 1000)
    assert m.backlog_s == 20 and m.backlog_utilization() == pytest.approx(0.4)
    assert m.buckets == [200.0, 40 + 400.0, 500.0]  # the series covers the drain too
    assert m.avg_waiting() == pytest.approx(20 / 100)


def test_frag_meter_counts_idle_gpus_off_whole_nodes_while_jobs_wait():
    f = FragMeter(idle=16, whole_nodes=2, node_gpus=8, window=100)
    f.idle, f.whole, f.waiting = 10, 1, 1  # 2 idle on one node, 8 on an empty one
    f.at(10)
    assert f.value() == pytest.approx(2 / 10)
    f.waiting = 0
    f.at(50)
    assert f.value() == pytest.approx(2 / 10)


def test_quantile_interpolates_like_numpy():
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([0.0, 10.0], 0.95) == 9.5
    assert quantile([], 0.5) is None
