"""The one formatter of a verdict for people (``scheduling.verdict_text``): dates, durations,
labels, the estimated start or why there is none; never an epoch or a float."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduling import verdict_text as vt


@pytest.mark.parametrize(
    "key, value, text",
    [
        ("quota_room_at", "2026-12-01T00:30:57Z", "2026-12-01 00:30 UTC"),
        ("next_attempt_at", "2026-11-29T14:05:09.5+00:00", "2026-11-29 14:05 UTC"),
        # stored by the engine before #15: epoch seconds, shown as dates all the same
        ("quota_room_at", 1796085057.451252, "2026-12-01 00:30 UTC"),
        ("deadline", 1_700_000_000.0, "2023-11-14 22:13 UTC"),
        ("deadline", 0.0, "unknown"),
        ("failing_for_seconds", 7800, "2 h 10 min"),
        ("backoff_seconds", 20, "20 s"),
        ("strict_order", 0, "no"),
        ("demoted", 1, "yes"),
        ("constraint", "block_size", "more matching nodes than any network block has"),
        # an estimate from the job's turn in the line, not a reservation (line_estimate.py)
        (
            "estimate_basis",
            "line",
            "its turn for the GPUs the running work and the jobs ahead of it release, not "
            "where they are: no nodes are reserved for it yet, so it is rougher than a "
            "reservation's",
        ),
        # a job waiting for quota: its turn to borrow idle capacity (session 37)
        (
            "estimate_basis",
            "borrowing",
            "its turn to borrow idle capacity: when the GPUs the running work and the jobs "
            "ahead of it release come round to it, before its own quota room; it borrows then "
            "if the borrowing rules still allow it",
        ),
        # the borrowing rule that keeps a job from borrowing (#19)
        ("borrow_refused", "cooldown", "it was preempted recently (cool-down)"),
        (
            "borrow_refused",
            "lenders_return",
            "the lenders are predicted to need the GPUs back before it ends",
        ),
        (
            "borrow_refused",
            "eviction_budget",
            "the work that would be borrowed in its place would take its queue past the "
            "eviction target if reclaimed",
        ),
        (
            "borrow_refused",
            "swap_risk",
            "the work that would be borrowed in its place is too big or has run too long to be "
            "put at risk for it",
        ),
        ("free_gpus", 12, "12"),
        # an estimate that waits on a run past its predicted end (session 38): an id, a time
        ("overrun_job", 12345, "#12345"),
        ("quota_held_for", 27077, "#27077"),
        ("overrun_job_ran_seconds", 69060, "19 h 11 min"),
        # kept off shared inference nodes, and patience before preempting (#19, session 8)
        ("predicted_end_at", "2026-12-01T14:00:00Z", "2026-12-01 14:00 UTC"),
        ("may_preempt_at", "2026-12-01T00:40:00Z", "2026-12-01 00:40 UTC"),
        ("inference_reclaims_gpus", 3, "3"),
        # past the starvation bound (#19, session 27)
        ("overdue_at", "2026-12-08T09:30:00Z", "2026-12-08 09:30 UTC"),
        ("ratio", 2.0, "2"),
        ("ratio", 0.4567, "0.5"),
        ("where", "", "none"),
        ("nodes", ["a", "b"], "a, b"),
        ("quota_room_at", "soon", "soon"),
    ],
)
def test_each_detail_reads_with_its_unit(key, value, text):
    assert vt.format_value(key, value) == text


def test_facts_follow_the_labels_order_whatever_order_the_details_come_in():
    # PostgreSQL's jsonb keeps its own key order (shortest first): the rows do not follow it
    stored = {"where": "r1: 9", "free_gpus": 9, "overrun_job": 7, "nodes_needed": 2, "zz": 1}
    assert [f["key"] for f in vt.facts(stored)] == [
        "nodes_needed",
        "free_gpus",
        "where",
        "overrun_job",
        "zz",
    ]


def test_facts_keep_the_order_and_leave_the_no_estimate_reason_to_the_estimate():
    details = {"held_gpus": 16, "no_estimate_reason": "it can never run as asked", "x_y": 3}
    assert vt.facts(details) == [
        {"key": "held_gpus", "label": "GPUs held now", "text": "16"},
        {"key": "x_y", "label": "X y", "text": "3"},
    ]
    assert vt.facts(None) == [] and vt.facts([1]) == []
    overrun = vt.facts({"overrun_job": 7, "overrun_job_ran_seconds": 3600})
    assert [f["label"] for f in overrun] == [
        "Its estimate waits for job",
        "That job has run (past its predicted end)",
    ]


def test_the_estimate_is_a_date_or_unknown_with_the_reason():
    at = datetime(2026, 12, 1, 0, 30, 59, 999_999, tzinfo=UTC)
    assert vt.estimate(at, {}) == "2026-12-01 00:30 UTC"
    assert vt.estimate(None, {"no_estimate_reason": "it can never run as asked"}) == (
        "unknown: it can never run as asked"
    )
    assert vt.estimate(None, {}) == "unknown"
    assert vt.estimate(None, "not a dict") == "unknown"
