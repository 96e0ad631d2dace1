"""Which jobs yield a shared node to online inference (``engine.inference_yield``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduling.engine.inference_yield import NodeTenant, yielders


def test_one_job_big_enough_goes_before_two_small_ones_when_cheaper():
    tenants = [NodeTenant(1, 1, 0.1), NodeTenant(2, 1, 0.1), NodeTenant(3, 2, 0.3)]
    assert yielders(tenants, 2, per_eviction=1.0) == [3]
    # without the per-eviction cost the two small ones lose less work
    assert yielders(tenants, 2, per_eviction=0.0) == [1, 2]


def test_nothing_yields_without_a_shortfall_or_when_leaving_jobs_cover_it():
    tenants = [NodeTenant(1, 4, 0.0, leaving=True), NodeTenant(2, 4, 0.0)]
    assert yielders(tenants, 0, 1.0) == []
    assert yielders(tenants, 4, 1.0) == []
    assert yielders(tenants, 5, 1.0) == [2]


def test_protected_jobs_never_yield_and_everything_else_does_when_short():
    tenants = [NodeTenant(1, 4, 0.0, preemptible=False), NodeTenant(2, 2, 9.0)]
    assert yielders(tenants, 8, 1.0) == [2]


tenant = st.builds(
    NodeTenant,
    job_id=st.integers(0, 10_000),
    gpus_here=st.integers(1, 8),
    cost_gpu_h=st.floats(0, 50),
    leaving=st.booleans(),
    preemptible=st.booleans(),
)


@given(st.lists(tenant, max_size=8, unique_by=lambda t: t.job_id), st.integers(-2, 10))
def test_the_yielders_cover_the_shortfall_and_none_is_superfluous(tenants, shortfall):
    chosen = yielders(tenants, shortfall, 1.0)
    by_id = {t.job_id: t for t in tenants}
    assert all(by_id[i].preemptible and not by_id[i].leaving for i in chosen)
    leaving = sum(t.gpus_here for t in tenants if t.leaving)
    freed = leaving + sum(by_id[i].gpus_here for i in chosen)
    movable = [t for t in tenants if t.preemptible and not t.leaving]
    if freed < shortfall:  # short: then every movable job yields
        assert set(chosen) == {t.job_id for t in movable}
    else:  # minimal: dropping any chosen job would leave inference short
        assert all(freed - by_id[i].gpus_here < shortfall for i in chosen)
