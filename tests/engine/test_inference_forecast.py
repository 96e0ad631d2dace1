"""Online inference's learned daily demand and what it leaves training (#19,
``engine.inference_forecast``; placement on shared nodes in ``planner._find_shared``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduling.engine.inference_forecast import (
    DAY_S,
    HOUR_S,
    hourly_peaks,
    learn,
    rise,
    rise_until,
)

from .helpers import node, pjob, rjob, run, snap, started

DAY3 = 3 * DAY_S


def at(hour: float, day: float = DAY3) -> float:
    return day + hour * HOUR_S


def test_learning_keeps_today_and_yesterday_and_forgets_older_days():
    p = learn(None, at(9), 2)
    p = learn(p, at(9.5), 5)
    p = learn(p, at(9.7), 3)  # lower than the hour's peak: kept at 5
    assert p["today"][9] == 5 and p["day"] == 3
    p = learn(p, at(14, DAY3 + DAY_S), 6)  # the next day: today becomes yesterday
    assert (p["before"][9], p["today"][9], p["today"][14]) == (5, 0, 6)
    assert hourly_peaks(p)[9] == 5 and hourly_peaks(p)[14] == 6
    p = learn(p, at(1, DAY3 + 3 * DAY_S), 1)  # two days skipped: both forgotten
    assert hourly_peaks(p) == (0, 1) + (0,) * 22


def test_a_malformed_or_empty_profile_is_nothing_learned():
    assert hourly_peaks({}) == () and hourly_peaks({"day": 1, "today": [1]}) == ()
    assert learn({"day": "x"}, at(2), 4)["today"][2] == 4


def test_the_rise_is_beyond_what_inference_holds_now():
    peaks = (1,) * 12 + (6,) * 6 + (1,) * 6
    assert rise(peaks, 1)[12:18] == (5,) * 6 and rise(peaks, 1)[0] == 0
    assert rise(peaks, 6) == ()


def test_the_rise_over_a_run_covers_every_hour_it_touches():
    r = tuple(range(24))  # the rise in hour h is h
    assert rise_until(r, at(8.5), at(9.9)) == 9
    assert rise_until(r, at(22.5), at(1.5, DAY3 + DAY_S)) == 23  # across midnight
    assert rise_until(r, at(2), at(2) + DAY_S) == 23
    assert rise_until((), at(2), at(20)) == 0 and rise_until(r, at(5), at(5)) == 0


@given(st.lists(st.integers(0, 8), min_size=24, max_size=24), st.floats(0, 10 * DAY_S),
       st.floats(0, 2 * DAY_S), st.floats(0, 2 * DAY_S))  # fmt: skip
def test_a_longer_run_never_sees_a_smaller_rise(r, start, a, b):
    short, long = sorted((a, b))
    assert rise_until(r, start, start + short) <= rise_until(r, start, start + long)


def shared_cluster(rise_by_hour: tuple[int, ...]):
    """A full node without inference and a shared node with 4 GPUs free now."""
    return [
        node("a", free=()),
        node("inf", free=range(4), inference=True, inference_rise=rise_by_hour),
    ]


AFTERNOON = (0,) * 12 + (3,) * 6 + (0,) * 6  # inference wants 3 GPUs more, 12:00-18:00


def test_only_work_predicted_to_end_before_inference_rises_lands_on_a_shared_node():
    short = pjob(1, 2, preemptible=True, predicted_runtime_s=2 * HOUR_S)
    long = pjob(2, 2, preemptible=True, predicted_runtime_s=6 * HOUR_S)
    placed = started(run(snap(shared_cluster(AFTERNOON), [short, long]), now=at(8)))
    assert set(placed) == {1}  # 08:00-10:00 ends before the rise; 08:00-14:00 does not
    # a 1-GPU job fits beside the afternoon's 3 GPUs (4 free - 3)
    small = pjob(3, 1, preemptible=True, predicted_runtime_s=6 * HOUR_S)
    assert set(started(run(snap(shared_cluster(AFTERNOON), [small]), now=at(8)))) == {3}


def test_nothing_learned_leaves_the_shared_node_to_any_preemptible_job():
    long = pjob(2, 2, preemptible=True, predicted_runtime_s=6 * HOUR_S)
    assert set(started(run(snap(shared_cluster(()), [long]), now=at(8)))) == {2}


def test_a_job_kept_off_a_shared_node_is_told_why():
    long = pjob(2, 2, preemptible=True, predicted_runtime_s=6 * HOUR_S)
    verdict = run(snap(shared_cluster(AFTERNOON), [long]), now=at(8)).verdicts[2]
    assert verdict.code == "INSUFFICIENT_GPUS"
    assert verdict.details["inference_reclaims_gpus"] == 3
    assert verdict.details["predicted_end_at"] == "1970-01-04T14:00:00Z"
    assert "online inference" in verdict.message and "14:00 UTC" in verdict.message


def test_a_job_kept_off_a_shared_node_is_not_estimated_to_start_there_now():
    """Its reservation counts only the GPUs inference is not predicted to want back (found
    in Chromium: the estimated start was the very plan's time)."""
    long = pjob(2, 2, preemptible=True, predicted_runtime_s=6 * HOUR_S)
    verdict = run(snap(shared_cluster(AFTERNOON), [long]), now=at(8)).verdicts[2]
    assert verdict.code == "INSUFFICIENT_GPUS"
    assert verdict.estimated_start is None  # nothing on node "a" is predicted to end
    # work on the node without inference ending at 10:00: the estimate is then, there
    ends = rjob(1, {"a": range(8)}, started_at=at(6), predicted_end=at(10))
    plan = run(snap(shared_cluster(AFTERNOON), [long], [ends]), now=at(8))
    assert plan.verdicts[2].estimated_start == at(10)
    # nothing learned: the same job starts there now
    assert set(started(run(snap(shared_cluster(()), [long]), now=at(8)))) == {2}
