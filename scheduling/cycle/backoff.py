"""Backoff of transient launch errors, and the pending reason of a job backing off.

Transient launch errors back off per job, in cluster time: after a failure the job is not
launched again before ``last failure + clamp(age of its failure streak, MIN, MAX)``, i.e.
after 10 s, 10 s, 20 s, 40 s ... at most 5 min; it stays pending meanwhile. The streak is
data on the job (``Job.launch_attempts``, ``launch_first_failed_at``,
``launch_last_failed_at``, ``launch_error``): written with the cycle's transaction (so it
commits and rolls back with it), it survives restarts and needs no Redis; it is cleared
when a run of the job starts or is adopted. Every attempt is also a ``launch_retry`` line
of the job's timeline, for its owner to read. A launch is never retried within the
cycle: a launch that timed out may have happened after all, and only the next cycle's
fresh observation can adopt it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduling.clock import to_datetime, to_epoch
from scheduling.engine import types as et
from scheduling.models import Job

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

# The job fields that hold the streak (written together, cleared together).
BACKOFF_FIELDS = (
    "launch_attempts", "launch_first_failed_at", "launch_last_failed_at", "launch_error",
)  # fmt: skip


def launch_backoff_s(streak_age_s: float) -> float:
    """Wait before the next launch attempt of a job failing since ``streak_age_s`` seconds."""
    return min(max(streak_age_s, LAUNCH_BACKOFF_MIN_S), LAUNCH_BACKOFF_MAX_S)


@dataclass(frozen=True)
class Streak:
    """Launches of one job that failed transiently in a row: how many, since and until when
    (cluster time, epoch seconds, as stored: to the microsecond), and the last error."""

    attempts: int
    first: float
    last: float
    error: str

    @classmethod
    def of(cls, job: Job) -> Streak | None:
        """The job's current streak, None when its last launch did not fail."""
        if not job.launch_attempts:
            return None
        return cls(
            job.launch_attempts, _epoch(job.launch_first_failed_at),
            _epoch(job.launch_last_failed_at), job.launch_error,
        )  # fmt: skip

    @property
    def wait_s(self) -> float:
        return launch_backoff_s(self.last - self.first)

    @property
    def next_attempt(self) -> float:
        return self.last + self.wait_s

    def due(self, now: float) -> bool:
        """May the job be launched again at ``now``?"""
        return now >= self.next_attempt - 1e-3  # stored times are in µs

    def verdict(self) -> et.Verdict:
        """The job's pending reason: when the next attempt is, and why it waits."""
        wait, at = self.wait_s, to_datetime(self.next_attempt)
        return et.Verdict(
            code=LAUNCH_RETRY_CODE,
            message=(
                f"It is its turn to start, but the cluster could not start it: {self.error}. "
                f"The portal tries again at {at:%Y-%m-%d %H:%M:%S} UTC, {wait:.0f} s after the "
                f"last attempt ({self.attempts} failed attempt(s) in a row)."
            ),
            details={
                "attempts": self.attempts,
                "failing_for_seconds": round(self.last - self.first),
                "backoff_seconds": round(wait),
                "next_attempt_at": at.isoformat(),
                "error": self.error,
            },
            remedy=LAUNCH_RETRY_REMEDY,
            estimated_start=self.next_attempt,
        )


def record_failure(job: Job, now: float, error: str) -> Streak:
    """A transient launch failure at ``now``: extend the job's streak (in memory; the
    caller writes ``BACKOFF_FIELDS``) and return it."""
    previous = Streak.of(job)
    at = to_datetime(now)
    last = _epoch(at)  # as it reads back from the database
    streak = Streak(
        attempts=(previous.attempts if previous else 0) + 1,
        first=previous.first if previous else last, last=last, error=error,
    )  # fmt: skip
    job.launch_attempts = streak.attempts
    if previous is None:
        job.launch_first_failed_at = at
    job.launch_last_failed_at = at
    job.launch_error = error
    return streak


def clear(job: Job) -> None:
    """A run of the job started (or was adopted): the streak is over (in memory)."""
    job.launch_attempts = 0
    job.launch_first_failed_at = None
    job.launch_last_failed_at = None
    job.launch_error = ""


def _epoch(at: datetime | None) -> float:
    value = to_epoch(at)
    assert value is not None, "a streak has its times (constraint job_launch_streak_has_times)"
    return value
