"""Job arrays without Django (``scheduling.arrays``): Slurm's ``--array`` spec, which waiting
tasks an array's bound leaves out, and the ``ARRAY_LIMIT`` verdict with its lower bound."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling import arrays
from scheduling.arrays import ArraySpec, ArraySpecError, Throttle, parse, throttled


@pytest.mark.parametrize(
    ("spec", "indices", "bound"),
    [
        ("0-3", (0, 1, 2, 3), None),
        ("7", (7,), None),
        ("0-99%10", tuple(range(100)), 10),
        ("1,3,5-11:2", (1, 3, 5, 7, 9, 11), None),
        ("10-12,0-1%1", (0, 1, 10, 11, 12), 1),
        ("0-15:4%2", (0, 4, 8, 12), 2),
        ("0-999", tuple(range(1000)), None),
    ],
)
def test_slurm_specs_name_their_indices_and_bound(spec, indices, bound):
    assert parse(spec) == ArraySpec(indices, bound)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("", "give the task indices"),
        ("5-2", "a range runs from low to high"),
        ("0-1000", "at most 1,000 tasks"),
        ("0-9,5", "index 5 is asked for twice"),
        ("0-9%0", "%0 would run no task"),
        ("0-9%", "after % give the most tasks"),
        ("0-9%x", "after % give the most tasks"),
        ("0-9:0", "a step is at least 1"),
        ("0-100000", "indices run from 0 to 99,999"),
        ("1234567", "above 99,999"),
        ("0-9%10%2", "after % give the most tasks"),
        ("0 - 9", "is not an index or a range"),
        ("-1", "is not an index or a range"),
        ("0,,3", "an empty part"),
        ("\u0663-\u0665", "is not an index or a range"),  # Arabic-Indic digits: not ASCII
        ("０-９", "is not an index or a range"),  # fullwidth digits
        ("1" * 201, "at most 200 characters"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, says):
    with pytest.raises(ArraySpecError, match=says.replace("%", "%")):
        parse(spec)


def test_the_spec_is_written_back_as_ranges():
    assert parse("5,0-3,4%2").text == "0-5%2"
    assert parse("1,3,5-11:2").text == "1,3,5,7,9,11"
    assert parse("9").text == "9"


@given(st.sets(st.integers(0, 200), min_size=1, max_size=60), st.none() | st.integers(1, 50))
def test_any_set_of_indices_survives_its_own_text(indices, bound):
    spec = ArraySpec(tuple(sorted(indices)), bound)
    assert parse(spec.text) == spec


def row(job_id, index, state="pending", array=1, bound=2, progress=0.0, move_to=""):
    return {"id": job_id, "state": state, "array_id": array, "array_index": index,
            "array__max_running": bound, "progress_seconds": progress,
            "move_to_node": move_to}  # fmt: skip


def test_the_lowest_waiting_indices_fill_the_places_the_running_tasks_leave():
    rows = [row(1, 0, "running"), row(2, 1), row(3, 2), row(4, 3), row(9, 0, array=None)]
    out = throttled(rows, eligible={2, 3, 4, 9})
    assert set(out) == {3, 4}, "one place left under %2: index 1 takes it"
    assert out[3] == Throttle(1, 2, 2, running=(1,), placed=(2,), before=0)
    assert out[4] == Throttle(1, 3, 2, running=(1,), placed=(2,), before=1)


def test_a_moving_task_then_work_under_way_go_before_new_work():
    rows = [row(1, 0), row(2, 1, progress=600.0), row(3, 2, move_to="r000-n01"), row(4, 3)]
    out = throttled(rows, eligible={1, 2, 3, 4})
    assert set(out) == {1, 4}, "the moved task restarts in its kept room, the preempted one next"
    assert (out[1].placed, out[1].before, out[4].before) == ((3, 2), 0, 1)


def test_held_and_dependent_tasks_take_no_place():
    rows = [row(1, 0, bound=1), row(2, 1, bound=1), row(3, 2, bound=1)]
    assert set(throttled(rows, eligible={2, 3})) == {3}, "index 0 is held: 1 takes the place"


def test_an_array_without_a_bound_and_a_full_one():
    rows = [row(1, 0, bound=None), row(2, 1, bound=None)]
    assert throttled(rows, eligible={1, 2}) == {}
    rows = [row(1, 0, "running"), row(2, 1, "preempting"), row(3, 2)]
    assert throttled(rows, eligible={3}) == {3: Throttle(1, 2, 2, (1, 2), (), 0)}


def starts(throttles, ends, started=None, runtimes=None, now=0.0):
    by_id = {t.index: t for t in throttles}  # job id = index + 100 below
    return arrays.estimated_starts(
        {i + 100: t for i, t in by_id.items()}, runtimes or {}, ends, started or {}, now
    )


def test_the_verdict_names_the_bound_and_the_end_that_opens_its_place():
    t = Throttle(array_id=42, index=7, max_running=2, running=(10, 11), placed=(), before=1)
    day = 3_600.0 * 24
    places = starts([Throttle(42, 6, 2, (10, 11), (), 0), t], {10: day + 30, 11: day + 700},
                    runtimes={106: 3_600.0})  # fmt: skip
    v = arrays.verdict(t, {}, places[107])
    assert v.code == "ARRAY_LIMIT"
    assert v.message == (
        "Its array 42 runs at most 2 tasks at once: 2 tasks hold GPUs, and 1 waiting task "
        "goes before task 7."
    )
    assert v.estimated_start == day + 720, "the second end, to the minute"
    assert v.details["place_opens_at"] == "1970-01-02T00:12:00Z"
    assert places[106] == (day + 60, "")
    none = starts([t], {10: day + 30, 11: None})
    v = arrays.verdict(t, {}, none[107])
    assert v.estimated_start is None
    assert v.details["no_estimate_reason"] == arrays.NO_END


def test_places_chain_through_the_tasks_before_with_their_predicted_runtimes():
    """Bound 2, both places held until minutes 10 and 30; four tasks left out, 20 minutes
    each: the first starts at 10, the second at 30, the third when the first ends (30),
    the fourth at 50."""
    m = 60.0
    left = [Throttle(1, i, 2, (1, 2), (), i) for i in range(4)]
    places = starts(left, {1: 10 * m, 2: 30 * m}, runtimes={100 + i: 20 * m for i in range(4)})
    assert [places[100 + i][0] for i in range(4)] == [10 * m, 30 * m, 30 * m, 50 * m]


def test_a_bound_lowered_below_the_running_tasks_opens_a_place_only_when_enough_end():
    m = 60.0
    left = [Throttle(1, 9, 2, (1, 2, 3, 4), (), 0)]  # 4 running, bound lowered to 2
    places = starts(left, {1: 10 * m, 2: 20 * m, 3: 30 * m, 4: 40 * m})
    assert places[109] == (30 * m, ""), "the third end leaves 1 running: a place opens"


def test_no_runtime_stops_the_chain_after_that_task_and_unstarted_places_stop_all():
    m = 60.0
    left = [Throttle(1, i, 1, (1,), (), i) for i in range(3)]
    places = starts(left, {1: 10 * m}, runtimes={100: 5 * m})
    assert places[100] == (10 * m, "") and places[101] == (15 * m, "")
    assert places[102] == (None, arrays.NO_RUNTIME), "task 1's runtime is unknown"
    waiting = [Throttle(1, 5, 2, (1,), (7,), 0)]  # task 7 has a place, not started
    assert starts(waiting, {1: 10 * m})[105] == (None, arrays.NOT_STARTED)
    assert starts(waiting, {1: 10 * m}, started={7: 4 * m})[105] == (4 * m, ""), (
        "started by this plan: it holds a place until its predicted end"
    )


def test_tasks_the_plan_starts_now_hold_gpus_with_their_predicted_ends():
    t = Throttle(array_id=5, index=9, max_running=3, running=(1,), placed=(2, 3), before=0)
    started = {2: 1_200.0, 3: 9_000.0}
    v = arrays.verdict(t, started, starts([t], {1: 6_000.0}, started)[109])
    assert v.message == (
        "Its array 5 runs at most 3 tasks at once: 3 tasks hold GPUs, and 0 waiting tasks "
        "go before task 9."
    )
    assert v.estimated_start == 1_200.0, "the first end opens its place"


def test_tasks_given_places_that_did_not_start_leave_no_estimate():
    t = Throttle(array_id=5, index=9, max_running=3, running=(1,), placed=(2, 3), before=0)
    started = {2: 1_200.0}
    v = arrays.verdict(t, started, starts([t], {1: 600.0}, started)[109])
    assert v.message == (
        "Its array 5 runs at most 3 tasks at once: 2 tasks hold GPUs, 1 more waits to start, "
        "and 0 waiting tasks go before task 9."
    )
    assert v.estimated_start is None, "task 3 waits for the engine: its place is taken"
    assert v.details["no_estimate_reason"] == arrays.NOT_STARTED


def test_started_ends_are_those_of_the_tasks_given_places_that_the_plan_starts():
    from scheduling.engine.types import PendingJob, Start, Tier

    def job(i, runtime):
        return PendingJob(id=i, queue="q", line="l", tier=Tier.EXPERIMENT, gpus=1,
                          submitted_at=0.0, predicted_runtime_s=runtime)  # fmt: skip

    t = Throttle(1, 5, 2, running=(), placed=(2, 3), before=0)
    starts = [Start(2, ()), Start(3, ()), Start(9, ())]  # 9: not an array's task
    pending = [job(2, 600.0), job(3, None), job(9, 60.0)]
    assert arrays.started_ends({5: t}, starts, pending, 1_000.0) == {2: 1_600.0, 3: None}
    assert arrays.started_ends({}, starts, pending, 1_000.0) == {}
