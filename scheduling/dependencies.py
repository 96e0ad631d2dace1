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
tasks, and its verdict counts them by what they are doing. A job submitted with
``after_condition`` ``ended`` (Slurm's ``afterany``) waits only for them all to end, whatever
the outcome, and is never cancelled for theirs. One submitted with ``failed`` (Slurm's
``afternotok``) waits for them all to end without succeeding (an array: every task to end,
not all of them succeeded), and is cancelled when one succeeds (an array: all its tasks).

Names: a verdict is one text every viewer of the job reads, so it names a dependency
(``job 12 (pretrain-7b)``) only when it is in the job's own business line, whose members
see both; otherwise by its id alone, as other verdicts name jobs (the job page shows each
viewer the names of the jobs they may see).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from django.db.models import Exists, OuterRef, QuerySet

from scheduling import arrays, begin_time, holds, time_limits
from scheduling.clock import to_epoch
from scheduling.engine import explain
from scheduling.engine import types as et
from scheduling.engine.feasibility import ClusterShape
from scheduling.feasibility import refusal_for
from scheduling.models import Job, JobArray

DEPENDENCY_CODE = "DEPENDENCY"
_SUCCEEDED, _ENDED = Job.AfterCondition.SUCCEEDED, Job.AfterCondition.ENDED
_FAILED = Job.AfterCondition.FAILED
# By ``after_condition``: what the verdict says they must do, and its remedy.
_TO = {_SUCCEEDED: "succeed", _ENDED: "end", _FAILED: "end without succeeding"}
DEPENDENCY_REMEDY = {
    _SUCCEEDED: "Nothing to do: it queues like any other job once they have all succeeded, "
    "and is cancelled if one of them fails or is cancelled.",
    _ENDED: "Nothing to do: it queues like any other job once they have all ended, whatever "
    "the outcome.",
    _FAILED: "Nothing to do: it queues like any other job once they have all failed or been "
    "cancelled (an array: once all its tasks ended, not all of them succeeded), and is "
    "cancelled if one of them succeeds (an array: if all its tasks do).",
}
# What a dependency that has not succeeded is doing, in a verdict's words.
_HELD = "held"  # a waiting dependency on hold: what a verdict says of it (``Ends.state``)
_DOING = {
    Job.State.PENDING: "waiting to start",
    Job.State.RUNNING: "running",
    Job.State.PREEMPTING: "checkpointing to stop, then waiting again",
    Job.State.FAILED: "failed (this job is being cancelled)",
    Job.State.CANCELLED: "cancelled (this job is being cancelled)",
    Job.State.SUCCEEDED: "succeeded (this job is being cancelled)",  # waited for to fail
    _HELD: "on hold (it starts only once released)",
}

# The order an array's unmet tasks are counted in: what runs first.
_TASK_ORDER = (
    Job.State.RUNNING, Job.State.PREEMPTING, Job.State.PENDING, _HELD, Job.State.FAILED,
    Job.State.CANCELLED,
)  # fmt: skip


@dataclass(frozen=True)
class Link:
    """One dependency of a pending job: the job waited for, as the loop reads it (a job of
    ``Job.after``, or a task of an array waited for as a whole: ``ArrayLink.unmet``)."""

    id: int
    name: str
    state: str
    finished_at: float | None  # epoch seconds
    same_line: bool  # in the waiting job's business line
    index: int | None = None  # its index, a task of an array
    held: bool = False  # on hold (``scheduling.holds``): it starts only once released

    def named(self) -> str:
        """``job 57 (train)``, a task ``job 57 (train [3])`` as the job list names it; by
        its id alone out of the waiting job's line."""
        if not self.same_line:
            return f"job {self.id}"
        task = "" if self.index is None else f" [{self.index}]"
        return f"job {self.id} ({self.name}{task})"


@dataclass(frozen=True)
class ArrayLink:
    """An array a pending job waits for as a whole (``Job.after_arrays``), as the loop reads
    it: ``unmet``, its tasks that have not done what the jobs' ``after_condition`` asks of
    each (``Job.TASK_MEETS``: succeeded, or ended; by index); ``defeated``, every task
    succeeded, for jobs waiting for its failure (they are being cancelled);
    ``finished_at``, when its last task ended once all have; ``task_ids``, every task's (a
    task also named by id counts once). One object for
    every job of a business line (and condition) waiting for it: a 1,000-task array waited
    for by 1,000 tasks is read once, not a million times."""

    id: int
    name: str
    same_line: bool
    unmet: tuple[Link, ...]
    finished_at: float | None
    task_ids: frozenset[int]
    condition: str = _SUCCEEDED
    defeated: bool = False

    @property
    def waiting(self) -> bool:
        """It has not met the condition: a task has not done its part, or it never will."""
        return bool(self.unmet) or self.defeated

    def named(self) -> str:
        return f"array {self.id} ({self.name})" if self.same_line else f"array {self.id}"


Dependency = Link | ArrayLink


@dataclass(frozen=True)
class PendingLinks:
    """The dependencies of the pending jobs that have any: ``unmet`` (those not succeeded,
    by waiting job: the jobs of ``after`` in id order, then the arrays of ``after_arrays``
    in id order) and ``released_at`` (jobs whose dependencies all succeeded: when the last
    of them ended)."""

    unmet: dict[int, list[Dependency]] = field(default_factory=dict)
    released_at: dict[int, float] = field(default_factory=dict)
    # the ``after_condition`` of the waiting jobs whose is not ``succeeded``
    conditions: dict[int, str] = field(default_factory=dict)

    def condition(self, job_id: int) -> str:
        """What the jobs ``job_id`` waits for must do: succeed, end, or end without
        succeeding."""
        return self.conditions.get(job_id, _SUCCEEDED)

    @cached_property
    def linked(self) -> frozenset[int]:
        """The ids of the jobs (an array's: its unmet tasks) the pending jobs wait for:
        read once, after ``unmet`` is filled (the cycle and the verdicts both ask)."""
        ids: set[int] = set()
        arrays: set[tuple[int, bool, str]] = set()
        for deps in self.unmet.values():
            for dep in deps:
                if isinstance(dep, Link):
                    ids.add(dep.id)
                elif (key := (dep.id, dep.same_line, dep.condition)) not in arrays:  # once
                    arrays.add(key)
                    ids.update(task.id for task in dep.unmet)
        return frozenset(ids)


def arrays_all_succeeded(array_ids: Iterable[int] | QuerySet) -> QuerySet:
    """The ids of those of ``array_ids`` (ids, or a query of them) every task of which
    succeeded (an array without tasks is not among them): what defeats a job waiting for an
    array's failure (``after_condition`` ``failed``). One query when read; an array's first
    task not succeeded settles it (no count of its tasks)."""
    tasks = Job.objects.filter(array_id=OuterRef("pk"))
    return (
        JobArray.objects.filter(pk__in=array_ids)
        .filter(Exists(tasks))
        .exclude(Exists(tasks.exclude(state=Job.State.SUCCEEDED)))
        .order_by("pk")
        .values_list("pk", flat=True)
    )


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
            "to_job__queue__business_line_id", "from_job__after_condition",
            "to_job__array_index", "to_job__held_at",
        )
    )  # fmt: skip
    out = PendingLinks()
    jobs: dict[int, list[Link]] = {}
    for job_id, dep_id, name, state, finished_at, line, dep_line, condition, index, held in rows:
        link = Link(
            dep_id, name, state, to_epoch(finished_at), line == dep_line, index, held is not None
        )
        jobs.setdefault(job_id, []).append(link)
        if condition != _SUCCEEDED:
            out.conditions[job_id] = condition
    array_rows = list(
        Job.after_arrays.through.objects.filter(job__state=Job.State.PENDING)
        .order_by("job_id", "jobarray_id")
        .values_list(
            "job_id", "jobarray_id", "job__queue__business_line_id", "job__after_condition"
        )  # fmt: skip
    )
    read = _array_links({(array, line, condition) for _, array, line, condition in array_rows})
    arrays: dict[int, list[ArrayLink]] = {}
    for job_id, *key in array_rows:
        if key[2] != _SUCCEEDED:
            out.conditions[job_id] = key[2]
        if tuple(key) in read:  # an array without tasks (deleted by hand) holds nothing
            arrays.setdefault(job_id, []).append(read[tuple(key)])  # type: ignore[index]
    for job_id in jobs.keys() | arrays.keys():
        _sort_out(job_id, jobs.get(job_id, []), arrays.get(job_id, []), out)
    return out


