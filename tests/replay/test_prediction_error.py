"""The replay measures its runtime predictor (#19): error at first start, in JSON and reports."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from replay import load_workload
from replay.cli import human_summary
from replay.pools import DONE, RUNNING
from replay.prediction_error import prediction_error
from replay.report import render_html, render_markdown
from scheduling.engine.predict import DEFAULT_RUNTIME_S

from .test_replay import replay, write_itp


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # Ten 8-GPU jobs of 1,000 s, all queued at once on one 8-GPU node: they run one at
    # a time. The first three start with no history (the default, 12 h: over by
    # 42,200 s); the other seven after three or more finished runs of 1,000 s (exact).
    rows = [(f"j{i:02d}", i, 1000, 8) for i in range(10)]
    path = write_itp(tmp_path_factory.mktemp("pred"), rows)
    w = load_workload(str(path), window="0:1d")
    return replay(w, "backfill", pool_gpus=8)


def test_errors_are_measured_at_first_start_against_the_true_runtime(tiny):
    r, result = tiny
    got = result["overall"]["prediction"]
    over = DEFAULT_RUNTIME_S - 1000
    assert got["jobs"] == 10 == result["overall"]["finished"]
    assert got["median_abs_error_s"] == 0
    assert got["p90_abs_error_s"] == pytest.approx(over)
    assert got["mean_abs_error_s"] == pytest.approx(3 * over / 10, abs=0.1)
    assert got["underestimate_share"] == 0
    assert got["by_source"]["default"] == 3 and sum(got["by_source"].values()) == 10
    assert sorted(j.predicted_s for j in r.jobs) == [1000.0] * 7 + [DEFAULT_RUNTIME_S] * 3


def job(predicted, duration, state=DONE, source="history:queue"):
    return SimpleNamespace(
        predicted_s=predicted, duration=duration, state=state, predicted_source=source
    )


def test_underestimates_and_what_is_left_out():
    jobs = [
        job(100.0, 400.0),  # under by 300
        job(500.0, 400.0),  # over by 100
        job(400.0, 400.0, source="default"),
        job(None, 400.0),  # never started
        job(100.0, 400.0, state=RUNNING),  # not finished
    ]
    got = prediction_error(jobs)  # type: ignore[arg-type]
    assert got["jobs"] == 3
    assert got["underestimate_share"] == pytest.approx(1 / 3, abs=1e-4)
    assert got["median_abs_error_s"] == 100
    assert got["p90_abs_error_s"] == pytest.approx(260)
    assert got["median_rel_error"] == 0.25
    assert got["by_source"] == {"history:queue": 2, "default": 1}
    assert prediction_error([])["jobs"] == 0
    assert prediction_error([])["underestimate_share"] is None


def test_every_report_carries_the_error_table(tiny):
    _, result = tiny
    md = render_markdown([result])
    assert "## Runtime prediction error" in md
    assert "| backfill | 10 | 0 s | 42,200 s | 0.0% | 0.00 |" in md
    assert "median |error|" in md and "underestimated" in md
    assert "<h2>Runtime prediction error</h2>" in render_html([result])
    text = "\n".join(human_summary(result))
    assert "runtime prediction error" in text
    assert "p90 |error|               42,200 s" in text
    assert "underestimated            0.0%" in text


def test_the_plan_quantile_is_an_option_and_is_recorded(tmp_path):
    rows = [(f"j{i:02d}", i, 100 if i % 2 else 900, 8) for i in range(10)]
    w = load_workload(str(write_itp(tmp_path, rows)), window="0:1d")
    _, low = replay(w, "backfill", pool_gpus=8, predict_quantile=0.0)
    _, high = replay(w, "backfill", pool_gpus=8, predict_quantile=1.0)
    assert (low["predict_quantile"], high["predict_quantile"]) == (0.0, 1.0)
    # the shortest past run underestimates the 900 s jobs; the longest never does
    assert low["overall"]["prediction"]["underestimate_share"] > 0
    assert high["overall"]["prediction"]["underestimate_share"] == 0
