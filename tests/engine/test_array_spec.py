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


def test_the_verdict_names_the_bound_and_the_end_that_opens_its_place():
    t = Throttle(array_id=42, index=7, max_running=2, running=(10, 11), placed=(), before=1)
    v = arrays.verdict(t, {10: 3_600.0 * 24 + 30, 11: 3_600.0 * 24 + 700}, {})
    assert v.code == "ARRAY_LIMIT"
    assert v.message == (
        "Its array 42 runs at most 2 tasks at once: 2 tasks hold GPUs, and 1 waiting task "
        "goes before task 7."
    )
    assert v.estimated_start == 3_600 * 24 + 720, "the second end, to the minute"
    assert v.details["place_opens_at"] == "1970-01-02T00:12:00Z"
    v = arrays.verdict(t, {10: 3_600.0 * 24 + 30, 11: None}, {})
    assert v.estimated_start is None
    assert "not running with a predicted end" in v.details["no_estimate_reason"]


def test_tasks_the_plan_starts_now_hold_gpus_with_their_predicted_ends():
    t = Throttle(array_id=5, index=9, max_running=3, running=(1,), placed=(2, 3), before=0)
    v = arrays.verdict(t, {1: 6_000.0}, {2: 1_200.0, 3: 9_000.0})
    assert v.message == (
        "Its array 5 runs at most 3 tasks at once: 3 tasks hold GPUs, and 0 waiting tasks "
        "go before task 9."
    )
    assert v.estimated_start == 1_200.0, "the first end opens its place"


def test_tasks_given_places_that_did_not_start_leave_no_estimate():
    t = Throttle(array_id=5, index=9, max_running=3, running=(1,), placed=(2, 3), before=0)
    v = arrays.verdict(t, {1: 600.0}, {2: 1_200.0})
    assert v.message == (
        "Its array 5 runs at most 3 tasks at once: 2 tasks hold GPUs, 1 more waits to start, "
        "and 0 waiting tasks go before task 9."
    )
    assert v.estimated_start is None, "task 3 waits for the engine: its place is taken"
