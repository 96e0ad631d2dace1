"""Queue delay by reason: why jobs waited, in the engine's own pending reason codes.

``replay.idle`` answers "why were GPUs idle while jobs waited"; this answers the other
half, "what did the waiting jobs wait for". Each job's queueing delay (submission to
first start, the ``avg_queue_s`` of the report) is cut at every plan of its pool and
each piece is charged to the reason the job held over it:

* ``awaiting_cycle``: from its arrival to the first plan that saw it (the cycle's
  cadence, ``cycle_s``);
* the code of the engine's verdict for it at the last plan (``QUOTA_EXCEEDED``,
  ``PRIORITY``, ``TOPOLOGY``, ``INSUFFICIENT_GPUS``, ``PREEMPTING``, ``DEMOTED``,
  ``NODES_UNAVAILABLE``, API.md's codes), a refused borrower's as
  ``QUOTA_EXCEEDED/<rule>`` (``details.borrow_refused``: ``cooldown``,
  ``queue_cooldown``, ``eviction_cap``, ``lenders_return``; ``borrowing.py``);
* for a job the plan did not see (the replay's exact shortcuts, ``shortcuts.py``):
  ``QUOTA_EXCEEDED`` when its line lacks the quota room and it may not borrow, else
  ``INSUFFICIENT_GPUS`` when the plan was skipped because nothing fitted the free GPUs,
  else ``PRIORITY`` (behind a job blocked for capacity, without backfill).

A job's pieces are complete when it first starts, so over the finished jobs the
reasons add up to their queueing delays exactly: the values of ``per_job`` over the
finished jobs add up to their ``avg_queue_s`` (``tests/replay/test_wait_reasons.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduling.engine import Code, Verdict

AWAITING_CYCLE = "awaiting_cycle"


def reason_of(verdict: Verdict) -> str:
    """The reason a verdict charges: its code, a refused borrower's with the rule."""
    rule = verdict.details.get("borrow_refused") if verdict.code == Code.QUOTA_EXCEEDED else None
    return f"{verdict.code}/{rule}" if rule else verdict.code


def unseen_reason(over_quota: bool, skipped: bool) -> str:
    """The reason of a job a plan did not see (see the module doc)."""
    if over_quota:
        return Code.QUOTA_EXCEEDED
    return Code.INSUFFICIENT_GPUS if skipped else Code.PRIORITY


class WaitLedger:
    """Open waits (jobs not started yet) and the charges of the jobs that have started."""

    __slots__ = ("_open", "charges")

    def __init__(self) -> None:
        # job index -> (since, reason, charges so far)
        self._open: dict[int, tuple[float, str, dict[str, float]]] = {}
        self.charges: dict[int, dict[str, float]] = {}  # started jobs: reason -> seconds

    def arrive(self, job: int, t: float) -> None:
        """A job enters the queue for the first time at ``t``."""
        self._open[job] = (t, AWAITING_CYCLE, {})

    def hold(self, job: int, t: float, reason: str) -> None:
        """From ``t`` on the job waits for ``reason`` (the plan at ``t`` said so)."""
        entry = self._open.get(job)
        if entry is None:
            return  # started before (a requeued job): its queueing delay is over
        since, was, charges = entry
        if t > since:
            charges[was] = charges.get(was, 0.0) + (t - since)
        self._open[job] = (t, reason, charges)

    def started(self, job: int, t: float) -> None:
        """The job's first start at ``t``: its queueing delay is complete."""
        entry = self._open.pop(job, None)
        if entry is None:
            return
        since, was, charges = entry
        if t > since:
            charges[was] = charges.get(was, 0.0) + (t - since)
        self.charges[job] = charges

    def drop(self, job: int) -> None:
        """The job left without starting (rejected): its wait is not a queueing delay."""
        self._open.pop(job, None)

    def per_job(self, jobs: Sequence[int]) -> dict[str, float]:
        """Seconds per job for each reason over ``jobs`` (started ones), largest first."""
        if not jobs:
            return {}
        totals: dict[str, float] = {}
        for job in jobs:
            for reason, s in self.charges.get(job, {}).items():
                totals[reason] = totals.get(reason, 0.0) + s
        rows = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
        return {reason: round(s / len(jobs), 1) for reason, s in rows}
