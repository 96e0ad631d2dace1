"""Backoff of transient launch errors, and the pending reason of a job backing off.

Transient launch errors back off per job, in cluster time: after a failure the job is not
launched again before ``last failure + clamp(age of its failure streak, MIN, MAX)``, i.e.
after 10 s, 10 s, 20 s, 40 s ... at most 5 min; it stays pending meanwhile. The streak is
the run of latest ``launch_retry`` events in the job's timeline: it commits and rolls
back with the cycle, survives restarts, needs no model field and no Redis, and the user
sees every attempt. A launch is never retried within the cycle: a launch that timed out
may have happened after all, and only the next cycle's fresh observation can adopt it.
"""

from __future__ import annotations

import re

from scheduling.clock import to_datetime, to_epoch
from scheduling.engine import types as et
from scheduling.models import JobEvent

LAUNCH_RETRY = "launch_retry"
LAUNCH_BACKOFF_MIN_S = 10.0
LAUNCH_BACKOFF_MAX_S = 300.0

# The pending reason of a job the plan starts but the backend has not launched yet: its
# launch failed transiently, or it is still backing off after such a failure. The engine
# knows nothing of launches (it planned a start, so it gave no verdict): the loop writes
# this reason itself, with the verdicts, so the job always says why it waits.
LAUNCH_RETRY_CODE = "LAUNCH_RETRY"
LAUNCH_RETRY_REMEDY = (
    "Nothing to do: the portal retries automatically; if it keeps failing, the on-call "
    "engineer sees a backend_error alert."
)
_RETRY_ERROR = re.compile(r"right now \((.*)\); still waiting", re.S)


def launch_backoff_s(streak_age_s: float) -> float:
    """Wait before the next launch attempt of a job failing since ``streak_age_s`` seconds."""
    return min(max(streak_age_s, LAUNCH_BACKOFF_MIN_S), LAUNCH_BACKOFF_MAX_S)


def launch_due(streak: tuple[int, float, float], now: float) -> bool:
    """May a job with this failure streak (count, first, last) be launched at ``now``?"""
    _, first, last = streak
    return now >= last + launch_backoff_s(last - first) - 1e-3  # event times are in µs


def launch_streaks(job_ids: list[int]) -> dict[int, tuple[int, float, float]]:
    """Jobs whose latest timeline events are transient launch failures: (count, first, last)."""
    retrying = set(
        JobEvent.objects.filter(job_id__in=job_ids, kind=LAUNCH_RETRY).values_list(
            "job_id", flat=True
        )
    )
    streaks: dict[int, tuple[int, float, float]] = {}
    ended: set[int] = set()
    for job_id, kind, at in (
        JobEvent.objects.filter(job_id__in=retrying)
        .order_by("job_id", "-id")  # newest first by insertion (timeline clocks may differ)
        .values_list("job_id", "kind", "at")
    ):
        if job_id in ended:
            continue
        if kind != LAUNCH_RETRY:  # the streak is over: the job did something else since
            ended.add(job_id)
            continue
        count, _, last = streaks.get(job_id, (0, 0.0, to_epoch(at)))
        streaks[job_id] = (count + 1, to_epoch(at), last)
    return streaks


def last_retry_error(job_id: int) -> str:
    """The backend's error of the job's latest launch failure, read from its timeline."""
    message = (
        JobEvent.objects.filter(job_id=job_id, kind=LAUNCH_RETRY)
        .order_by("-id")
        .values_list("message", flat=True)
        .first()
    ) or ""
    found = _RETRY_ERROR.search(message)
    return found.group(1) if found else message


def launch_retry_verdict(attempts: int, first: float, last: float, error: str) -> et.Verdict:
    """The pending reason of a job whose last ``attempts`` launches failed transiently
    (the first at ``first``, the last at ``last``): when the next attempt is, and why."""
    wait = launch_backoff_s(last - first)
    next_at = last + wait
    at = to_datetime(next_at)
    return et.Verdict(
        code=LAUNCH_RETRY_CODE,
        message=(
            f"It is its turn to start, but the cluster could not start it: {error}. "
            f"The portal tries again at {at:%Y-%m-%d %H:%M:%S} UTC, {wait:.0f} s after the "
            f"last attempt ({attempts} failed attempt(s) in a row)."
        ),
        details={
            "attempts": attempts,
            "failing_for_seconds": round(last - first),
            "backoff_seconds": round(wait),
            "next_attempt_at": at.isoformat(),
            "error": error,
        },
        remedy=LAUNCH_RETRY_REMEDY,
        estimated_start=next_at,
    )
