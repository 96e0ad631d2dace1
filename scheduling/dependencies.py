"""Job dependencies (``Job.after``, Slurm's ``--dependency=afterok``): what the loop reads of
them, and the pending reason of a job that waits for others.

A pending job whose ``after`` jobs have not all succeeded is *held*: the snapshot leaves it
out of the engine's pending jobs (``scheduling.snapshot``), so it holds no reservation, no
quota room and counts as no demand; the loop writes its verdict itself, ``DEPENDENCY``
(checked right after ``NEVER_FITS``: a held job the cluster could never run reads that),
with the verdicts. Once they have all succeeded it queues like any other job, from when
the last of them ended (``released_at``: its place in the fair order and its wait count
from then, not from its submission). When one of them ends failed or cancelled, the loop
cancels it (``scheduling.cycle.dependencies``). An array waited for as a whole
(``Job.after_arrays``, Slurm's ``afterok`` on an array job) is read as every one of its
tasks, and its verdict counts them by what they are doing.

Names: a verdict is one text every viewer of the job reads, so it names a dependency
(``job 12 (pretrain-7b)``) only when it is in the job's own business line, whose members
see both; otherwise by its id alone, as other verdicts name jobs (the job page shows each
viewer the names of the jobs they may see).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

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

# The order an array's unmet tasks are counted in: what runs first.
_TASK_ORDER = (
    Job.State.RUNNING, Job.State.PREEMPTING, Job.State.PENDING, Job.State.FAILED,
    Job.State.CANCELLED,
)  # fmt: skip


@dataclass(frozen=True)
class Link:
    """One dependency of a pending job: the job waited for, as the loop reads it. ``array``
    and ``index``: a task waited for as part of its array (``Job.after_arrays``), with the
    array's name in ``name``; None for a job named in ``Job.after``."""

    id: int
    name: str
    state: str
    finished_at: float | None  # epoch seconds
    same_line: bool  # in the waiting job's business line
    array: int | None = None
    index: int | None = None

    def named(self) -> str:
        if self.array is not None:
            return f"task {self.index} of {self.array_named()}"
        return f"job {self.id} ({self.name})" if self.same_line else f"job {self.id}"

    def array_named(self) -> str:
        """``array 42 (sweep)``: its array, by name only in the waiting job's line."""
        return f"array {self.array} ({self.name})" if self.same_line else f"array {self.array}"


@dataclass(frozen=True)
class PendingLinks:
    """The dependencies of the pending jobs that have any: ``unmet`` (those not succeeded,
    by waiting job: the jobs of ``after`` in id order, then the tasks of ``after_arrays`` by
    array and index) and ``released_at`` (jobs whose dependencies all succeeded: when the
    last of them ended)."""

    unmet: dict[int, list[Link]] = field(default_factory=dict)
    released_at: dict[int, float] = field(default_factory=dict)


def read_pending_links() -> PendingLinks:
    """Every dependency of every pending job: one query for the jobs of ``after``, and with
    any ``after_arrays`` two more (the links, then their arrays' tasks). Read after the
    snapshot's job rows, so a job in them has its links too (a submission commits a job with
    its links)."""
    rows = (
        Job.after.through.objects.filter(from_job__state=Job.State.PENDING)
        .order_by("from_job_id", "to_job_id")
        .values_list(
            "from_job_id", "to_job_id", "to_job__name", "to_job__state",
            "to_job__finished_at", "from_job__queue__business_line_id",
            "to_job__queue__business_line_id",
        )
    )  # fmt: skip
    links: dict[int, dict[int, Link]] = {}
    for job_id, dep_id, name, state, finished_at, line, dep_line in rows:
        links.setdefault(job_id, {})[dep_id] = Link(
            dep_id, name, state, to_epoch(finished_at), line == dep_line
        )
    for job_id, link in _array_links(
        Job.after_arrays.through.objects.filter(job__state=Job.State.PENDING).values_list(
            "job_id", "jobarray_id", "job__queue__business_line_id"
        )
    ):
        links.setdefault(job_id, {}).setdefault(link.id, link)  # a task also named by id: once
    unmet: dict[int, list[Link]] = {}
    released: dict[int, float] = {}
    for job_id, by_id in links.items():
        waiting = [link for link in by_id.values() if link.state != Job.State.SUCCEEDED]
        if waiting:
            unmet[job_id] = waiting
        else:
            released[job_id] = max((link.finished_at or 0.0) for link in by_id.values())
    return PendingLinks(unmet, released)


def _array_links(rows: Iterable[tuple[int, int, int]]) -> Iterator[tuple[int, Link]]:
    """``(waiting job, link)`` for every task of the arrays of ``rows`` (``(waiting job,
    array, the waiting job's line)``, in that order), by array and index: one query for the
    tasks, none without rows."""
    rows = sorted(rows)
    if not rows:
        return
    tasks: dict[int, list[tuple]] = {}
    for row in (
        Job.objects.filter(array_id__in={array for _, array, _ in rows})
        .order_by("array_id", "array_index")
        .values_list(
            "array_id", "pk", "array__name", "state", "finished_at",
            "queue__business_line_id", "array_index",
        )
    ):  # fmt: skip
        tasks.setdefault(row[0], []).append(row[1:])
    for job_id, array, line in rows:
        for pk, name, state, finished_at, task_line, index in tasks.get(array, ()):
            yield (
                job_id,
                Link(pk, name, state, to_epoch(finished_at), line == task_line, array, index),
            )


