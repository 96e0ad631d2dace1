"""The runtime predictor: learned history first, then the user's estimate, then a default."""

from __future__ import annotations

import pytest

from scheduling.engine import LineView, PolicyConfig
from scheduling.engine.predict import (
    DEFAULT_RUNTIME_S,
    LEVELS,
    FinishedJob,
    HistoryPredictor,
    Prediction,
    _quantile,
    fill_predictions,
    size_bucket,
)

from .helpers import NOW, node, pjob, rjob, snap


def runs(owner, model, queue, gpus, *seconds):
    return [FinishedJob(owner, model, queue, gpus, s, finished_at=i) for i, s in enumerate(seconds)]


@pytest.mark.parametrize("gpus, bucket", [(1, 1), (2, 2), (3, 4), (8, 8), (9, 16), (256, 256)])
def test_size_buckets_are_powers_of_two(gpus, bucket):
    assert size_bucket(gpus) == bucket


def test_most_specific_history_wins():
    history = runs("ann", "llama", "q", 8, 100, 100, 100) + runs(
        "bob", "llama", "q", 8, 900, 900, 900
    )
    p = HistoryPredictor(history)
    got = p.predict(owner="ann", model_name="llama", queue="q", gpus=8)
    assert got.seconds == 100 and got.source == "history:owner+model+queue+size"


def test_falls_back_to_the_model_across_owners():
    history = runs("bob", "llama", "q", 8, 500, 600, 700)
    got = HistoryPredictor(history).predict(owner="ann", model_name="llama", queue="q", gpus=8)
    assert got.source == "history:model+queue+size" and 600 <= got.seconds <= 700


def test_uses_a_high_quantile_so_backfill_rarely_overruns():
    history = runs("ann", "m", "q", 4, *range(100, 1100, 100))  # 100..1000
    got = HistoryPredictor(history, quantile=0.8).predict(
        owner="ann", model_name="m", queue="q", gpus=4
    )
    assert got.seconds == pytest.approx(820)


def test_too_little_history_falls_back_to_the_users_estimate():
    history = runs("ann", "m", "q", 4, 100)
    got = HistoryPredictor(history, min_samples=3).predict(
        owner="ann", model_name="m", queue="q", gpus=4, estimate_s=5000
    )
    assert (got.seconds, got.source) == (5000, "estimate")


def test_nothing_known_gives_the_conservative_default():
    got = HistoryPredictor().predict(owner="x", model_name=None, queue="q", gpus=1)
    assert (got.seconds, got.source) == (DEFAULT_RUNTIME_S, "default")


def test_only_recent_samples_count():
    old = [FinishedJob("a", "m", "q", 1, 10_000, finished_at=i) for i in range(50)]
    new = [FinishedJob("a", "m", "q", 1, 100, finished_at=100 + i) for i in range(5)]
    got = HistoryPredictor(old + new, max_samples=5).predict(
        owner="a", model_name="m", queue="q", gpus=1
    )
    assert got.seconds == 100


def test_queue_and_size_history_serves_jobs_without_a_model():
    history = [FinishedJob("z", None, "q", 8, 300, 0) for _ in range(3)]
    got = HistoryPredictor(history).predict(owner="a", model_name=None, queue="q", gpus=8)
    assert got.seconds == 300 and got.source == "history:queue+size"


def test_fill_predictions_fills_only_what_is_missing():
    history = runs("ann", "m", "llm-experiment", 4, 600, 600, 600)
    s = snap(
        [node("a")],
        [
            pjob(1, 4, owner="ann", model_name="m"),
            pjob(2, 4, predicted_runtime_s=42.0),
            pjob(3, 4, tier="finetune", estimated_runtime_s=7200.0),
        ],
        [
            rjob(
                9,
                {"a": range(4)},
                predicted_end=None,
                started_at=NOW - 100,
                owner="ann",
                model_name="m",
                queue="llm-experiment",
            )
        ],
        lines=[LineView("llm", None)],
        policy=PolicyConfig(),
    )
    filled = fill_predictions(s, HistoryPredictor(history), NOW)
    by_id = {j.id: j for j in filled.pending}
    assert by_id[1].predicted_runtime_s == 600
    assert by_id[2].predicted_runtime_s == 42.0
    assert by_id[3].predicted_runtime_s == 7200.0
    assert filled.running[0].predicted_end == NOW - 100 + 600


def test_fill_predictions_predicts_a_run_past_its_end_from_the_runs_as_long():
    """The rule of the loop and the replay (``predict.run_end``): predicted 600 s, it has
    run 700; the runs that lasted 700 s or more say 3,000."""
    history = runs("ann", "m", "llm-experiment", 4, *[600] * 5, 3000, 3000, 3000)
    s = snap(
        [node("a")],
        [],
        [rjob(9, {"a": range(4)}, predicted_end=None, started_at=NOW - 700, owner="ann",
              model_name="m", queue="llm-experiment")],
        lines=[LineView("llm", None)],
        policy=PolicyConfig(),
    )  # fmt: skip
    filled = fill_predictions(s, HistoryPredictor(history, quantile=0.5), NOW)
    assert filled.running[0].predicted_end == NOW - 700 + 3000


@pytest.mark.parametrize(
    "values, q, expected",
    [((10.0,), 0.8, 10.0), ((1.0, 2.0, 3.0, 4.0), 0.5, 2.5), ((1.0, 4.0), 0.0, 1.0)],
)
def test_quantile_interpolates_between_samples(values, q, expected):
    assert _quantile(values, q) == expected
    assert _quantile(values, 1.0) == values[-1]


def test_quantile_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="no samples"):
        _quantile((), 0.5)


@pytest.mark.parametrize("q", [-0.1, 1.5])
def test_predictor_rejects_a_quantile_outside_zero_to_one(q):
    with pytest.raises(ValueError, match="quantile"):
        HistoryPredictor(quantile=q)


def test_unusable_runtimes_are_ignored():
    bad = [FinishedJob("a", "m", "q", 1, s) for s in (0, -5, float("inf"))]
    good = runs("a", "m", "q", 1, 100, 200, 300)
    got = HistoryPredictor(bad + good, quantile=0.5).predict(
        owner="a", model_name="m", queue="q", gpus=1
    )
    assert (got.seconds, got.samples) == (200, 3)


def test_a_minimum_of_one_sample_and_the_level_it_came_from():
    history = runs("a", "m", "q", 2, 500)
    got = HistoryPredictor(history, min_samples=0).predict(
        owner="a", model_name="m", queue="other", gpus=2
    )
    assert got == Prediction(500.0, "history:owner+model", 1)


def test_levels_run_from_the_owner_s_own_history_to_everybody_s():
    assert [" + ".join(level) for level in LEVELS] == [
        "owner + model + queue + size",
        "owner + model",
        "owner",
        "model + queue + size",
        "model",
        "queue + size",
        "queue",
        "global",
    ]


def test_a_job_without_a_model_is_not_learned_at_the_model_levels():
    history = [FinishedJob("a", None, "q", 4, 300) for _ in range(3)]
    p = HistoryPredictor(history)
    assert p.predict(owner="a", model_name="m", queue="q", gpus=4).source == "history:owner"
    assert p.predict(owner="b", model_name="m", queue="q", gpus=4).source == "history:queue+size"
    assert p.predict(owner="b", model_name="m", queue="r", gpus=4).source == "history:global"
