"""``gpuctl explain`` says a verdict as the job page does (#15): the portal's ``facts`` and
``estimated_start_text`` when it sends them; otherwise times and durations formatted here,
never an epoch or raw seconds, and "unknown: <why>" when there is no estimate."""

from __future__ import annotations

from tests.cli.test_gpuctl_commands import explained


def row(lines: list[str], label: str) -> str:
    (found,) = [line for line in lines if line.startswith(label + " ")]
    return found[len(label) :].strip()


def test_the_portals_facts_and_estimate_are_shown_as_they_are(cli, portal):
    lines = explained(cli, portal, estimated_start="2026-12-01T00:30:57.451252Z", pending_reason={
        "code": "QUOTA_EXCEEDED", "message": "Line llm holds 16 of its 16 GPU quota.",
        "details": {"held_gpus": 16, "quota_room_at": "2026-12-01T00:30:57Z"},
        "facts": [{"key": "held_gpus", "label": "GPUs held now", "text": "16"},
                  {"key": "quota_room_at", "label": "Quota room predicted at",
                   "text": "2026-12-01 00:30 UTC"}],
        "estimated_start_text": "2026-12-01 00:30 UTC", "remedy": "Wait.",
    })  # fmt: skip
    assert row(lines, "numbers") == (
        "GPUs held now: 16; Quota room predicted at: 2026-12-01 00:30 UTC"
    )
    assert row(lines, "estimated start") == "2026-12-01 00:30 UTC"


def test_without_facts_times_and_durations_are_formatted_here(cli, portal):
    lines = explained(cli, portal, estimated_start="2026-11-29T14:05:09.5+00:00", pending_reason={
        "code": "LAUNCH_RETRY", "message": "It is its turn to start.",
        "details": {"attempts": 3, "failing_for_seconds": 7800, "backoff_seconds": 20,
                    "next_attempt_at": "2026-11-29T14:05:09.5+00:00"},
    })  # fmt: skip
    assert row(lines, "numbers") == (
        "attempts=3  failing_for_seconds=2 h 10 min  backoff_seconds=20 s  "
        "next_attempt_at=2026-11-29 14:05 UTC"
    )
    assert row(lines, "estimated start") == "2026-11-29 14:05 UTC"


def test_no_estimate_says_why(cli, portal):
    lines = explained(cli, portal, estimated_start=None, pending_reason={
        "code": "NEVER_FITS", "message": "This job can never run as asked.",
        "details": {"nodes_needed": 9, "no_estimate_reason": "it can never run as asked"},
    })  # fmt: skip
    assert row(lines, "numbers") == "nodes_needed=9"
    assert row(lines, "estimated start") == "unknown: it can never run as asked"
