"""Why each waiting job waits: the engine's verdicts and the loop's own launch reasons.

Verdicts are written only where they changed, in one statement per batch, guarded by
``state = 'pending'`` (a job started or cancelled meanwhile keeps its state); a job
whose reason *code* changed tells its watchers (``job.updated``), and the pending page
hears the counts per reason (``pending.updated``) every cycle.
"""

from __future__ import annotations

from datetime import datetime

from core import events
from core.realtime import publish_on_commit
from scheduling.arrays import ARRAY_LIMIT_CODE
from scheduling.clock import to_datetime
from scheduling.cycle.backoff import LAUNCH_RETRY_CODE
from scheduling.cycle.context import Cycle
from scheduling.dependencies import DEPENDENCY_CODE
from scheduling.engine import types as et
from scheduling.holds import HELD_CODE
from scheduling.models import Job
from scheduling.sql import bulk_set

# Every code a waiting job's verdict can have, in API.md's order: the engine's (``PRECEDENCE``)
# with the loop's own, ``HELD``, ``DEPENDENCY`` then ``ARRAY_LIMIT`` right after ``NEVER_FITS``
# (a job on hold, held for other jobs or past its array's bound is never the engine's) and
# ``LAUNCH_RETRY`` last.
PENDING_CODES: tuple[str, ...] = (
    et.Code.NEVER_FITS, HELD_CODE, DEPENDENCY_CODE, ARRAY_LIMIT_CODE,
    *(code for code in et.PRECEDENCE if code != et.Code.NEVER_FITS), LAUNCH_RETRY_CODE,
)  # fmt: skip

VERDICT_FIELDS = ["pending_code", "pending_message", "pending_details", "pending_remedy",
                  "queue_position", "estimated_start"]  # fmt: skip


def counts_by_code(cycle: Cycle, plan: et.Plan) -> dict[str, int]:
    """Pending jobs per reason code: the engine's verdicts and the loop's own (launch
    retries, starts skipped because their node left service, jobs on hold or held for
    their dependencies)."""
    counts = plan.counts_by_code()
    for code in (LAUNCH_RETRY_CODE, DEPENDENCY_CODE, HELD_CODE, ARRAY_LIMIT_CODE):
        counts[code] = 0
    for v in (*cycle.launch_verdicts.values(), *cycle.dependency_verdicts.values()):
        counts[v.code] = counts.get(v.code, 0) + 1
    return counts


def write_verdicts(cycle: Cycle, plan: et.Plan, rows: dict[int, dict]) -> None:
    """Store each waiting job's verdict, only where it changed, in one statement per batch.

    The engine's verdicts, plus the loop's own for planned starts that were not launched
    (``LAUNCH_RETRY_CODE``, or ``NODES_UNAVAILABLE`` when the node left service after the
    snapshot): such a job has no engine verdict, it was planned to start. And those of the
    jobs on hold (``HELD_CODE``), held for their dependencies (``DEPENDENCY_CODE``) or past
    their array's bound (``ARRAY_LIMIT_CODE``), which the engine never saw.
    ``rows`` are the snapshot's job rows: what each job said before this cycle.
    """
    changed = []
    stamps: dict[float, datetime] = {}  # estimated starts as datetimes (many jobs share one)
    loop = {**cycle.launch_verdicts, **cycle.dependency_verdicts}
    for job_id, v in {**plan.verdicts, **loop}.items():
        row = rows.get(job_id)
        if row is None or row["state"] != Job.State.PENDING:
            continue
        est = None
        if v.estimated_start is not None:
            est = stamps.get(v.estimated_start)
            if est is None:
                est = stamps[v.estimated_start] = to_datetime(v.estimated_start)
        if (
            v.code == row["pending_code"]
            and v.position == row["queue_position"]
            and est == row["estimated_start"]
            and v.message == row["pending_message"]
            and v.remedy == row["pending_remedy"]
            and v.details == row["pending_details"]
        ):
            continue  # unchanged: not written, not told
        changed.append((job_id, v.code, v.message, v.details, v.remedy, v.position, est))
        if v.code != row["pending_code"]:  # a new reason: tell the job's watchers
            publish_on_commit(*events.job_updated(job_id, "pending", pending_code=v.code))
    bulk_set(Job, VERDICT_FIELDS, changed, where="t.state = 'pending'")
    publish_on_commit(*events.pending_updated(counts_by_code(cycle, plan)))
