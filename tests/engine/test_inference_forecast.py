"""Online inference's learned daily demand and what it leaves training (#19,
``engine.inference_forecast``; placement on shared nodes in ``NodeChoice.find_shared``)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduling.engine.inference_forecast import (
    DAY_S,
    HOUR_S,
    hourly_peaks,
    knows_whole_day,
    learn,
    learning_since,
    rise,
    rise_until,
)
from scheduling.engine.types import PolicyConfig

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


def test_a_profile_knows_the_whole_day_after_a_day_of_learning():
    p = learn(None, at(9), 2)
    assert p["since"] == at(9) and not knows_whole_day(p, at(9))
    p = learn(p, at(23), 2)
    p = learn(p, at(8, DAY3 + DAY_S), 1)  # the next day: 23 h since the first record
    assert p["since"] == at(9) and not knows_whole_day(p, at(8, DAY3 + DAY_S))
    assert knows_whole_day(p, at(9, DAY3 + DAY_S))  # every hour seen once
    # a skipped day forgets yesterday, so the day is to learn again
    p = learn(p, at(10, DAY3 + 3 * DAY_S), 1)
    assert p["since"] == at(10, DAY3 + 3 * DAY_S)
    assert not knows_whole_day(p, at(20, DAY3 + 3 * DAY_S))
    # a profile without the mark (or a mark from the future) starts counting now
    old = {"day": 3, "today": [1] * 24, "before": [1] * 24}
    assert not knows_whole_day(old, at(10)) and learn(old, at(10), 1)["since"] == at(10)
    assert learn(dict(old, since=at(12)), at(10), 1)["since"] == at(10)
    assert not knows_whole_day({}, at(10)) and not knows_whole_day(None, at(10))
    # when the learning began, as the node page shows it: None unless validly recorded
    assert learning_since(p) == at(10, DAY3 + 3 * DAY_S)
    assert learning_since(old) is None and learning_since(None) is None
    assert learning_since(dict(old, since=True)) is None
    assert learning_since({"since": at(1)}) is None  # no hourly peaks: not a profile


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


def learnt_cluster(rise_by_hour: tuple[int, ...], learned: bool = True):
    """A node without inference with room (4 GPUs free) and a shared node with 4 GPUs free
    whose forecast has seen the whole day (``learned``) or not."""
    return [
        node("a", free=range(4)),
        node("inf", free=range(4), inference=True, inference_rise=rise_by_hour,
             inference_day_learned=learned),
    ]  # fmt: skip


def test_short_work_goes_to_a_shared_node_whose_day_is_learnt_before_breaking_a_node():
    """#19, ``shared_nodes_first``: the free GPUs inference leaves on a shared node are
    used before a node without inference, if the job is predicted to end before inference
    wants them back; otherwise (a long run, a day not yet learnt, the option off, a job
    that may not run beside inference, a gang) the node without inference comes first."""
    short = pjob(1, 2, preemptible=True, predicted_runtime_s=2 * HOUR_S)
    assert started(run(snap(learnt_cluster(AFTERNOON), [short]), now=at(8))) == {1: {"inf": (0, 1)}}
    # a day learnt with no rise ahead: any run fits
    long = pjob(2, 2, preemptible=True, predicted_runtime_s=6 * HOUR_S)
    assert set(started(run(snap(learnt_cluster(()), [long]), now=at(8)))[2]) == {"inf"}
    # predicted to run into the afternoon's rise: the node without inference
    assert set(started(run(snap(learnt_cluster(AFTERNOON), [long]), now=at(8)))[2]) == {"a"}
    # an hour with no rise may be one not seen yet: the node without inference
    unlearnt = snap(learnt_cluster((), learned=False), [short])
    assert set(started(run(unlearnt, now=at(8)))[1]) == {"a"}
    off = snap(learnt_cluster(AFTERNOON), [short], policy=PolicyConfig(shared_nodes_first=False))
    assert set(started(run(off, now=at(8)))[1]) == {"a"}
    kept_off = pjob(3, 2, preemptible=True, avoid_inference=True, predicted_runtime_s=HOUR_S)
    assert set(started(run(snap(learnt_cluster(AFTERNOON), [kept_off]), now=at(8)))[3]) == {"a"}
    core = pjob(4, 2, preemptible=False, predicted_runtime_s=HOUR_S)
    assert set(started(run(snap(learnt_cluster(AFTERNOON), [core]), now=at(8)))[4]) == {"a"}


def test_a_gang_is_not_sent_to_shared_nodes_first():
    nodes = [node("a", free=range(4)), node("b", free=range(4)),
             node("inf1", free=range(4), inference=True, inference_day_learned=True),
             node("inf2", free=range(4), inference=True, inference_day_learned=True)]  # fmt: skip
    gang = pjob(1, 8, gpus_per_node=4, preemptible=True, predicted_runtime_s=HOUR_S)
    assert set(started(run(snap(nodes, [gang]), now=at(8)))[1]) == {"a", "b"}


@given(
    st.lists(  # shared nodes: free GPUs now, rise per hour (a flat day), day learnt
        st.tuples(st.integers(0, 8), st.integers(0, 8), st.booleans()), min_size=1, max_size=3
    ),
    st.integers(0, 8),  # free GPUs on the node without inference
    st.lists(  # jobs: GPUs, predicted hours, preemptible
        st.tuples(st.integers(1, 8), st.floats(0.1, 30), st.booleans()), min_size=1, max_size=6
    ),
    st.integers(0, 23),
    st.booleans(),
)
@example(  # a 3-GPU job reserves the node; a 4-GPU one backfilled beside inference's rise
    shared=[(7, 2, False)], free_a=0, jobs=[(3, 1.0, True), (3, 1.0, True), (4, 1.0, True)],
    hour=0, first=False,
)  # fmt: skip
@settings(max_examples=500)
def test_no_start_takes_gpus_inference_is_predicted_to_want_before_it_ends(
    shared, free_a, jobs, hour, first
):
    """Whichever way a job reaches a shared node (first, as the fallback, or backfilled
    onto a node reserved for later: the last ignored the forecast until this property
    found it), the node's starts in plan order leave room for the rise over each one's
    predicted run."""
    nodes = [node("a", free=range(free_a))] + [
        node(f"inf{i}", free=range(f), inference=True, inference_rise=(r,) * 24 if r else (),
             inference_day_learned=learnt)
        for i, (f, r, learnt) in enumerate(shared)
    ]  # fmt: skip
    pending = [
        pjob(i, g, preemptible=p, predicted_runtime_s=h * HOUR_S)
        for i, (g, h, p) in enumerate(jobs, start=1)
    ]
    policy = PolicyConfig(shared_nodes_first=first)
    now = at(hour)
    result = run(snap(nodes, pending, policy=policy), now=now)
    by_id = {j.id: j for j in pending}
    used = {n.name: 0 for n in nodes}
    for s in result.starts:
        job = by_id[s.job_id]
        for slot in s.placement:
            used[slot.node] += len(slot.gpus)
            n = next(n for n in nodes if n.name == slot.node)
            if n.inference:
                assert job.preemptible
                end = now + job.predicted_runtime_s
                assert used[slot.node] + rise_until(n.inference_rise, now, end) <= len(
                    n.free_gpus
                ), (s, n)
