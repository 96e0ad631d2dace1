"""An estimated start for every job blocked for capacity, not only the reserved ones (V1).

Only the first ``max_reservations`` jobs blocked for capacity reserve nodes, and a
reservation's start is their estimate. Before session 34 every other such job read "no
estimate": on the Philly replay (640 GPUs, ``full``) that was 96% of the time jobs
waited (``replay.start_estimates``), when a researcher asks first "when?".

The line's estimate counts GPUs, not places: per class of nodes the job may use, the
GPUs free once this plan's starts are placed, and the GPUs the running work (and the
work this plan starts) releases at its predicted end (the backfill timeline's events),
are handed to the blocked jobs in the plan's order, each when enough have come for it;
each then runs for its predicted runtime and gives its GPUs back. A job's estimate is
when its turn comes. A reserved job keeps its reservation's start and takes its GPUs in its
turn, and no job starts before a placement of its shape opens up on the nodes not reserved
(the backfill timeline's search, once per shape), or if none ever does, on the reserved ones
as well: a job blocked for its topology waits for whole nodes, not for a count of GPUs. Work arriving later ahead of it is not foreseen, and
the GPUs of the jobs ahead are counted, not placed, so the estimate is rougher than a
reservation's; the replay measures both. A job blocked now is not estimated to start
before the next release.

Only jobs on part of one node waiting for GPUs to be released (``INSUFFICIENT_GPUS``,
``PRIORITY``) get it: on the replay, the line's estimates of jobs of whole nodes and of jobs
blocked by where the GPUs are (``TOPOLOGY``) were hours early (small jobs wait, or are
backfilled, around them), so those keep "no estimate" until they reserve.

A job waiting for quota room that may borrow, and found no idle capacity that fits it now
or is refused only by a cool-down, is in the same line after the jobs within quota (the
plan's borrowing pass comes after them), in the plan's order. Its turn is when it is
predicted to find GPUs to borrow (``QuotaRoom.borrow_at``), not before its cool-downs end
(``Borrowing.cooled_from``); it is its estimate if it comes before its own quota room
(``QuotaRoom.finish``, ``details.estimate_basis`` "borrowing"). Before session 37 such a
job was told only its quota room's turn, the latest it waits: on the ITP replay the jobs
waiting for quota started a median 54 minutes before the estimate shown, those of the
experiment tier (which borrow) 6.6 hours before it.

It changes no decision: only the verdicts' ``estimated_start`` of jobs that had none
because of the reservation limit, and of the borrowers above.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import explain
from .placement import ClassKey
from .policy import job_runtime
from .types import Code, PendingJob

# the codes whose jobs the line estimates: those waiting for GPUs to be released, not for
# them to come together (TOPOLOGY)
ESTIMATED = frozenset({Code.INSUFFICIENT_GPUS, Code.PRIORITY})

# ``details[ESTIMATE_BASIS]`` of a verdict whose estimate is the line's, not a reservation's
ESTIMATE_BASIS = "estimate_basis"
LINE = "line"
BORROWING = "borrowing"  # a job waiting for quota room: its turn to borrow in the line

if TYPE_CHECKING:
    from .blocked import BlockedJob
    from .planner import Planner, ShapeT


def estimate_the_line(p: Planner) -> None:
    """Give the line's estimate (the module's rule) to each job on part of a node blocked
    for GPUs that has no estimate only because of the reservation limit."""
    no_res = explain.NO_RESERVATION.format(n=p.policy.max_reservations)
    by_key: dict[ClassKey, list[BlockedJob]] = {}
    wanted: set[ClassKey] = set()
    for b in p.blocked.jobs:
        rec = p.records.get(b.job.id)
        if rec is None or rec[0][0] == Code.QUOTA_EXCEEDED:
            continue  # it waits for quota now: its estimate is the quota room's
        by_key.setdefault(b.shape[0], []).append(b)
        if _wants(p, b, rec[0][0], no_res):
            wanted.add(b.shape[0])
    borrowers: dict[ClassKey, list[tuple[PendingJob, ShapeT]]] = {}
    for job in p.quota.borrowers:
        sh = p.shape(job)
        if _may_borrow_later(p, job, sh):
            borrowers.setdefault(sh[0], []).append((job, sh))
    # every blocked job of the class is in its line; some want a date
    for key in wanted | borrowers.keys():
        _estimate(p, key, by_key.get(key, []), no_res, borrowers.get(key, []))


def _may_borrow_later(p: Planner, job: PendingJob, sh: ShapeT) -> bool:
    """Whether the borrower ``job`` (``QuotaRoom.borrowers``: no rule but a cool-down
    refused it) gets a turn in the line: it still waits for quota room, on part of one
    node."""
    rec = p.records.get(job.id)
    _key, k, c, _last, excl = sh
    return (
        rec is not None
        and rec[0][0] == Code.QUOTA_EXCEEDED
        and k == 1
        and not excl
        and c < p.topo.max_gpus
    )


def _wants(p: Planner, b: BlockedJob, code: str, no_res: str) -> bool:
    """Whether ``b`` gets the line's estimate: no estimate only for the reservation limit,
    waiting for GPUs to be released, on part of one node."""
    _key, k, c, _last, excl = b.shape
    return (
        b.est is None
        and b.no_estimate == no_res
        and code in ESTIMATED
        and k == 1
        and not excl
        and c < p.topo.max_gpus
    )


def _estimate(
    p: Planner,
    key: ClassKey,
    line: Sequence[BlockedJob],
    no_res: str,
    borrowers: Sequence[tuple[PendingJob, ShapeT]],
) -> None:
    """The turns of the class's line: its blocked jobs, then its borrowers."""
    elig = p.elig_ready(key)
    free = sum(f for f, e in zip(p.live.nfree, elig, strict=True) if e)
    tl = p.timeline()
    voided = tl.voided
    releases = [(t, g) for t, n, g, tag in tl.ordered() if elig[n] and tag not in voided]
    given = _turns(
        p.now,
        free,
        releases,
        [(b.job.gpus, b.est, job_runtime(b.job, p.policy)) for b in line]
        + [(job.gpus, None, job_runtime(job, p.policy)) for job, _sh in borrowers],
    )
    first_release = next((t for t, _g in releases if t > p.now), None)
    per_job = key[2] and bool(p.where.rise)  # the inference forecast reads the job's end
    placed: dict[ShapeT, float | None] = {}  # per shape: when a placement opens up

    def opens(job: PendingJob, shape: ShapeT) -> float | None:
        if per_job or shape not in placed:
            got = p.earliest_start(job, shape) or p.earliest_start(job, shape, reserved_too=True)
            placed[shape] = None if got is None else got[0]
        return placed[shape]

    def estimate(turn: float, at: float, not_before: float = p.now) -> float | None:
        est = max(turn, at, not_before)
        return first_release if est <= p.now else est  # blocked now: not before a release

    for (job, sh), turn in zip(borrowers, given[len(line) :], strict=True):
        at = None if turn is None else opens(job, sh)
        if turn is None or at is None:
            continue
        est = estimate(turn, at, p.borrowing.cooled_from(job))
        if est is not None:
            p.quota.borrow_at[job.id] = est
    for b, turn in zip(line, given[: len(line)], strict=True):
        (code, msg, details, remedy), _ = p.records[b.job.id]
        if turn is None or not _wants(p, b, code, no_res):
            continue
        details = {k: v for k, v in details.items() if k != explain.NO_ESTIMATE}
        at = opens(b.job, b.shape)
        if at is None:  # not even once all running work has ended as predicted
            details[explain.NO_ESTIMATE] = explain.NO_PLACEMENT_AHEAD
            p.records[b.job.id] = ((code, msg, details, remedy), None)
            continue
        est = estimate(turn, at)
        if est is not None:
            details[ESTIMATE_BASIS] = LINE
            p.records[b.job.id] = ((code, msg, details, remedy), est)


def _turns(
    now: float,
    free: int,
    releases: Sequence[tuple[float, int]],
    line: Sequence[tuple[int, float | None, float]],
) -> list[float | None]:
    """When each job of ``line`` (GPUs, reserved start or None, runtime), in order, gets
    its GPUs: ``free`` now, then ``releases`` (time, GPUs; sorted) and what the jobs
    before it give back at their end. None once a job never gets enough (and for every
    job after it: the line keeps its order)."""
    out: list[float | None] = []
    back: list[tuple[float, int]] = []  # the line's own jobs ending: (time, GPUs)
    i, t = 0, now
    for gpus, reserved, runtime in line:
        while free < gpus:
            nxt = releases[i][0] if i < len(releases) else None
            if back and (nxt is None or back[0][0] < nxt):
                at, g = heapq.heappop(back)
            elif nxt is not None:
                at, g = releases[i]
                i += 1
            else:
                return out + [None] * (len(line) - len(out))
            t = max(t, at)
            free += g
        start = t if reserved is None else max(t, reserved)
        out.append(start)
        free -= gpus
        heapq.heappush(back, (start + runtime, gpus))
    return out