def _sort_out(job_id: int, jobs: list[Link], arrays: list[ArrayLink], out: PendingLinks) -> None:
    """File one waiting job's dependencies in ``out``: its unmet ones (by its condition,
    ``out.condition``), or when all have met it the time the last of them ended."""
    if jobs and arrays:  # a task also named by id counts once, in its array
        covered = frozenset().union(*(a.task_ids for a in arrays))
        jobs = [link for link in jobs if link.id not in covered]
    meets = Job.MEETS[out.condition(job_id)]
    waiting: list[Dependency] = [link for link in jobs if link.state not in meets]
    waiting += [array for array in arrays if array.waiting]
    if waiting:
        out.unmet[job_id] = waiting
    else:
        out.released_at[job_id] = max((d.finished_at or 0.0) for d in (*jobs, *arrays))


def _array_links(keys: set[tuple[int, int, str]]) -> dict[tuple[int, int, str], ArrayLink]:
    """The arrays of ``keys`` (``(array, the waiting jobs' line, their after_condition)``)
    as those jobs read them (``Job.TASK_MEETS``; under ``failed`` all its tasks succeeded:
    ``defeated``): one query for their tasks, none without keys."""
    if not keys:
        return {}
    tasks: dict[int, list[tuple]] = {}
    for array, *task in (
        Job.objects.filter(array_id__in={array for array, *_ in keys})
        .order_by("array_id", "array_index")
        .values_list(
            "array_id", "pk", "array__name", "state", "finished_at",
            "queue__business_line_id", "array_index", "held_at",
        )
    ):  # fmt: skip
        tasks.setdefault(array, []).append(task)
    out = {}
    for array, line, condition in keys:
        rows = tasks.get(array, [])
        if not rows:
            continue  # deleted by hand: it holds nothing back
        same_line, meets = rows[0][4] == line, Job.TASK_MEETS[condition]
        unmet = tuple(
            Link(pk, name, state, to_epoch(finished_at), same_line, index, held is not None)
            for pk, name, state, finished_at, _, index, held in rows
            if state not in meets
        )
        ended = None if unmet else max((to_epoch(row[3]) or 0.0) for row in rows)
        ids = frozenset(row[0] for row in rows)
        defeated = condition == _FAILED and all(row[2] == Job.State.SUCCEEDED for row in rows)
        out[array, line, condition] = ArrayLink(
            array, rows[0][1], same_line, unmet, ended, ids, condition, defeated
        )
    return out


