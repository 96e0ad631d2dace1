"""The replay's borrowing history feeds the engine the eviction ratio the portal feeds it
(R4: evicted GPU time over GPU time given, over a sliding 72 h window), not evictions per
run (session 9: the replay's eviction cap acted on another number than the portal's)."""

from __future__ import annotations

import pytest

from replay.borrow_history import BorrowHistory
from scheduling.engine import QueueView, Tier

H = 3600.0


def view(history: BorrowHistory, now: float) -> QueueView:
    (q,) = history.queues((QueueView("a", "llm", Tier.EXPERIMENT, 64),), now)
    return q


def test_the_ratio_is_evicted_gpu_time_over_gpu_time_given_in_the_window():
    h = BorrowHistory(window_s=72 * H)
    assert view(h, 0.0).eviction_ratio is None  # no data yet
    h.run_started("a", 8, 0.0)  # runs 10 h to its end
    h.run_started("a", 2, 0.0)  # evicted after 1 h: 7,200 GPU-seconds evicted
    h.run_ended("a", 2, H)
    h.evicted("a", 2 * H, H)
    h.run_ended("a", 8, 10 * H)
    q = view(h, 10 * H)
    assert q.eviction_ratio == pytest.approx(round(7200 / (8 * 10 * H + 2 * H), 4))
    assert q.last_reclaim_at == H
    # a single eviction counts as it is (no minimum number of evictions, as the portal)
    assert q.eviction_ratio > 0
    # the ratio's two sides, for the quota swap's eviction budget
    assert (q.evicted_gpu_s, q.delivered_gpu_s) == (7200.0, 8 * 10 * H + 2 * H)


def test_the_highest_window_ratio_each_queue_reached_is_kept_by_the_alerts_rule():
    """What the portal's alert watches: the window ratio at its highest, not at the end,
    once the window holds 3 evictions (one early eviction of a queue that has run little
    is not an alert)."""
    h = BorrowHistory(window_s=72 * H)
    for i in range(3):
        h.run_started("a", 2, i * H)
        h.run_ended("a", 2, (i + 1) * H)
        h.evicted("a", 2 * H, (i + 1) * H)  # each run evicted after 1 h: ratio 1.0
        assert view(h, (i + 1) * H).eviction_ratio == 1.0
        assert h.peak_ratio == ({"a": 1.0} if i == 2 else {})
    h.run_started("a", 8, 3 * H)
    assert view(h, 30 * H).eviction_ratio < 0.1  # diluted by the long run since
    assert h.peak_ratio == {"a": 1.0}


def test_the_window_slides_evictions_and_use_out():
    h = BorrowHistory(window_s=72 * H)
    h.run_started("a", 4, 0.0)
    h.run_ended("a", 4, H)
    h.evicted("a", 4 * H, H)
    h.run_started("a", 4, 2 * H)  # runs on, never evicted
    assert view(h, 10 * H).eviction_ratio == pytest.approx(round(4 * H / (4 * H + 32 * H), 4))
    later = view(h, 200 * H)  # the eviction left the window; the running job's use did not
    assert later.eviction_ratio == 0.0 and later.last_reclaim_at is None
    h.run_ended("a", 4, 201 * H)
    assert view(h, 400 * H).eviction_ratio is None  # nothing given, nothing evicted