def unmet_links(ids: Sequence[int], line_id: int, array_ids: Sequence[int] = ()) -> list[Link]:
    """The jobs of ``ids`` and the tasks of the arrays ``array_ids`` that have not
    succeeded, as a job of business line ``line_id`` that waits for them reads them (the
    what-if's candidate; a query for each kind named)."""
    rows = (
        Job.objects.filter(pk__in=ids)
        .exclude(state=Job.State.SUCCEEDED)
        .order_by("pk")
        .values_list("pk", "name", "state", "finished_at", "queue__business_line_id")
    )
    links = {
        pk: Link(pk, name, state, to_epoch(finished_at), line == line_id)
        for pk, name, state, finished_at, line in (rows if ids else ())
    }
    for _, link in _array_links((0, array, line_id) for array in array_ids):
        if link.state != Job.State.SUCCEEDED:
            links.setdefault(link.id, link)
    return list(links.values())


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
    shape: ClusterShape, row: Mapping, started: Mapping[int, float | None] | None = None,
) -> et.Verdict:  # fmt: skip
    """The verdict of a held job: ``NEVER_FITS`` when the cluster (``shape``) could never run
    it as asked (``row``: its ``snapshot.JOB_FIELDS``), else ``DEPENDENCY``. ``ends``: the
    running jobs' predicted ends (epoch seconds); ``started``: those of the waiting ones
    that this cycle's plan starts, read as running (``arrays.started_ends``). The
    estimated start is the latest
    predicted end of its unmet dependencies when all of them run with one, else none: a
    lower bound, as it then queues like any other job. The tasks of an array waited for as
    a whole are said together, counted by what they are doing."""
    never = never_fits(job, shape, row)
    if never is not None:
        return never
    started = started or {}
    links = [
        replace(link, state=Job.State.RUNNING) if link.id in started else link for link in links
    ]
    ends = {**ends, **started}
    # the predicted end of each, to the minute (None: not running with one)
    until = {
        link.id: explain.minute_up(end)
        if link.state == Job.State.RUNNING and (end := ends.get(link.id))
        else None
        for link in links
    }
    jobs = [link for link in links if link.array is None]
    by_array: dict[int, list[Link]] = {}
    for link in links:
        if link.array is not None:
            by_array.setdefault(link.array, []).append(link)
    said = [(link.named(), _doing(link, until[link.id])) for link in jobs]
    said += [(tasks[0].array_named(), _tasks_doing(tasks, until)) for tasks in by_array.values()]
    if len(said) == 1:
        message = f"Waits for {said[0][0]} to succeed: {said[0][1]}."
    else:
        kinds = [explain.count(len(jobs), "job")] if jobs else []
        kinds += [explain.count(len(by_array), "array")] if by_array else []
        each = "; ".join(f"{what}: {doing}" for what, doing in said)
        message = f"Waits for {' and '.join(kinds)} to succeed: {each}."
    details: dict = {"waiting_for": [link.id for link in jobs]}
    if by_array:
        details["waiting_for_arrays"] = list(by_array)
    known = [end for end in until.values() if end is not None]
    estimate = max(known) if len(known) == len(links) else None
    if estimate is not None:
        details["dependencies_end_at"] = explain.iso(estimate)
    else:
        first = next(link for link in links if until[link.id] is None)
        what = first.named() if first.array is not None else f"job {first.id}"
        details[explain.NO_ESTIMATE] = f"{what} it waits for is not running with a predicted end"
    return et.Verdict(
        DEPENDENCY_CODE, message, details, DEPENDENCY_REMEDY, estimated_start=estimate
    )


def _doing(link: Link, end: float | None) -> str:
    """What one dependency is doing: ``running, predicted to end 14:47 UTC``."""
    doing = _DOING.get(link.state, link.state)
    return doing + (f", predicted to end {explain.when(end)}" if end is not None else "")


def _tasks_doing(tasks: list[Link], until: Mapping[int, float | None]) -> str:
    """What an array's unmet tasks are doing, counted by state (``_TASK_ORDER``):
    ``3 tasks have not: 2 running, the last predicted to end 14:47 UTC; 1 waiting to
    start``. A task that failed or was cancelled is named (the job is being cancelled)."""
    parts = []
    for state in _TASK_ORDER:
        doing = _DOING[state]
        some = [task for task in tasks if task.state == state]
        if not some:
            continue
        if state in (Job.State.FAILED, Job.State.CANCELLED):
            parts.append(f"task {some[0].index} {doing}")
            continue
        part = f"{len(some):,} {doing}"
        ends = [until[task.id] for task in some]
        if state == Job.State.RUNNING and None not in ends:
            last = "predicted to end" if len(some) == 1 else "the last predicted to end"
            part += f", {last} {explain.when(max(ends))}"  # type: ignore[type-var]
        parts.append(part)
    has = explain.verb(len(tasks), "has", "have")
    return f"{explain.count(len(tasks), 'task')} {has} not: {'; '.join(parts)}"


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
            out[job_id] = verdict(job, links.unmet[job_id], ends, shape, row, started)
    return out