def unmet_links(
    job_id: int, ids: Sequence[int], line_id: int, array_ids: Sequence[int] = (),
    condition: str = _SUCCEEDED,
) -> PendingLinks:  # fmt: skip
    """The links of a job ``job_id`` (the what-if's candidate) of business line ``line_id``
    that waits, under ``condition``, for the jobs of ``ids`` and the arrays of
    ``array_ids``: those that have not met it, as the loop reads them (a query for each
    kind named)."""
    rows = (
        Job.objects.filter(pk__in=ids)
        .order_by("pk")
        .values_list(
            "pk", "name", "state", "finished_at", "queue__business_line_id", "array_index",
            "held_at",
        )
    )  # fmt: skip
    jobs = [
        Link(pk, name, state, to_epoch(finished_at), line == line_id, index, held is not None)
        for pk, name, state, finished_at, line, index, held in (rows if ids else ())
    ]
    read = _array_links({(array, line_id, condition) for array in array_ids})
    out = PendingLinks(conditions={job_id: condition} if condition != _SUCCEEDED else {})
    _sort_out(job_id, jobs, [read[key] for key in sorted(read)], out)
    return out


def never_fits(job: et.PendingJob, shape: ClusterShape, row: Mapping) -> et.Verdict | None:
    """``NEVER_FITS`` when the cluster (``shape``) could never run the job as asked
    (``row``: its ``snapshot.JOB_FIELDS``), else None: checked first for every held job."""
    refusal = refusal_for(row, shape)
    if refusal is None:
        return None
    code, message, details, remedy = explain.never_fits(job, refusal.why, refusal.details_dict())
    return et.Verdict(code, message, details, remedy)


