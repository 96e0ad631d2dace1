"""The turns of the jobs waiting for a scope's quota room (``quota_turns.Turns``, session 36).

Each job takes its room when enough has come, in order, and gives it back after its
runtime. The property: the turns it gives are a schedule that never puts the scope over
its quota, each turn is the first instant (from the one ahead of it) at which the job
fits, and no job's turn comes before the turn of a job ahead of it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.quota_turns import Turns

H = 3600.0


def test_a_job_that_fits_now_starts_now():
    assert Turns(0.0).start(4, 4, []) == 0.0


def test_the_room_goes_round():
    """Quota 8, all held by one run ending at +1 h; three 8-GPU jobs of an hour each wait:
    one after the other, each when the one ahead gives its room back."""
    turns = Turns(0.0)
    got = []
    for _ in range(3):
        # the room left now (0) plus what the run released by the last turn, then the rest
        released = 8 if turns.at >= H else 0
        t = turns.start(8, released, iter([] if released else [(H, 8)]))
        assert t is not None
        got.append(t)
        turns.take(t, 8, t + H)
    assert got == [H, 2 * H, 3 * H]


def test_a_small_job_waits_its_turn_behind_a_big_one():
    turns = Turns(0.0)
    releases = [(H, 4), (2 * H, 4)]
    big = turns.start(8, 0, iter(releases))
    assert big == 2 * H
    turns.take(big, 8, big + H)
    # 4 GPUs were free at +1 h, but they are the big job's: the small one comes after it
    assert turns.start(1, 8, iter([])) == 3 * H


def test_a_job_that_never_fits_gets_no_turn():
    assert Turns(0.0).start(9, 0, iter([(H, 8)])) is None


runs = st.lists(
    st.tuples(st.integers(1, 40), st.integers(1, 8)), max_size=8
)  # (end in 15-minute steps, GPUs)
waiting = st.lists(
    st.tuples(st.integers(1, 8), st.integers(1, 24)), min_size=1, max_size=12
)  # (GPUs, runtime in 15-minute steps)


@settings(max_examples=300, deadline=None)
@given(quota=st.integers(1, 24), runs=runs, waiting=waiting)
def test_the_turns_keep_to_the_quota_in_order_and_as_early_as_they_fit(
    quota: int, runs: list[tuple[int, int]], waiting: list[tuple[int, int]]
) -> None:
    step = 900.0
    ends = sorted((e * step, g) for e, g in runs)
    room_now = quota - sum(g for _e, g in ends)  # below 0: the scope is over (a quota cut)
    turns = Turns(0.0)
    taken: list[tuple[float, float, int]] = []  # (start, end, GPUs)

    def in_use(x: float) -> int:
        return sum(g for e, g in ends if e > x) + sum(g for s, e, g in taken if s <= x < e)

    last = 0.0
    for gpus, runtime in waiting:
        released = sum(g for e, g in ends if e <= turns.at)
        later = iter([(e, g) for e, g in ends if e > turns.at])
        t = turns.start(gpus, room_now + released, later)
        if t is None:
            assert gpus > quota  # only a job larger than the quota never gets a turn
            continue
        assert t >= last  # in order
        last = t
        assert in_use(t) + gpus <= quota  # it fits when its turn comes
        instants = {turns.at, *(e for e, _g in ends), *(e for _s, e, _g in taken)}
        # ... and at no instant before it (from the turn ahead of it on)
        assert all(in_use(x) + gpus > quota for x in instants if turns.at <= x < t)
        turns.take(t, gpus, t + runtime * step)
        taken.append((t, t + runtime * step, gpus))
