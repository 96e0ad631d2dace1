"""When the jobs waiting for a scope's quota room get it (``quota_turns.first_fit``,
session 36).

At each instant room comes back, the waiting jobs are taken in order and each one the room
fits starts, holding its room for its runtime. The property compares it with the plainest
way to do that (every instant, every job, in order) and checks the schedule never puts the
scope over its quota.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.quota_turns import first_fit

H = 3600.0


def test_a_job_that_fits_now_starts_now():
    assert first_fit(4, [], [(4, H)], 0.0) == [0.0]


def test_the_room_goes_round():
    """Quota 8, all held by one run ending at +1 h; three 8-GPU jobs of an hour each wait:
    one after the other, each when the one ahead gives its room back (before session 36
    only the first had an estimate)."""
    assert first_fit(0, [(H, 8)], [(8, H)] * 3, 0.0) == [H, 2 * H, 3 * H]


def test_a_small_job_behind_a_big_one_starts_when_the_room_fits_it():
    """The planner starts a later job the room fits while an earlier one does not fit yet:
    4 GPUs come back at +1 h, the 8-GPU job ahead needs both releases."""
    assert first_fit(0, [(H, 4), (2 * H, 4)], [(8, H), (1, H)], 0.0) == [2 * H, H]


def test_releases_of_one_instant_count_together_before_anyone_starts():
    """Two releases at +1 h make room for the 8-GPU job ahead, not first for the small one."""
    assert first_fit(0, [(H, 4), (H, 4)], [(8, H), (4, H)], 0.0) == [H, 2 * H]


def test_a_scope_over_its_quota_waits_for_the_excess_to_go_and_a_job_too_big_never_fits():
    assert first_fit(-4, [(H, 4), (2 * H, 4)], [(4, H), (9, H)], 0.0) == [2 * H, None]


def test_a_preemptor_s_claim_takes_room_for_a_while():
    """Negative releases (a preemptor taking what its victims free) delay the others."""
    releases = [(0.0, 4), (0.0, -4), (H, 4)]  # victims free 4, the preemptor takes them
    assert first_fit(0, sorted(releases), [(4, H)], 0.0) == [H]


def reference(room, releases, jobs, now):
    """Every instant anything comes back, every waiting job in order: start it if it fits."""
    out = [None] * len(jobs)
    events = list(releases)
    t = now
    while True:
        room += sum(g for e, g in events if e == t)
        events = [(e, g) for e, g in events if e != t]
        for i, (gpus, runtime) in enumerate(jobs):
            if out[i] is None and gpus <= room:
                out[i] = t
                room -= gpus
                events.append((t + runtime, gpus))
        later = [e for e, _g in events if e > t]
        if not later or all(x is not None for x in out):
            return out
        t = min(later)


runs = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 8)), max_size=8)
waiting = st.lists(st.tuples(st.integers(1, 10), st.integers(1, 24)), min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(quota=st.integers(1, 24), runs=runs, waiting=waiting, spare=st.integers(-4, 8))
def test_first_fit_is_the_plain_rule_and_keeps_to_the_quota(quota, runs, waiting, spare):
    step = 900.0
    releases = sorted((e * step, g) for e, g in runs)
    jobs = [(g, r * step) for g, r in waiting]
    room = spare
    got = first_fit(room, releases, jobs, 0.0)
    assert got == reference(room, releases, jobs, 0.0)
    # the scope never holds more than its room: at every start, what the jobs started hold
    # is within the room left now plus what has come back by then
    for t in {s for s in got if s is not None}:
        came_back = sum(g for e, g in releases if e <= t)
        held = sum(
            g for (g, r), s in zip(jobs, got, strict=True) if s is not None and s <= t < s + r
        )
        assert held <= room + came_back