@dataclass
class Ends:
    """What a cycle knows of when the jobs waited for end (epoch seconds): ``running``, the
    predicted ends of the running jobs and of those the plan starts now (``started``, read
    as running: ``arrays.started_ends``); ``waiting``, of waiting ones with an estimated
    start (the plan's, the place their array's bound opens, or for one held in turn when
    what it waits for ends), that start plus their predicted runtime: a lower bound.
    ``said``: what was said of each array, kept across the jobs of one cycle."""

    running: Mapping[int, float | None]
    started: Mapping[int, float | None] = field(default_factory=dict)
    waiting: dict[int, float] = field(default_factory=dict)
    said: dict[tuple[int, bool, str], _ArraySaid] = field(default_factory=dict)

    def of(self, link: Link) -> float | None:
        """A dependency's predicted end, to the minute, when it runs (or starts now) with
        one, or waits with an estimated start; else None."""
        if link.state == Job.State.RUNNING or link.id in self.started:
            end = self.running.get(link.id)
        else:
            end = self.waiting.get(link.id) if link.state == Job.State.PENDING else None
        return explain.minute_up(end) if end else None

    def state(self, link: Link) -> str:
        """What it is doing: a job the plan starts now is running; a waiting one on hold,
        held (``_HELD``)."""
        if link.id in self.started:
            return Job.State.RUNNING
        return _HELD if link.held and link.state == Job.State.PENDING else link.state


def verdict(
    job: et.PendingJob, links: Sequence[Dependency], ends: Ends, shape: ClusterShape,
    row: Mapping, condition: str = _SUCCEEDED,
) -> et.Verdict:  # fmt: skip
    """The verdict of a held job: ``NEVER_FITS`` when the cluster (``shape``) could never run
    it as asked (``row``: its ``snapshot.JOB_FIELDS``), else ``DEPENDENCY``. The estimated
    start is the latest predicted end (``ends``) of its unmet dependencies when every one of
    them (every task of an array) has one, else none: a lower bound, as it then queues
    like any other job. An array's tasks are said together, counted by what they are
    doing. ``condition``: the job's ``after_condition`` ("Waits for ... to succeed", or
    "to end")."""
    never = never_fits(job, shape, row)
    if never is not None:
        return never
    jobs = [link for link in links if isinstance(link, Link)]
    groups = [link for link in links if isinstance(link, ArrayLink)]
    until = [ends.of(link) for link in jobs]
    told = [_array_said(group, ends) for group in groups]
    parts = [(link.named(), _doing(link, end, ends)) for link, end in zip(jobs, until, strict=True)]
    parts += [(group.named(), t.doing) for group, t in zip(groups, told, strict=True)]
    to = _TO[condition]
    if len(parts) == 1:
        message = f"Waits for {parts[0][0]} to {to}: {parts[0][1]}."
    else:
        kinds = [explain.count(len(jobs), "job")] if jobs else []
        kinds += [explain.count(len(groups), "array")] if groups else []
        each = "; ".join(f"{what}: {doing}" for what, doing in parts)
        message = f"Waits for {' and '.join(kinds)} to {to}: {each}."
    details: dict = {}
    if jobs or not groups:
        details["waiting_for"] = [link.id for link in jobs]
    if groups:
        details["waiting_for_arrays"] = [group.id for group in groups]
    ends_known = [*until, *(t.last_end for t in told)]
    estimate = None if None in ends_known else max(ends_known, default=None)  # type: ignore[type-var]
    if estimate is not None:
        details["dependencies_end_at"] = explain.iso(estimate)
    else:
        unknown = next((f"job {link.id}" for link, end in zip(jobs, until, strict=True)
                        if end is None), None)  # fmt: skip
        unknown = unknown or next(t.unknown for t in told if t.unknown)
        details[explain.NO_ESTIMATE] = f"{unknown} it waits for has no predicted end"
    if condition != _SUCCEEDED:
        details["after_condition"] = condition
    return et.Verdict(
        DEPENDENCY_CODE, message, details, DEPENDENCY_REMEDY[condition], estimated_start=estimate
    )


# How a predicted end is said: a running job's, and a waiting one's (a lower bound).
_ENDS_AT = {
    Job.State.RUNNING: "predicted to end",
    Job.State.PENDING: "predicted to end at the earliest",
}


