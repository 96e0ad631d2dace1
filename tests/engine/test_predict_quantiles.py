"""The runtime predictor's quantile estimator and its hierarchy of keys (#19).

Properties of ``RecentQuantiles`` (hypothesis): monotone in q, within the bounds of
the retained data, deterministic, bounded; and the hierarchy's order: the user's own
history, then the user's estimate, then everybody's, then the default; the time
limit caps every answer; history conditioned on how long a job has already run.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.predict import (
    DEFAULT_RUNTIME_S,
    LEVEL_NAMES,
    FinishedJob,
    HistoryPredictor,
    RecentQuantiles,
)

runtimes = st.lists(
    st.floats(min_value=1.0, max_value=1e7, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=200,
)
quantiles = st.floats(min_value=0.0, max_value=1.0)


def filled(values, size=50) -> RecentQuantiles:
    est = RecentQuantiles(size)
    for v in values:
        est.add(v)
    return est


@settings(max_examples=200, deadline=None)
@given(runtimes, quantiles, quantiles, st.integers(min_value=1, max_value=80))
def test_quantiles_are_monotone_in_q(values, q1, q2, size):
    est = filled(values, size)
    lo, hi = sorted((q1, q2))
    assert est.quantile(lo) <= est.quantile(hi)


@settings(max_examples=200, deadline=None)
@given(runtimes, quantiles, st.integers(min_value=1, max_value=80))
def test_quantiles_stay_within_the_retained_data(values, q, size):
    est = filled(values, size)
    kept = values[-size:]
    assert len(est) == len(kept) <= size, "bounded: only the most recent values are kept"
    assert min(kept) <= est.quantile(q) <= max(kept)
    assert est.quantile(0.0) == min(kept) and est.quantile(1.0) == max(kept)


@settings(max_examples=100, deadline=None)
@given(runtimes, quantiles)
def test_the_estimate_is_deterministic(values, q):
    a, b = filled(values), filled(values)
    assert a.quantile(q) == b.quantile(q)
    a.quantile(0.3)  # reading does not change it
    assert a.quantile(q) == b.quantile(q)


def test_a_quantile_outside_zero_to_one_or_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="quantile"):
        filled([1.0]).quantile(1.2)
    with pytest.raises(ValueError, match="no samples"):
        RecentQuantiles().quantile(0.5)


@settings(max_examples=100, deadline=None)
@given(runtimes, quantiles, quantiles)
def test_the_predictor_is_monotone_in_q_and_bounded_by_the_level_s_runs(values, q1, q2):
    history = [FinishedJob("ann", "m", "q", 8, v, finished_at=i) for i, v in enumerate(values)]
    p = HistoryPredictor(history, min_samples=1)
    lo, hi = sorted((q1, q2))
    a = p.predict(owner="ann", model_name="m", queue="q", gpus=8, quantile=lo)
    b = p.predict(owner="ann", model_name="m", queue="q", gpus=8, quantile=hi)
    assert a.seconds <= b.seconds
    kept = values[-50:]
    assert min(kept) <= a.seconds <= max(kept)


def runs(owner, model, queue, gpus, *seconds):
    return [FinishedJob(owner, model, queue, gpus, s, finished_at=i) for i, s in enumerate(seconds)]


def source(p: HistoryPredictor, **kw) -> str:
    args = {"owner": "ann", "model_name": "llama", "queue": "q", "gpus": 8, **kw}
    return p.predict(**args).source


def test_the_hierarchy_from_the_user_s_own_runs_to_everybody_s():
    p = HistoryPredictor(
        runs("ann", "llama", "q", 8, 100, 100, 100)
        + runs("ann", "bert", "r", 1, 200, 200, 200)
        + runs("bob", "gpt", "s", 2, 300, 300, 300)
    )
    assert source(p) == "history:owner+model+queue+size"
    assert source(p, queue="other", gpus=1) == "history:owner+model"
    assert source(p, model_name="new") == "history:owner"
    assert source(p, owner="cat", model_name="gpt", queue="s", gpus=2) == (
        "history:model+queue+size"
    )
    assert source(p, owner="cat", model_name="gpt", queue="t") == "history:model"
    assert source(p, owner="cat", model_name=None, queue="s", gpus=2) == "history:queue+size"
    assert source(p, owner="cat", model_name=None, queue="s", gpus=64) == "history:queue"
    assert source(p, owner="cat", model_name=None, queue="t") == "history:global"
    assert HistoryPredictor().predict(owner="a", model_name=None, queue="q", gpus=1).source == (
        "default"
    )
    assert [n for n in LEVEL_NAMES] == [
        "owner+model+queue+size",
        "owner+model",
        "owner",
        "model+queue+size",
        "model",
        "queue+size",
        "queue",
        "global",
    ]


def test_the_user_s_estimate_ranks_below_their_own_runs_and_above_everybody_s():
    p = HistoryPredictor(
        runs("ann", "llama", "q", 8, 100, 100, 100) + runs("bob", "x", "q", 8, 9, 9, 9)
    )
    mine = p.predict(owner="ann", model_name="new", queue="q", gpus=8, estimate_s=777)
    assert (mine.seconds, mine.source) == (100, "history:owner")
    theirs = p.predict(owner="cat", model_name="x", queue="q", gpus=8, estimate_s=777)
    assert (theirs.seconds, theirs.source) == (777, "estimate")
    assert source(p, owner="cat", model_name="x") == "history:model+queue+size"


def test_an_empty_owner_or_model_is_no_key():
    p = HistoryPredictor(runs("", None, "q", 8, 50, 50, 50))
    assert source(p, owner="", model_name=None) == "history:queue+size"
    assert source(p, owner="", model_name="llama", queue="r") == "history:global"


def test_the_time_limit_caps_every_answer():
    p = HistoryPredictor(runs("ann", "llama", "q", 8, 1000, 2000, 3000))
    capped = p.predict(owner="ann", model_name="llama", queue="q", gpus=8, limit_s=1500)
    assert capped.seconds == 1500 and capped.source == "history:owner+model+queue+size:capped"
    est = p.predict(owner="x", model_name=None, queue="z", gpus=1, estimate_s=9000, limit_s=600)
    assert (est.seconds, est.source) == (600, "estimate:capped")
    free = HistoryPredictor().predict(owner="x", model_name=None, queue="z", gpus=1, limit_s=600)
    assert (free.seconds, free.source) == (600, "default:capped")
    assert (
        HistoryPredictor()
        .predict(owner="x", model_name=None, queue="z", gpus=1, limit_s=10 * DEFAULT_RUNTIME_S)
        .seconds
        == DEFAULT_RUNTIME_S
    )


def test_the_plan_quantile_is_configurable_and_another_can_be_asked():
    history = runs("ann", "m", "q", 4, *range(100, 1100, 100))  # 100..1000
    p = HistoryPredictor(history, quantile=0.8)
    kw = {"owner": "ann", "model_name": "m", "queue": "q", "gpus": 4}
    assert p.predict(**kw).seconds == pytest.approx(820)
    assert p.predict(**kw, quantile=0.5).seconds == pytest.approx(550)
    assert HistoryPredictor(history, quantile=0.5).predict(**kw).seconds == pytest.approx(550)
    with pytest.raises(ValueError, match="quantile"):
        p.predict(**kw, quantile=2.0)


def test_a_job_that_ran_long_is_predicted_from_the_runs_that_lasted_as_long():
    history = runs("ann", "m", "q", 4, 100, 100, 100, 100, 5000, 6000, 7000)
    p = HistoryPredictor(history, quantile=0.5)
    kw = {"owner": "ann", "model_name": "m", "queue": "q", "gpus": 4}
    assert p.predict(**kw).seconds == 100
    later = p.predict(**kw, elapsed_s=200)
    assert later.seconds == 6000 and later.samples == 3
    # fewer than min_samples runs that long at a level: the next level is asked
    assert p.predict(**kw, elapsed_s=5500).source == "default"


def test_history_is_streaming_and_equals_a_rebuild():
    history = runs("ann", "m", "q", 4, *range(1, 200))
    streamed = HistoryPredictor(max_samples=20)
    for job in history:
        streamed.add(
            owner=job.owner,
            model_name=job.model_name,
            queue=job.queue,
            gpus=job.gpus,
            runtime_s=job.runtime_s,
        )
    rebuilt = HistoryPredictor(reversed(history), max_samples=20)  # sorted by finish time
    for q in (0.0, 0.5, 0.8, 1.0):
        kw = {"owner": "ann", "model_name": "m", "queue": "q", "gpus": 4, "quantile": q}
        assert streamed.predict(**kw) == rebuilt.predict(**kw)
    assert (
        streamed.predict(owner="ann", model_name="m", queue="q", gpus=4, quantile=0).seconds == 180
    )
