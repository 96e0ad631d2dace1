"""Job arrays (Slurm's ``sbatch --array``): the indices a submission asks for, and how the
loop bounds the tasks an array runs at once.

An array is one submission of many tasks that differ only by their index (a sweep over
seeds or hyper-parameters). Each task is a ``Job`` of its own (``Job.array``,
``Job.array_index``): it queues, runs, is preempted and ends like any job, with its index
in its environment (``PORTAL_ARRAY_ID``, ``PORTAL_ARRAY_TASK_ID``; on Slurm each task is
a Slurm job of its own, so Slurm's ``SLURM_ARRAY_*`` are not set).

The spec is Slurm's: indices and ranges separated by commas, a range with an optional
step, and an optional ``%N`` at the end, the most tasks to run at once
(``0-99%10``, ``1,3,5-11:2``, ``0-15%4``). Indices are whole numbers from 0 to
``INDEX_MAX``, at most ``SIZE_MAX`` of them, each once.

The bound (``JobArray.max_running``, Slurm's ``ArrayTaskThrottle``): the snapshot gives
the engine only the array's waiting tasks that fit under it (``throttled``: their order),
counting the tasks that hold GPUs (running, or checkpointing to stop); the others are left
out as held jobs are (no reservation, no quota room, no demand) and the loop writes their
verdict, ``ARRAY_LIMIT`` (Slurm's ``JobArrayTaskLimit``), with a lower bound on their
start: when their places are predicted to open (``estimated_starts``). A task on hold or
waiting for its dependencies takes no place under the bound.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduling.engine import explain
from scheduling.engine import types as et

ARRAY_LIMIT_CODE = "ARRAY_LIMIT"
SIZE_MAX = 1_000  # tasks in one array (Slurm's default MaxArraySize is 1,001 indices)
INDEX_MAX = 99_999
SPEC_MAX = 200  # characters
# The columns of a task the snapshot reads (``snapshot.JOB_FIELDS``; ``throttled`` reads
# ``progress_seconds`` and ``move_to_node`` too).
ARRAY_FIELDS = ("array_id", "array_index", "array__max_running")

_PART = re.compile(r"(?P<first>[0-9]+)(?:-(?P<last>[0-9]+)(?::(?P<step>[0-9]+))?)?")


class ArraySpecError(ValueError):
    """A spec that names no valid set of indices; the message says why, for a person."""


@dataclass(frozen=True)
class ArraySpec:
    """The indices of an array, ascending, and the most tasks to run at once (None: no
    bound)."""

    indices: tuple[int, ...]
    max_running: int | None

    @property
    def text(self) -> str:
        """The spec written back as Slurm writes it: ranges of consecutive indices."""
        runs: list[str] = []
        start = prev = self.indices[0]
        for i in (*self.indices[1:], None):
            if i is not None and i == prev + 1:
                prev = i
                continue
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            if i is not None:
                start = prev = i
        bound = f"%{self.max_running}" if self.max_running is not None else ""
        return ",".join(runs) + bound


def _number(text: str, what: str) -> int:
    if len(text) > 6:
        raise ArraySpecError(f"{what} {text[:12]} is above {INDEX_MAX:,}")
    return int(text)


def parse(spec: str) -> ArraySpec:
    """The indices and bound ``spec`` asks for, or ``ArraySpecError`` saying what is wrong.

    Only ASCII digits, ``,``, ``-``, ``:`` and ``%``: no spaces, signs or other scripts'
    digits (``int`` would read ``٣`` as 3)."""
    if not isinstance(spec, str) or not spec:
        raise ArraySpecError("give the task indices, like 0-99 or 0-99%10")
    if len(spec) > SPEC_MAX:
        raise ArraySpecError(f"at most {SPEC_MAX} characters")
    body, percent, bound_text = spec.partition("%")
    max_running = None
    if percent:
        if not re.fullmatch(r"[0-9]+", bound_text):
            raise ArraySpecError("after % give the most tasks to run at once, like 0-99%10")
        max_running = _number(bound_text, "the bound")
        if max_running < 1:
            raise ArraySpecError("%0 would run no task: give at least %1")
    indices: list[int] = []
    for part in body.split(","):
        m = _PART.fullmatch(part)
        if m is None:
            shown = part[:20] or "an empty part"
            raise ArraySpecError(
                f"{shown!r} is not an index or a range: use 7, 0-99 or 0-99:2, separated by commas"
            )
        first = _number(m["first"], "index")
        last = _number(m["last"], "index") if m["last"] is not None else first
        step = _number(m["step"], "step") if m["step"] is not None else 1
        if first > INDEX_MAX or last > INDEX_MAX:
            raise ArraySpecError(f"indices run from 0 to {INDEX_MAX:,}")
        if last < first:
            raise ArraySpecError(f"{part}: a range runs from low to high")
        if step < 1:
            raise ArraySpecError(f"{part}: a step is at least 1")
        if len(indices) + (last - first) // step + 1 > SIZE_MAX:
            raise ArraySpecError(f"at most {SIZE_MAX:,} tasks in one array")
        indices.extend(range(first, last + 1, step))
    if len(set(indices)) != len(indices):
        seen: set[int] = set()
        twice = next(i for i in indices if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise ArraySpecError(f"index {twice} is asked for twice")
    return ArraySpec(tuple(sorted(indices)), max_running)


@dataclass(frozen=True)
class Throttle:
    """Why one waiting task is left out under its array's bound: the array, its bound, the
    tasks holding GPUs (``running``: ids), the waiting tasks given the other places
    (``placed``: ids, handed to the engine) and how many left-out tasks go before it
    (``before``, in ``throttled``'s order)."""

    array_id: int
    index: int
    max_running: int
    running: tuple[int, ...]
    placed: tuple[int, ...]
    before: int


def throttled(rows: Iterable[Mapping], eligible: Iterable[int]) -> dict[int, Throttle]:
    """The waiting tasks an array's bound leaves out, by job id.

    ``rows``: the active jobs' snapshot rows (``state``, ``id`` and ``ARRAY_FIELDS``);
    ``eligible``: the ids of the waiting jobs the engine would plan (not held, dependencies
    met). Per array with a bound: its tasks holding GPUs take places first, then its
    eligible waiting tasks: first one moving to the room kept for it (consolidation), then
    those with progress kept (preempted, suspended: work under way goes on before new work
    begins), each by index; those past the bound are left out."""
    ready = set(eligible)
    holding: dict[int, list[int]] = {}
    waiting: dict[int, list[tuple[bool, bool, int, int]]] = {}
    bound: dict[int, int] = {}
    for r in rows:
        array, limit = r["array_id"], r["array__max_running"]
        if array is None or limit is None:
            continue
        bound[array] = limit
        if r["state"] != "pending":
            holding.setdefault(array, []).append(r["id"])
        elif r["id"] in ready:
            first = (not r["move_to_node"], not r["progress_seconds"])
            waiting.setdefault(array, []).append((*first, r["array_index"], r["id"]))
    out: dict[int, Throttle] = {}
    for array, tasks in waiting.items():
        running = tuple(sorted(holding.get(array, ())))
        free = max(0, bound[array] - len(running))
        tasks.sort()
        placed = tuple(job_id for *_, job_id in tasks[:free])
        for before, (*_, index, job_id) in enumerate(tasks[free:]):
            out[job_id] = Throttle(array, index, bound[array], running, placed, before)
    return out


ARRAY_LIMIT_REMEDY = (
    "Nothing to do: it starts as the array's tasks end. Its owner or team lead may raise "
    "the bound on the array's page or with gpuctl array-limit."
)


@dataclass(frozen=True)
class Holders:
    """An array's tasks in places after the cycle's plan: those holding GPUs (running, or
    started by the plan) and those given a place that wait for the engine (``to_start``)."""

    holding: tuple[int, ...]
    to_start: int

    @classmethod
    def of(cls, t: Throttle, started: Mapping[int, float | None]) -> Holders:
        holding = (*t.running, *(job_id for job_id in t.placed if job_id in started))
        return cls(holding, len(t.running) + len(t.placed) - len(holding))


# Why a task left out has no estimated start (``explain.NO_ESTIMATE``).
NOT_STARTED = "tasks of its array given a place before it have not started yet"
NO_END = "a task of its array holds GPUs without a predicted end"
NO_RUNTIME = "a task of its array before it has no predicted runtime"


def estimated_starts(
    throttled: Mapping[int, Throttle], runtimes: Mapping[int, float | None],
    ends: Mapping[int, float | None], started: Mapping[int, float | None], now: float,
) -> dict[int, tuple[float | None, str]]:  # fmt: skip
    """When each left-out task's place opens (epoch seconds, to the minute) or why that
    is not known, by job id. Per array, its tasks holding GPUs end at their predicted ends
    (``ends``, ``started``: the plan's starts), and its left-out tasks, in their order,
    each take the first place that opens (there are ``max_running`` places: a bound lowered
    below the tasks running opens one only once enough of them have ended) and hold it for
    their predicted runtime (``runtimes``). A lower bound, as a dependency's: the task then
    still needs the engine to start it (quota, free GPUs)."""
    every = {**ends, **started}
    by_array: dict[int, list[tuple[int, int]]] = {}
    for job_id, t in throttled.items():
        by_array.setdefault(t.array_id, []).append((t.before, job_id))
    out: dict[int, tuple[float | None, str]] = {}
    for tasks in by_array.values():
        tasks.sort()
        first = throttled[tasks[0][1]]
        holders = Holders.of(first, started)
        free_at = [every.get(job_id) for job_id in holders.holding]
        why = NOT_STARTED if holders.to_start else NO_END if None in free_at else ""
        heap = sorted(at for at in free_at if at is not None)  # a sorted list is a heap
        clock = now
        for _, job_id in tasks:
            if why:
                out[job_id] = (None, why)
                continue
            while heap and len(heap) >= first.max_running:
                clock = max(clock, heapq.heappop(heap))
            out[job_id] = (explain.minute_up(clock), "")
            runtime = runtimes.get(job_id)
            if runtime is None:
                why = NO_RUNTIME
            else:
                heapq.heappush(heap, clock + runtime)
    return out


def verdict(
    throttle: Throttle, started: Mapping[int, float | None], estimate: tuple[float | None, str]
) -> et.Verdict:
    """The ``ARRAY_LIMIT`` verdict of a task left out under its array's bound, after the
    cycle's plan (``started``: the jobs the plan starts now; the tasks given places that
    start now hold GPUs too), with its estimated start or why there is none
    (``estimated_starts``)."""
    t = throttle
    holders = Holders.of(t, started)
    holding, to_start = len(holders.holding), holders.to_start
    message = (
        f"Its array {t.array_id} runs at most {explain.count(t.max_running, 'task')} at once: "
        f"{explain.count(holding, 'task')} {explain.verb(holding, 'holds', 'hold')} GPUs"
        + (f", {to_start} more {explain.verb(to_start, 'waits', 'wait')} to start"
           if to_start else "")
        + f", and {explain.count(t.before, 'waiting task')} {explain.verb(t.before, 'goes', 'go')} "
        f"before task {t.index}."
    )  # fmt: skip
    details: dict = {
        "array": t.array_id,
        "array_index": t.index,
        "max_running": t.max_running,
        "tasks_holding_gpus": holding,
        "tasks_waiting_to_start": to_start,
        "tasks_before": t.before,
    }
    at, why = estimate
    if at is not None:
        details["place_opens_at"] = explain.iso(at)
    else:
        details[explain.NO_ESTIMATE] = why
    return et.Verdict(ARRAY_LIMIT_CODE, message, details, ARRAY_LIMIT_REMEDY, estimated_start=at)


def started_ends(
    throttled: Mapping[int, Throttle], starts: Iterable[et.Start],
    pending: Iterable[et.PendingJob], now: float, linked: Iterable[int] = (),
) -> dict[int, float | None]:  # fmt: skip
    """The tasks given places under a bound (``throttled``' ``placed``) and the jobs other
    jobs wait for (``linked``, ``scheduling.dependencies``) that the plan starts now, with
    their predicted ends (None: no prediction): what ``verdict``, ``estimated_starts`` and
    the dependencies' verdicts count as holding GPUs. Only those: no other job is looked at."""
    wanted = {job_id for t in throttled.values() for job_id in t.placed}.union(linked)
    starting = {s.job_id for s in starts if s.job_id in wanted}
    if not starting:
        return {}
    runtime = {job.id: job.predicted_runtime_s for job in pending if job.id in starting}
    return {job_id: now + r if (r := runtime[job_id]) is not None else None for job_id in starting}
