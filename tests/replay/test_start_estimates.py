"""The replay measures the estimated starts it shows waiting jobs (#19, V1): the first
estimate and every estimate weighted by how long it was shown, against the real start."""

from __future__ import annotations

import pytest

from replay import load_workload
from replay.cli import human_summary
from replay.report import render_html, render_markdown
from replay.start_estimates import StartEstimates
from scheduling.engine.types import Code

from .test_replay import replay, write_itp

CYCLE = 60.0
PRIO, QUOTA, TOPO = Code.PRIORITY, Code.QUOTA_EXCEEDED, Code.TOPOLOGY


def test_each_estimate_is_settled_against_the_start_and_weighted_by_how_long_it_was_shown():
    e = StartEstimates(CYCLE)
    # job 1: told 1,000 at t=0, then 2,000 from t=500; starts at 2,000
    e.shown(1, 0.0, 1000.0, PRIO)
    e.shown(1, 100.0, 1000.0, PRIO)  # the same estimate, shown on: one span from 0
    e.shown(1, 500.0, 2000.0, PRIO)
    e.started(1, 2000.0)
    # job 2: no estimate at first (t=0), then 3,000 from t=1,000; starts at 3,000
    e.shown(2, 0.0, None, QUOTA)
    e.shown(2, 1000.0, 3000.0, QUOTA)
    e.started(2, 3000.0)
    e.started(3, 50.0)  # started by the first plan that saw it: shown nothing
    e.shown(4, 0.0, 10.0, PRIO)
    e.drop(4)  # rejected
    e.shown(5, 0.0, 99.0, PRIO)  # still waiting: not settled
    got = e.summary()
    assert got["jobs"] == 2
    assert got["with_estimate_share"] == 0.5
    first = got["first"]  # job 1 started 1,000 s after its first estimate
    assert first["median_abs_error_s"] == first["p90_abs_error_s"] == 1000.0
    assert first["late_share"] == 1.0
    shown = got["shown"]
    # spans: job 1 (500 s, +1,000), (1,500 s, 0); job 2 (1,000 s blind), (2,000 s, 0)
    assert shown["estimate_share"] == pytest.approx(4000 / 5000)
    assert shown["median_abs_error_s"] == 0.0
    assert shown["p90_abs_error_s"] == 1000.0  # 3,500 of 4,000 s were right: p90 is off
    assert shown["late_share"] == pytest.approx(500 / 4000)


def test_each_code_gets_the_figures_of_the_estimates_its_verdicts_gave():
    e = StartEstimates(CYCLE)
    # job 1: 1,000 s blocked by topology, no estimate; then PRIORITY with an estimate of
    # 2,000 (from 1,000, the same time as before but another code: a new span); starts
    # at 2,500
    e.shown(1, 0.0, None, TOPO)
    e.shown(1, 1000.0, 2000.0, PRIO)
    e.started(1, 2500.0)
    # job 2: QUOTA_EXCEEDED, told 4,000 at 0, starts 1,000 s early
    e.shown(2, 0.0, 4000.0, QUOTA)
    e.started(2, 3000.0)
    # job 3: PRIORITY told 1,500 at 0, then QUOTA told 1,500 from 500 (split by code);
    # starts at 1,500: right in both
    e.shown(3, 0.0, 1500.0, PRIO)
    e.shown(3, 500.0, 1500.0, QUOTA)
    e.started(3, 1500.0)
    got = e.summary()
    by = got["by_code"]
    assert set(by) == {PRIO, QUOTA, TOPO}
    # waited: job 1 1,000 blind + 1,500; job 2 3,000; job 3 500 + 1,000 = 7,000 s
    assert by[TOPO] == {
        "time_share": pytest.approx(1000 / 7000, abs=1e-4),
        "estimate_share": 0.0,
        "median_abs_error_s": None,
        "p90_abs_error_s": None,
        "late_share": None,
        "median_error_s": None,
    }
    # PRIORITY: (1,500 s, +500) and (500 s, 0)
    assert by[PRIO]["time_share"] == pytest.approx(2000 / 7000, abs=1e-4)
    assert by[PRIO]["estimate_share"] == 1.0
    assert by[PRIO]["median_abs_error_s"] == by[PRIO]["median_error_s"] == 500.0
    assert by[PRIO]["late_share"] == pytest.approx(0.75)
    # QUOTA_EXCEEDED: (3,000 s, -1,000) and (1,000 s, 0): the median errs early
    assert by[QUOTA]["time_share"] == pytest.approx(4000 / 7000, abs=1e-4)
    assert by[QUOTA]["median_error_s"] == -1000.0
    assert by[QUOTA]["median_abs_error_s"] == 1000.0
    assert by[QUOTA]["late_share"] == 0.0
    # the codes' figures add up to the whole: the split by code changes no overall figure
    assert got["shown"]["estimate_share"] == pytest.approx(6000 / 7000, abs=1e-4)
    assert got["shown"]["median_abs_error_s"] == 500.0


