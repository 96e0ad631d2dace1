"""The plan's quota room: how far a job is over its queue's or line's quota, when the room
it lacks is predicted, and the room overdue jobs hold or claim (Q4, #19).

``Planner`` keeps the GPUs each queue and line holds within quota as the plan goes
(``nb_queue`` / ``nb_line``, this plan's starts and preemptors' claims included); this
part of the plan reads them:

- ``short``: the GPUs a job would take over its queue's / line's quota if it started now
  without borrowing, its victims' share already released.
- ``reason`` / ``finish``: ``QUOTA_EXCEEDED`` and its one estimated start. Once the plan
  has placed what it starts, ``finish`` plays each scope's room forward
  (``quota_turns.first_fit``): the room its running work, this plan's starts and
  preemptors give back goes to the jobs given ``QUOTA_EXCEEDED`` in the plan's order, each
  one it fits, and each gives it back after its predicted runtime. Before session 33 the
  estimate ignored the other waiting jobs: the 2,356th job waiting for a line's room read
  "starts in 5 min", when the line's next job would end; from session 33 to 35 the jobs
  ahead kept the room for ever, so most jobs of a long line read "no estimate".
- ``hold`` / ``claim_overdue`` / ``held``: the starvation bound's quota side. An overdue
  job over quota holds its scope's room as a reservation holds nodes; one within quota but
  waiting for nodes claims the room it will need from its reservation's start; later jobs
  of the scope read ``PRIORITY`` unless predicted to end before the room is due.
- ``claim_for``: a preemptor counts as holding the room it preempted for, so later jobs of
  its queue or line cannot take it while the victims checkpoint.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence
from heapq import merge
from typing import TYPE_CHECKING, Any

from . import explain
from .borrowing import BORROW_REFUSED, refused_reason
from .line_estimate import BORROWING, ESTIMATE_BASIS
from .policy import job_runtime, running_end
from .quota_turns import first_fit
from .types import Code, PendingJob, RunningJob

if TYPE_CHECKING:
    from .planner import Planner

Scope = tuple[str, str]  # ("queue" | "line", name)

_INF = math.inf


class QuotaRoom:
    """One plan's view of quota room: shortfalls, predicted room, holds and claims."""

    def __init__(self, planner: Planner) -> None:
        self.p = planner
        # quota room held for overdue jobs (``hold``): scope -> (holder, room at)
        self.holds: dict[Scope, tuple[int, float | None]] = {}
        # ... and claimed by overdue jobs waiting for capacity (``claim_overdue``):
        # scope -> (holder, its GPUs, its reservation's start)
        self.claims: dict[Scope, tuple[int, int, float | None]] = {}
        # GPUs of the jobs given QUOTA_EXCEEDED so far, per scope: the room a later job of
        # the scope waits for comes after theirs (``reason``)
        self.waiting: dict[Scope, int] = {}
        # ... and those jobs, in the plan's order (``finish`` gives them their turns)
        self._in_line: dict[Scope, dict[int, PendingJob]] = {}
        # job -> what its QUOTA_EXCEEDED reason was given (short_q, note, reserved_at,
        # holds, GPUs ahead), to say it again with its turn (``finish``)
        self._asked: dict[int, tuple[int, str, float | None, bool, int]] = {}
        # (when, GPUs) this plan's preemptors take (< 0) and give back, per scope
        self._claimed_ends: dict[Scope, list[tuple[float, int]]] = {}
        self._release_curves: dict[Scope, list[tuple[int, float]]] = {}
        self._release_steps: dict[Scope, list[tuple[float, int]]] = {}
        # (end, GPUs) of the jobs this plan starts within quota, per scope
        self._started_ends: dict[Scope, list[tuple[float, int]]] = {}
        # jobs over quota that may borrow but found no idle capacity that fits them now (or
        # were refused only by a cool-down), in the plan's order; and when each is predicted
        # to find some (line_estimate.py)
        self.borrowers: list[PendingJob] = []
        self.borrow_at: dict[int, float] = {}

    # -- how far over --------------------------------------------------------------
    def short(self, job: PendingJob, leaving: tuple[RunningJob, ...]) -> tuple[int, int]:
        """GPUs over the queue / line quota if the job started now without borrowing
        (``leaving``: victims of this job that will have released their share)."""
        p = self.p
        short_q = short_l = 0
        q = p.queues.get(job.queue)
        if q is not None and q.quota_gpus is not None:
            held = p.nb_queue.get(job.queue, 0) - self._released(leaving, "queue", job.queue)
            short_q = max(0, held + job.gpus - q.quota_gpus)
        line = p.lines.get(job.line)
        if line is not None and line.quota_gpus is not None:
            held = p.nb_line.get(job.line, 0) - self._released(leaving, "line", job.line)
            short_l = max(0, held + job.gpus - line.quota_gpus)
        return short_q, short_l

    def _released(self, leaving: tuple[RunningJob, ...], scope: str, name: str) -> int:
        """The GPUs within quota that ``leaving`` jobs of the scope give back (a moved job
        comes back: the room it holds stays its own)."""
        if not leaving:
            return 0
        borrowed = self.p.usage.borrowed_ids
        return sum(
            v.gpus
            for v in leaving
            if (v.queue if scope == "queue" else v.line) == name
            and v.id not in borrowed
            and not v.migrating
        )

    def quota_and_held(self, scope: str, name: str) -> tuple[int | None, int]:
        """A queue's or line's quota and the GPUs it holds within it (this plan's starts
        included)."""
        p = self.p
        if scope == "queue":
            return p.queues[name].quota_gpus, p.nb_queue.get(name, 0)
        return p.lines[name].quota_gpus, p.nb_line.get(name, 0)

    # -- when the room comes -------------------------------------------------------
    def reason(
        self,
        job: PendingJob,
        short_q: int,
        note: str,
        reserved_at: float | None = None,
        holds: bool = False,
    ) -> tuple[explain.Reason, float | None]:
        """QUOTA_EXCEEDED. An overdue job that ``holds`` the room is first: its estimated
        start is when the room is predicted (or, ``reserved_at``, when the nodes reserved
        for it from later free). Every other job is worded, with its estimate, at the end of
        the plan, once all the scope's waiting jobs are known (``finish``); until then its
        verdict carries only the code and the scope, all the plan reads of it."""
        scope, name = ("queue", job.queue) if short_q > 0 else ("line", job.line)
        ahead = 0 if holds else self.waiting.get((scope, name), 0)
        self._asked[job.id] = (short_q, note, reserved_at, holds, ahead)
        if holds:
            return self._reason(job, short_q, note, reserved_at, ahead, self.room(job, short_q))
        return (Code.QUOTA_EXCEEDED, "", {"scope": scope, "name": name}, ""), None

    def _reason(
        self,
        job: PendingJob,
        short_q: int,
        note: str,
        reserved_at: float | None,
        ahead: int,
        room_at: float | None,
        borrow_at: float | None = None,
    ) -> tuple[explain.Reason, float | None]:
        """The job's QUOTA_EXCEEDED reason and estimate: when it is predicted to borrow
        (``borrow_at``, given only when that comes before its room; a borrower reserves no
        nodes), else the later of its room and the nodes it reserved."""
        scope, name = ("queue", job.queue) if short_q > 0 else ("line", job.line)
        quota, held = self.quota_and_held(scope, name)
        assert quota is not None
        if reserved_at is not None and (room_at is None or reserved_at <= room_at):
            reserved_at = None  # the room comes last: it is the estimate
        reason = explain.quota_exceeded(
            job, scope, name, held, quota, note, room_at, reserved_at, ahead, borrow_at
        )
        if borrow_at is not None:
            reason[2][ESTIMATE_BASIS] = BORROWING
            return reason, borrow_at
        return reason, reserved_at if reserved_at is not None else room_at

    def counted(self, job: PendingJob, details: dict[str, Any]) -> None:
        """``job`` now reads QUOTA_EXCEEDED (``details``' scope): later jobs of that scope
        wait for the room after its GPUs, and ``finish`` gives it its turn."""
        key = (details["scope"], details["name"])
        self.waiting[key] = self.waiting.get(key, 0) + job.gpus
        self._in_line.setdefault(key, {})[job.id] = job

    def finish(self) -> None:
        """The estimates of the jobs waiting for quota room, once the plan has placed
        everything it starts: per scope, when ``quota_turns.first_fit`` hands each its room
        (an overdue job holding the room keeps its own estimate, and goes first). Each is
        told again with the scope's use after the plan, so all of a scope's jobs read the
        same numbers."""
        p = self.p
        for (scope, name), jobs in self._in_line.items():
            quota, held = self.quota_and_held(scope, name)
            if quota is None:
                continue
            waits = [j for j in jobs.values() if self._still_waits(j)]
            fits = [j for j in waits if j.gpus <= quota]
            starts = first_fit(
                quota - held,
                self._releases((scope, name)),
                [(j.gpus, job_runtime(j, p.policy)) for j in fits],
                p.now,
            )
            turn = {j.id: t for j, t in zip(fits, starts, strict=True)}
            for job in waits:
                short_q, note, reserved_at, holds, ahead = self._asked[job.id]
                if holds:
                    continue  # its own estimate stands: the room it holds
                room_at = turn.get(job.id)  # None: the room never comes (or is too small)
                borrow_at = self.borrow_at.get(job.id) if job.gpus <= quota else None
                if borrow_at is not None and room_at is not None and borrow_at >= room_at:
                    borrow_at = None  # its room comes first: that is the estimate
                reason, est = self._reason(
                    job, short_q, note, reserved_at, ahead, room_at, borrow_at
                )
                refused = p.records[job.id][0][2].get(BORROW_REFUSED)
                if refused is not None:
                    reason = refused_reason(reason, refused)
                p.record(job, reason, est)

    def _still_waits(self, job: PendingJob) -> bool:
        rec = self.p.records.get(job.id)
        return rec is not None and rec[0][0] == Code.QUOTA_EXCEEDED

    def _releases(self, ck: Scope) -> Iterator[tuple[float, int]]:
        """``(when, GPUs)`` the scope's running work (and this plan's starts within quota
        and preemptors) gives back, in time order."""
        steps = self._steps_of(ck)
        return merge(steps, self._started_ends.get(ck, []), self._claimed_ends.get(ck, []))

    def _steps_of(self, ck: Scope) -> list[tuple[float, int]]:
        """``(when, GPUs)`` each of the scope's running jobs within quota releases."""
        steps = self._release_steps.get(ck)
        if steps is None:
            curve = self._curve(*ck)
            steps = [(t, g) for (_c, t), g in zip(curve, _steps(curve), strict=True)]
            self._release_steps[ck] = steps
        return steps

    def room(self, job: PendingJob, short_q: int) -> float | None:
        """When running work of the scope ``job`` is short in is predicted to release the
        room it lacks, whoever else waits (what an overdue job's hold waits for); None if
        never (or it exceeds the quota)."""
        scope, name = ("queue", job.queue) if short_q > 0 else ("line", job.line)
        quota, held = self.quota_and_held(scope, name)
        if quota is None or job.gpus > quota:
            return None
        return self._room_at(scope, name, held + job.gpus - quota)

    def _room_at(self, scope: str, name: str, need: int) -> float | None:
        """When running work of this queue/line is predicted to release ``need`` GPUs."""
        ck = (scope, name)
        curve = self._curve(scope, name)
        started = self._started_ends.get(ck)
        if not started:
            i = bisect_left(curve, (need, -_INF))
            return curve[i][1] if i < len(curve) else None
        # Jobs started by this plan release their share too (as the next plan sees them).
        cum = 0
        for t, g in merge(self._steps_of(ck), started):
            cum += g
            if cum >= need:
                return t
        return None

    def _curve(self, scope: str, name: str) -> list[tuple[int, float]]:
        """``(GPUs released so far, when)`` by the scope's running work within quota, in
        time order."""
        ck = (scope, name)
        curve = self._release_curves.get(ck)
        if curve is None:
            p = self.p
            borrowed = p.usage.borrowed_ids
            ends = sorted(
                (running_end(r, p.now, p.policy), r.gpus)
                for r in p.s.running
                if r.id not in borrowed and (r.queue if scope == "queue" else r.line) == name
            )
            cum = 0
            curve = []
            for t, g in ends:
                cum += g
                curve.append((cum, t))
            self._release_curves[ck] = curve
        return curve

    def started(self, job: PendingJob, end: float) -> None:
        """``job`` starts within quota, predicted to end at ``end``: it releases its share
        of its queue's and line's room then."""
        for ck in (("queue", job.queue), ("line", job.line)):
            insort(self._started_ends.setdefault(ck, []), (end, job.gpus))

    def claim_for(self, job: PendingJob, victims: Sequence[RunningJob]) -> None:
        """A preemptor counts on quota room: what its victims free, plus the room left now.
        Count the latter as held from now on, so no later job of its queue or line takes
        it while the victims checkpoint (and the preemptor reads QUOTA_EXCEEDED after all)."""
        p = self.p
        borrowed = p.usage.borrowed_ids
        # moved jobs (consolidation) come back: the room they hold stays theirs
        entitled = [v for v in victims if v.id not in borrowed and not v.migrating]
        freed_q = sum(v.gpus for v in entitled if v.queue == job.queue)
        freed_l = sum(v.gpus for v in entitled if v.line == job.line)
        p.nb_queue[job.queue] = p.nb_queue.get(job.queue, 0) + max(0, job.gpus - freed_q)
        p.nb_line[job.line] = p.nb_line.get(job.line, 0) + max(0, job.gpus - freed_l)
        # for the turns (``finish``): the preemptor takes what its victims release once they
        # stop (about a grace period from now) and gives its GPUs back after its runtime
        start = p.now + p.policy.grace_seconds
        end = start + job_runtime(job, p.policy)
        for ck, freed in ((("queue", job.queue), freed_q), (("line", job.line), freed_l)):
            taken = self._claimed_ends.setdefault(ck, [])
            insort(taken, (start, -min(freed, job.gpus)))
            insort(taken, (end, job.gpus))

    # -- room held and claimed for overdue jobs (#19) ----------------------------------
    def _overdue(self, job: PendingJob) -> bool:
        p = self.p
        return p.policy.hold_quota_when_overdue and job.submitted_at <= p.overdue_since

    def hold(self, job: PendingJob, short_q: int, room_at: float | None) -> bool:
        """An overdue job over quota holds its queue's (or line's) quota room: as a
        reservation holds nodes, later jobs of that scope start within quota only if
        predicted to end before the room is due (``held``). Without it, a tenant's small
        jobs take every GPU of quota released before a large one fits (ITP). An overdue job
        that will start by a quota swap (``QuotaSwap.overdue_first``) holds it from its
        reservation's start, against later work a swap could not displace: such work would
        take the room the swap counts on. True if ``job`` holds it (an older overdue job of
        the scope may already)."""
        if not self._overdue(job):
            return False
        scope, name = ("queue", job.queue) if short_q else ("line", job.line)
        if job.gpus > (self.quota_and_held(scope, name)[0] or 0):
            return False  # larger than the whole quota: it never starts, holds nothing
        return self.holds.setdefault((scope, name), (job.id, room_at))[0] == job.id

    def claim_overdue(self, job: PendingJob, start_at: float | None) -> None:
        """An overdue job within quota but waiting for capacity claims its queue's and
        line's quota room from its reservation's start: the reservation keeps its nodes,
        this keeps the quota it will need there. Without it a later job of its line could
        start on other nodes, fill the quota, and the overdue job, its nodes free at last,
        would wait again for that job to end (Hypothesis found this, session 31)."""
        if not self._overdue(job):
            return
        p = self.p
        q = p.queues.get(job.queue)
        if q is not None and q.quota_gpus is not None:
            self.claims.setdefault(("queue", job.queue), (job.id, job.gpus, start_at))
        line = p.lines.get(job.line)
        if line is not None and line.quota_gpus is not None:
            self.claims.setdefault(("line", job.line), (job.id, job.gpus, start_at))

    def held(self, job: PendingJob) -> explain.Reason | None:
        """PRIORITY if an overdue job of this queue or line holds its quota room, or has
        claimed the room ``job`` would take from it, and ``job`` is not predicted to end
        before the room is due."""
        if not self.holds and not self.claims:
            return None
        p = self.p
        end = None
        for key in (("queue", job.queue), ("line", job.line)):
            blocker = self._held_by(job, key) or self._claimed_by(job, key)
            if blocker is None:
                continue
            holder, room_at = blocker
            if end is None:
                end = p.now + job_runtime(job, p.policy)
            if room_at is not None and end <= room_at:
                continue
            return explain.quota_held(job, key[0], key[1], holder, room_at)
        return None

    def _held_by(self, job: PendingJob, key: Scope) -> tuple[int, float | None] | None:
        """``(holder, room at)`` of another overdue job holding ``key``'s quota room."""
        got = self.holds.get(key)
        if got is None or got[0] == job.id:
            return None
        if got[0] in self.p.swap.overdue and self.p.can_borrow(job):
            return None  # work a swap may displace leaves the swapper's cover as it was
        return got

    def _claimed_by(self, job: PendingJob, key: Scope) -> tuple[int, float | None] | None:
        """``(holder, its start)`` of another overdue job that claimed ``key``'s room, if
        ``job`` starting now would leave the scope less than the holder's GPUs."""
        claim = self.claims.get(key)
        if claim is None or claim[0] == job.id:
            return None
        holder, gpus, start_at = claim
        quota, held = self.quota_and_held(*key)
        if quota is None or held + job.gpus + gpus <= quota:
            return None
        return holder, start_at


def _steps(curve: list[tuple[int, float]]) -> list[int]:
    """GPUs released at each point of a cumulative release curve."""
    out, prev = [], 0
    for cum, _t in curve:
        out.append(cum - prev)
        prev = cum
    return out
