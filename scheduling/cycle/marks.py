"""The plan's borrowed flags written back (``Plan.marks``).

``Job.borrowed`` is what the job page ("On borrowed capacity") and the API show, and what
the next plan's accounting stacks on top. The engine settles it every plan
(``accounting.settle``): a run that started borrowed is within its quota again once
work of its queue and line ends, and a run counts beyond a quota cut below its use. The
cycle writes each change with a line on the job's timeline, before the plan's starts
(whose quota swaps flag what they displace). Compare-and-set on the running state, as
``launch.mark_displaced``: a job that stopped meanwhile is left alone.
"""

from __future__ import annotations

from scheduling.cycle.context import Cycle
from scheduling.engine import types as et
from scheduling.models import Job
from scheduling.sql import bulk_set

WITHIN_QUOTA = (
    "now runs within its queue's and line's quotas (work of theirs ended, or a quota "
    "grew): it is no longer on borrowed capacity, and no longer among the first reclaimed"
)
BEYOND_QUOTA = (
    "now runs beyond its queue's or line's quota (the quota is below what its jobs use), "
    "on borrowed capacity, and is among the first reclaimed if the lenders need their "
    "GPUs back"
)


def write_marks(cycle: Cycle, marks: tuple[et.Mark, ...]) -> None:
    """Set each running job's ``borrowed`` flag as the plan's accounting counts it, each
    change told on the job's timeline (``borrowed`` or ``within_quota``)."""
    if not marks:
        return
    bulk_set(
        Job, ("borrowed",), [(m.job_id, m.borrowed) for m in marks], where="t.state = 'running'"
    )
    now = dict(
        Job.objects.filter(pk__in=[m.job_id for m in marks], state=Job.State.RUNNING)
        .values_list("pk", "borrowed")
    )  # fmt: skip
    for m in marks:
        if now.get(m.job_id) is m.borrowed:
            kind, message = (
                ("borrowed", BEYOND_QUOTA) if m.borrowed else ("within_quota", WITHIN_QUOTA)
            )
            cycle.event(m.job_id, kind, message, Job.State.RUNNING)
