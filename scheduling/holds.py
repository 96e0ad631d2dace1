"""Holds (Slurm's ``scontrol hold``/``release``, Run:ai's suspend/resume): what the loop
reads of them, and the pending reason of a held job.

A held job (``Job.held_at`` set) is pending and left out of the engine's pending jobs
exactly as a job waiting for its dependencies (``scheduling.snapshot``): no reservation,
no quota room, no demand, no place in the fair order. The loop writes its verdict itself,
``HELD``, checked right after ``NEVER_FITS`` and before ``DEPENDENCY`` (a held job that also
waits for other jobs reads ``HELD``: releasing it is the first thing to do). A *running*
job that is held is suspended: the loop asks it to checkpoint and stop through the stop
path of ``scheduling.cycle.stops`` (stop reason ``SUSPEND``), and it comes back pending and
held with its progress kept; a suspension is not a preemption (no ``preemption_count``, no
eviction, never towards ``DEMOTED``). Released, the job queues again from the release
(``Job.released_at``): its place in the fair order and its wait (the starvation bound,
``gpuportal_job_wait_seconds``, the pending-too-long alert) restart then; the time before
the hold does not count. The writers are ``scheduling.hold_services``.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduling.engine import explain
from scheduling.engine import types as et

HELD_CODE = "HELD"
HELD_REMEDY = "Release it to queue it again."
# ``Job.stop_reason`` of a running job suspended by a hold.
SUSPEND = "suspend"
USER, ADMIN = "user", "admin"  # ``Job.hold_kind``
# The columns of a job's hold the snapshot reads (``snapshot.JOB_FIELDS``; ``held_at`` as
# ``held_at_ts``, epoch seconds).
HOLD_FIELDS = ("hold_kind", "hold_reason", "held_by__username")


def is_held(row: Mapping) -> bool:
    """Whether a snapshot row (``snapshot.JOB_FIELDS``) is held."""
    return bool(row["hold_kind"])


def verdict(row: Mapping) -> et.Verdict:
    """The ``HELD`` verdict of a held job's row: who held it, when, why; no estimated start
    (it never starts until released)."""
    by = row["held_by__username"] or "a former user"
    at = row["held_at_ts"]
    reason = row["hold_reason"]
    message = f"Held by {by} at {explain.when(at)}" + (f": {reason}." if reason else ".")
    details = {
        "held_by": by,
        "held_at": explain.iso(at) if at is not None else None,
        "hold_reason": reason,
        "hold_kind": row["hold_kind"],
        explain.NO_ESTIMATE: "it is held: it starts only after it is released",
    }
    return et.Verdict(HELD_CODE, message, details, HELD_REMEDY)
