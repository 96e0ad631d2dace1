"""Job dependencies (``Job.after``, Slurm's ``--dependency=afterok``): what the loop reads of
them, and the pending reason of a job that waits for others.

A pending job whose ``after`` jobs have not all succeeded is *held*: the snapshot leaves it
out of the engine's pending jobs (``scheduling.snapshot``), so it holds no reservation, no
quota room and counts as no demand; the loop writes its verdict itself, ``DEPENDENCY``
(checked right after ``NEVER_FITS``: a held job the cluster could never run reads that),
with the verdicts. Once they have all succeeded it queues like any other job, from when
the last of them ended (``released_at``: its place in the fair order and its wait count
from then, not from its submission). When one of them ends failed or cancelled, the loop
cancels it (``scheduling.cycle.dependencies``).

Names: a verdict is one text every viewer of the job reads, so it names a dependency
(``job 12 (pretrain-7b)``) only when it is in the job's own business line, whose members
see both; otherwise by its id alone, as other verdicts name jobs (the job page shows each
viewer the names of the jobs they may see).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduling import arrays, holds
from scheduling.clock import to_epoch
from scheduling.engine import explain
from scheduling.engine import types as et
from scheduling.engine.feasibility import ClusterShape
from scheduling.feasibility import refusal_for
from scheduling.models import Job

DEPENDENCY_CODE = "DEPENDENCY"
DEPENDENCY_REMEDY = (
    "Nothing to do: it queues like any other job once they have all succeeded, and is "
    "cancelled if one of them fails or is cancelled."
)
# What a dependency that has not succeeded is doing, in a verdict's words.
_DOING = {
    Job.State.PENDING: "waiting to start",
    Job.State.RUNNING: "running",
    Job.State.PREEMPTING: "checkpointing to stop, then waiting again",
    Job.State.FAILED: "failed (this job is being cancelled)",
    Job.State.CANCELLED: "cancelled (this job is being cancelled)",
}


@dataclass(frozen=True)
class Link:
    """One dependency of a pending job: the job waited for, as the loop reads it."""

    id: int
    name: str
    state: str
    finished_at: float | None  # epoch seconds
    same_line: bool  # in the waiting job's business line

    def named(self) -> str:
        return f"job {self.id} ({self.name})" if self.same_line else f"job {self.id}"


@dataclass(frozen=True)
class PendingLinks:
    """The dependencies of the pending jobs that have any: ``unmet`` (those not succeeded,
    by waiting job, in id order) and ``released_at`` (jobs whose dependencies all succeeded:
    when the last of them ended)."""

    unmet: dict[int, list[Link]] = field(default_factory=dict)
    released_at: dict[int, float] = field(default_factory=dict)


def read_pending_links() -> PendingLinks:
    """One query: every dependency of every pending job. Read after the snapshot's job rows,
    so a job in them has its links too (a submission commits a job with its links)."""
    through = Job.after.through
    rows = (
        through.objects.filter(from_job__state=Job.State.PENDING)
        .order_by("from_job_id", "to_job_id")
        .values_list(
            "from_job_id", "to_job_id", "to_job__name", "to_job__state",
            "to_job__finished_at", "from_job__queue__business_line_id",
            "to_job__queue__business_line_id",
        )
    )  # fmt: skip
    unmet: dict[int, list[Link]] = {}
    ended: dict[int, float] = {}
    for job_id, dep_id, name, state, finished_at, line, dep_line in rows:
        finished = to_epoch(finished_at)
        if state == Job.State.SUCCEEDED:
            ended[job_id] = max(ended.get(job_id, 0.0), finished or 0.0)
        else:
            unmet.setdefault(job_id, []).append(
                Link(dep_id, name, state, finished, line == dep_line)
            )
    released = {job_id: at for job_id, at in ended.items() if job_id not in unmet}
    return PendingLinks(unmet, released)


def unmet_links(ids: Sequence[int], line_id: int) -> list[Link]:
    """The jobs of ``ids`` that have not succeeded, as a job of business line ``line_id``
    that waits for them reads them (the what-if's candidate; one query)."""
    rows = (
        Job.objects.filter(pk__in=ids)
        .exclude(state=Job.State.SUCCEEDED)
        .order_by("pk")
        .values_list("pk", "name", "state", "finished_at", "queue__business_line_id")
    )
    return [
        Link(pk, name, state, to_epoch(finished_at), line == line_id)
        for pk, name, state, finished_at, line in rows
    ]


def never_fits(job: et.PendingJob, shape: ClusterShape, row: Mapping) -> et.Verdict | None:
    """``NEVER_FITS`` when the cluster (``shape``) could never run the job as asked
    (``row``: its ``snapshot.JOB_FIELDS``), else None: checked first for every held job."""
    refusal = refusal_for(row, shape)
    if refusal is None:
        return None
    code, message, details, remedy = explain.never_fits(job, refusal.why, refusal.details_dict())
    return et.Verdict(code, message, details, remedy)


def verdict(
    job: et.PendingJob, links: list[Link], ends: Mapping[int, float | None],
    shape: ClusterShape, row: Mapping,
) -> et.Verdict:  # fmt: skip
    """The verdict of a held job: ``NEVER_FITS`` when the cluster (``shape``) could never run
    it as asked (``row``: its ``snapshot.JOB_FIELDS``), else ``DEPENDENCY``. ``ends``: the
    running jobs' predicted ends (epoch seconds). The estimated start is the latest
    predicted end of its unmet dependencies when all of them run with one, else none: a
    lower bound, as it then queues like any other job."""
    never = never_fits(job, shape, row)
    if never is not None:
        return never
    # the predicted end of each, to the minute (None: not running with one)
    until = [
        explain.minute_up(end)
        if link.state == Job.State.RUNNING and (end := ends.get(link.id))
        else None
        for link in links
    ]
    doing = [
        _DOING.get(link.state, link.state)
        + (f", predicted to end {explain.when(end)}" if end is not None else "")
        for link, end in zip(links, until, strict=True)
    ]
    if len(links) == 1:
        message = f"Waits for {links[0].named()} to succeed: {doing[0]}."
    else:
        each = "; ".join(f"{link.named()}: {d}" for link, d in zip(links, doing, strict=True))
        message = f"Waits for {len(links)} jobs to succeed: {each}."
    details: dict = {"waiting_for": [link.id for link in links]}
    estimate = None if None in until else max(until)  # type: ignore[type-var]
    if estimate is not None:
        details["dependencies_end_at"] = explain.iso(estimate)
    else:
        first = links[until.index(None)]
        details[explain.NO_ESTIMATE] = (
            f"job {first.id} it waits for is not running with a predicted end"
        )
    return et.Verdict(
        DEPENDENCY_CODE, message, details, DEPENDENCY_REMEDY, estimated_start=estimate
    )


def held_verdicts(
    held: Mapping[int, et.PendingJob], links: PendingLinks, snapshot: et.Snapshot,
    rows: Mapping[int, Mapping], throttled: Mapping[int, arrays.Throttle] | None = None,
    started: Mapping[int, float | None] | None = None, now: float = 0.0,
) -> dict[int, et.Verdict]:  # fmt: skip
    """The verdicts of the snapshot's held jobs, by job id: ``NEVER_FITS`` first, then
    ``HELD`` for a job on hold (``scheduling.holds``), ``ARRAY_LIMIT`` for a task past its
    array's bound (``throttled``, ``scheduling.arrays``; ``started``: the jobs the cycle's
    plan starts, with their predicted ends; ``now``: the cycle's time, from which the
    tasks' places are predicted to open: ``arrays.estimated_starts``), else ``DEPENDENCY``
    (``verdict``)."""
    throttled, started = throttled or {}, started or {}
    if not held:
        return {}
    ends = {run.id: run.predicted_end for run in snapshot.running if run.state == et.RUNNING}
    runtimes = {job_id: held[job_id].predicted_runtime_s for job_id in throttled}
    places = arrays.estimated_starts(throttled, runtimes, ends, started, now)
    shape = ClusterShape.of_nodes(snapshot.nodes)
    out = {}
    for job_id, job in held.items():
        row = rows[job_id]
        if holds.is_held(row):
            out[job_id] = never_fits(job, shape, row) or holds.verdict(row)
        elif job_id in throttled:
            out[job_id] = never_fits(job, shape, row) or arrays.verdict(
                throttled[job_id], started, places[job_id]
            )
        else:
            out[job_id] = verdict(job, links.unmet[job_id], ends, shape, row)
    return out