def test_a_start_within_a_cycle_of_the_estimate_is_not_late_and_early_is_not_late():
    e = StartEstimates(CYCLE)
    e.shown(1, 0.0, 1000.0, PRIO)
    e.started(1, 1000.0 + CYCLE)  # the next cycle after the estimate: on time
    e.shown(2, 0.0, 5000.0, PRIO)
    e.started(2, 1000.0)  # 4,000 s early
    got = e.summary()
    assert got["first"]["late_share"] == 0.0
    assert got["first"]["p90_abs_error_s"] == pytest.approx(4000 - 0.1 * (4000 - CYCLE))
    assert got["shown"]["late_share"] == 0.0


def test_nothing_measured_reads_as_none():
    got = StartEstimates(CYCLE).summary()
    assert got["jobs"] == 0 and got["with_estimate_share"] is None
    assert got["first"]["median_abs_error_s"] is None
    assert got["shown"]["estimate_share"] is None


@pytest.fixture(scope="module")
def one_node(tmp_path_factory):
    # Ten 8-GPU jobs of 1,000 s queued at once on one 8-GPU node: they run one at a time,
    # each starting at the first cycle after the one before ends (1,020 s apart).
    rows = [(f"j{i:02d}", i, 1000, 8) for i in range(10)]
    path = write_itp(tmp_path_factory.mktemp("est"), rows)
    w = load_workload(str(path), window="0:1d")
    return {
        "predicted": replay(w, "backfill", pool_gpus=8)[1],
        "true": replay(w, "backfill", pool_gpus=8, true_runtimes=True)[1],
    }


def test_with_true_runtimes_each_turn_is_right_to_the_cycles_ahead_of_it(one_node):
    """The queue's quota is the node: the jobs wait for quota room, each its turn after the
    jobs ahead (``quota_turns``). The room frees at the predicted end and the next job
    starts at the next cycle, 20 s later, so the estimate of the job k turns back is
    20 x k s early: 20 to 160 s for the 8 jobs measured. Before session 36 the jobs ahead
    kept their room for ever and only the first of the 8 had an estimate (20 s off)."""
    got = one_node["true"]["overall"]["start_estimates"]
    assert got["jobs"] == 8 and got["with_estimate_share"] == 1.0
    assert got["first"]["median_abs_error_s"] == 90.0  # between 80 and 100 s
    assert got["first"]["p90_abs_error_s"] == pytest.approx(146.0)  # between 140 and 160 s
    assert got["shown"]["estimate_share"] == 1.0


def test_without_history_the_estimate_is_off_by_the_default_runtime(one_node):
    # the first jobs are predicted at the default 12 h: the job waiting for them is told so
    got = one_node["predicted"]["overall"]["start_estimates"]
    assert got["first"]["p90_abs_error_s"] > 10 * 3600


def test_the_figures_are_in_the_summary_and_the_reports(one_node):
    result = one_node["true"]
    text = "\n".join(human_summary(result))
    assert "estimated starts shown to waiting jobs" in text
    assert "as shown: p90 |error|" in text
    # the jobs waited for quota room (the queue's quota is the node), every one told when
    row = next(line for line in text.splitlines() if "as shown, QUOTA_EXCEEDED" in line)
    assert (
        row.split("QUOTA_EXCEEDED")[1]
        .strip()
        .startswith("100.0% of the waiting time; with an estimate 100.0%; median |error| 60 s")
    )
    assert set(result["overall"]["start_estimates"]["by_code"]) == {Code.QUOTA_EXCEEDED}
    assert "## Estimated starts" in render_markdown([result])
    assert "<h2>Estimated starts</h2>" in render_html([result])