def _doing(link: Link, end: float | None, ends: Ends) -> str:
    """What one dependency is doing: ``running, predicted to end 14:47 UTC``."""
    state = ends.state(link)
    doing = _DOING.get(state, state)
    return doing + (f", {_ENDS_AT[state]} {explain.when(end)}" if end is not None else "")


@dataclass(frozen=True)
class _ArraySaid:
    """What a verdict says of an array waited for: what its unmet tasks are doing, the
    latest predicted end when all have one (else None), and the first task without one
    (``task 7 of array 42 (sweep)``, else "")."""

    doing: str
    last_end: float | None
    unknown: str


def _array_said(group: ArrayLink, ends: Ends) -> _ArraySaid:
    """``_ArraySaid`` of ``group``, counted by state (``_TASK_ORDER``): ``3 tasks have not:
    2 running, the last predicted to end 14:47 UTC; 1 waiting to start``. A task that
    failed or was cancelled is named (the job is being cancelled), as is an array every task
    of which succeeded, waited for to fail. Once per array and line a cycle
    (``ends.said``)."""
    key = (group.id, group.same_line, group.condition)
    if key in ends.said:
        return ends.said[key]
    if not group.unmet:  # defeated: every task succeeded, and it waits for their failure
        n = len(group.task_ids)
        every = "its task" if n == 1 else f"all {n:,} tasks"
        ends.said[key] = _ArraySaid(f"{every} succeeded (this job is being cancelled)", None,
                                    group.named())  # fmt: skip
        return ends.said[key]
    timed = [(task, ends.of(task)) for task in group.unmet]
    by_state: dict[str, list[tuple[Link, float | None]]] = {}
    for task, end in timed:
        by_state.setdefault(ends.state(task), []).append((task, end))
    parts = []
    for state in _TASK_ORDER:
        some = by_state.get(state)
        if not some:
            continue
        if state in (Job.State.FAILED, Job.State.CANCELLED):
            parts.append(f"task {some[0][0].index} {_DOING[state]}")
            continue
        part = f"{len(some):,} {_DOING[state]}"
        some_ends = [end for _, end in some]
        if state in _ENDS_AT and None not in some_ends:
            last = "" if len(some) == 1 else "the last "
            part += f", {last}{_ENDS_AT[state]} {explain.when(max(some_ends))}"  # type: ignore[type-var]
        parts.append(part)
    n = len(group.unmet)
    doing = f"{explain.count(n, 'task')} {explain.verb(n, 'has', 'have')} not: {'; '.join(parts)}"
    no_end = next((task for task, end in timed if end is None), None)
    last_end = None if no_end is not None else max(end for _, end in timed)  # type: ignore[type-var]
    unknown = f"task {no_end.index} of {group.named()}" if no_end is not None else ""
    ends.said[key] = _ArraySaid(doing, last_end, unknown)
    return ends.said[key]


