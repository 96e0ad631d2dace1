"""``predict.waiting_runtime_s`` and ``predict.run_end``: what a waiting job still has to
run and when a running one ends, from a whole-runtime prediction that knows how long the
job has already run. The loop (``scheduling.prediction``) and the replay use them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduling.engine.predict import run_end, waiting_runtime_s

OVERRUN_S = 1800.0


def test_a_job_that_never_ran_waits_for_its_whole_runtime():
    assert waiting_runtime_s(lambda e: 3600.0 + e, 0.0, OVERRUN_S) == 3600.0


def test_a_job_from_a_checkpoint_waits_for_the_rest_at_least_the_overrun_guess():
    asked: list[float] = []

    def whole(elapsed: float) -> float:
        asked.append(elapsed)
        return 10_000.0

    assert waiting_runtime_s(whole, 4000.0, OVERRUN_S) == 6000.0
    assert asked == [4000.0], "from the runs that got as far"
    assert waiting_runtime_s(lambda e: 4100.0, 4000.0, OVERRUN_S) == OVERRUN_S


def test_a_run_ends_after_the_rest_of_its_whole_runtime():
    assert run_end(lambda e: 7200.0, started_at=1000.0, start_progress_s=1200.0,
                   now=2000.0) == 1000.0 + 6000.0  # fmt: skip


def test_a_run_known_to_have_reached_its_checkpoint_is_predicted_from_the_runs_that_did():
    asked: list[float] = []

    def whole(elapsed: float) -> float:
        asked.append(elapsed)
        return 9000.0

    end = run_end(whole, started_at=1000.0, start_progress_s=200.0, now=3000.0,
                  reached_at=2500.0)  # fmt: skip
    assert asked == [200.0 + 1500.0] and end == 1000.0 + 8800.0


def test_a_run_past_its_end_is_predicted_from_the_runs_as_long_as_it_has_run():
    whole = {0.0: 600.0, 900.0: 5000.0}
    assert run_end(whole.__getitem__, started_at=0.0, start_progress_s=0.0, now=900.0) == 5000.0


@given(
    started=st.floats(0, 1e6),
    start_progress=st.floats(0, 1e5),
    ran=st.floats(0, 1e5),
    base=st.floats(1, 1e5),
    slope=st.floats(0, 3),
)
def test_the_end_never_precedes_the_runs_start_nor_moves_with_the_clock_while_ahead(
    started, start_progress, ran, base, slope
):
    """Whatever the predictor says (here: longer the longer a job has run), the end is never
    before the run's start, and while the first prediction is still ahead it is the one
    used: the same end at any instant before it."""

    def whole(elapsed: float) -> float:
        return base + slope * elapsed

    now = started + ran
    end = run_end(whole, started, start_progress, now)
    assert end >= started
    first = started + max(0.0, whole(start_progress) - start_progress)
    if first > now:
        assert end == first == run_end(whole, started, start_progress, started)
