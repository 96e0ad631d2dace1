"""Queue delay by reason: why jobs waited, in the engine's own pending reason codes.

``replay.idle`` answers "why were GPUs idle while jobs waited"; this answers the other
half, "what did the waiting jobs wait for". Each job's queueing delay (submission to
first start, the ``avg_queue_s`` of the report) is cut at every plan of its pool and
each piece is charged to the reason the job held over it:

* ``awaiting_cycle``: from its arrival to the first plan that saw it (the cycle's
  cadence, ``cycle_s``);
* the code of the engine's verdict for it at the last plan (``QUOTA_EXCEEDED``,
  ``PRIORITY``, ``TOPOLOGY``, ``INSUFFICIENT_GPUS``, ``PREEMPTING``, ``DEMOTED``,
  ``NODES_UNAVAILABLE``, API.md's codes). Under a policy that borrows, an over-quota
  wait says why the job did not borrow instead, ``QUOTA_EXCEEDED/<why>``: a rule of
  ``borrowing.py`` refused it (``details.borrow_refused``: ``cooldown``,
  ``queue_cooldown``, ``eviction_cap``, ``lenders_return``; for a quota swap also
  ``eviction_budget``, ``swap_risk``), it may not borrow at all
  (``not_preemptible``, ``demoted``), or no idle capacity had room for it
  (``no_idle_room``);
* for a job the plan did not see (the replay's exact shortcuts, ``shortcuts.py``):
  ``QUOTA_EXCEEDED`` (with its ``why``) when its line lacks the quota room and it may
  not borrow, else ``INSUFFICIENT_GPUS`` when the plan was skipped because nothing
  fitted the free GPUs, else ``PRIORITY`` (behind a job blocked for capacity, without
  backfill).

A job's pieces are complete when it first starts, so over the finished jobs the
reasons add up to their queueing delays exactly: the values of ``per_job`` over the
finished jobs add up to their ``avg_queue_s`` (``tests/replay/test_wait_reasons.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduling.engine import Code, PolicyConfig, Verdict

AWAITING_CYCLE = "awaiting_cycle"
NO_IDLE_ROOM = "no_idle_room"


def why_not_borrowing(preemptible: bool, demoted: bool, policy: PolicyConfig) -> str | None:
    """Why an over-quota job that no borrowing rule refused did not borrow (None: the
    policy does not borrow, nothing to say)."""
    if not policy.borrowing:
        return None
    if not preemptible:
        return "not_preemptible"
    return "demoted" if demoted else NO_IDLE_ROOM


def reason_of(verdict: Verdict, why_not: str | None) -> str:
    """The reason a verdict charges: its code; over quota, with why it did not borrow
    (the rule that refused it, else ``why_not``)."""
    if verdict.code != Code.QUOTA_EXCEEDED:
        return verdict.code
    why = verdict.details.get("borrow_refused") or why_not
    return f"{verdict.code}/{why}" if why else verdict.code


def unseen_reason(over_quota: bool, skipped: bool, why_not: str | None) -> str:
    """The reason of a job a plan did not see (see the module doc)."""
    if over_quota:
        return f"{Code.QUOTA_EXCEEDED}/{why_not}" if why_not else Code.QUOTA_EXCEEDED
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