def held_verdicts(
    held: Mapping[int, et.PendingJob], links: PendingLinks, snapshot: et.Snapshot,
    rows: Mapping[int, Mapping], throttled: Mapping[int, arrays.Throttle] | None = None,
    started: Mapping[int, float | None] | None = None, now: float = 0.0,
    estimates: Mapping[int, float | None] | None = None,
    waiting_runtimes: Mapping[int, float | None] | None = None,
    bounded: Mapping[int, tuple[str, int]] | None = None,
    begins: Mapping[int, float] | None = None,
) -> dict[int, et.Verdict]:  # fmt: skip
    """The verdicts of the snapshot's held jobs, by job id: ``NEVER_FITS`` first, then
    ``HELD`` for a job on hold (``scheduling.holds``), ``QUEUE_TIME_LIMIT`` for one whose time
    limit is above its queue's now (``bounded``: the queue's name and max,
    ``scheduling.time_limits``), ``BEGIN_TIME`` for one asked to start later (``begins``:
    its earliest start, ``scheduling.begin_time``; one that also waits for others reads
    ``DEPENDENCY``, its estimated start no earlier), ``ARRAY_LIMIT`` for a task past its
    array's bound (``throttled``, ``scheduling.arrays``; ``started``: the jobs the cycle's
    plan starts, with their predicted ends; ``now``: the cycle's time, from which the
    tasks' places are predicted to open: ``arrays.estimated_starts``), else ``DEPENDENCY``
    (``verdict``; ``estimates``: the plan's estimated starts of the waiting jobs others
    wait for; ``waiting_runtimes``: their predicted runtimes, read from the snapshot's
    pending and held jobs when not given)."""
    throttled, started, bounded = throttled or {}, started or {}, bounded or {}
    begins = begins or {}
    if not held:
        return {}
    ends = {run.id: run.predicted_end for run in snapshot.running if run.state == et.RUNNING}
    runtimes = {job_id: held[job_id].predicted_runtime_s for job_id in throttled}
    places = arrays.estimated_starts(throttled, runtimes, ends, started, now)
    waiting = _waiting_ends(links, estimates or {}, places, waiting_runtimes, snapshot, held)
    known = Ends({**ends, **started}, started, waiting)
    shape = ClusterShape.of_nodes(snapshot.nodes)
    out = {}
    # In id order: a job waits only for jobs older than itself (they existed when it was
    # submitted), so a dependency held in turn has its verdict, and with it its predicted
    # end, before the jobs that wait for it are said: a chain of any depth has an estimate.
    for job_id in sorted(held):
        job, row = held[job_id], rows[job_id]
        if holds.is_held(row):
            out[job_id] = never_fits(job, shape, row) or holds.verdict(row)
        elif job_id in bounded:
            out[job_id] = never_fits(job, shape, row) or time_limits.queue_verdict(
                row["time_limit_minutes"], *bounded[job_id]
            )
        elif job_id in throttled:
            out[job_id] = never_fits(job, shape, row) or arrays.verdict(
                throttled[job_id], started, places[job_id]
            )
        elif job_id in links.unmet:
            said = verdict(job, links.unmet[job_id], known, shape, row, links.condition(job_id))
            out[job_id] = _not_before(said, begins.get(job_id))
            _chain_end(job_id, out[job_id], known, links, waiting_runtimes or {}, job)
        else:
            out[job_id] = never_fits(job, shape, row) or begin_time.verdict(begins[job_id])
    return out


def _not_before(said: et.Verdict, begin: float | None) -> et.Verdict:
    """A ``DEPENDENCY`` verdict of a job also asked to start later (``begin``, epoch
    seconds): its estimated start no earlier than that, the time in its details."""
    if begin is None or said.code != DEPENDENCY_CODE:
        return said
    estimate = said.estimated_start
    details = {**said.details, "begin_at": explain.iso(begin)}
    if estimate is not None and estimate < begin:
        estimate = begin
    return replace(said, details=details, estimated_start=estimate)


def _chain_end(
    job_id: int, said: et.Verdict, known: Ends, links: PendingLinks,
    runtimes: Mapping[int, float | None], job: et.PendingJob,
) -> None:  # fmt: skip
    """A held job others wait for, with an estimated start (when its own dependencies end at
    the earliest): its predicted end at the earliest, that start plus its predicted runtime,
    added to ``known.waiting`` for the jobs after it."""
    if job_id not in links.linked or said.estimated_start is None:
        return
    runtime = runtimes.get(job_id, job.predicted_runtime_s)
    if runtime is not None:
        known.waiting[job_id] = said.estimated_start + runtime


def _waiting_ends(
    links: PendingLinks, estimates: Mapping[int, float | None],
    places: Mapping[int, tuple[float | None, str]], runtimes: Mapping[int, float | None] | None,
    snapshot: et.Snapshot, held: Mapping[int, et.PendingJob],
) -> dict[int, float]:  # fmt: skip
    """The predicted ends of the waiting jobs others wait for that have an estimated start
    (``estimates``, or the ``places`` their array's bound opens): that start plus their
    predicted runtime (``runtimes``, else the snapshot's pending or ``held`` job's), by job
    id. Only those jobs are looked at."""
    linked = links.linked
    starts = {job_id: at for job_id, at in estimates.items() if at is not None and job_id in linked}
    starts.update(
        (job_id, at) for job_id, (at, _) in places.items() if at is not None and job_id in linked
    )
    if not starts:
        return {}
    if runtimes is None:
        jobs = [job for job in snapshot.pending if job.id in starts]
        jobs += [job for job_id, job in held.items() if job_id in starts]
        runtimes = {job.id: job.predicted_runtime_s for job in jobs}
    return {
        job_id: at + runtime
        for job_id, at in starts.items()
        if (runtime := runtimes.get(job_id)) is not None
    }
