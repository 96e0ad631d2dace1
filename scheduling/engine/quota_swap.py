"""Quota swap (#19): a job that may not borrow starts within its quota by letting its own
scope's preemptible work become the borrowed part.

Q7 lends idle capacity beyond a quota only to preemptible work. A job that is not
preemptible (or is demoted, R3) therefore waits while its queue or line is at quota,
even when that quota is held by the scope's *own* preemptible work, of its tier or
lower, and GPUs sit idle elsewhere: on ITP (1,280 GPUs) this is 4,800-5,400 s of every
job's average wait (docs/replay.md, "what the jobs wait for"). A queue below
``urgent`` may not preempt to get the room back (R2, ``queue_preempts``).

Quota is accounting, not placement: ``accounting.derive_usage`` stacks a scope's
non-preemptible work first and work marked borrowed last, so if the job starts on idle
GPUs and the swap marks some of the scope's preemptible jobs borrowed (``choose``), those
end up above its quota, that is, *borrowed*, and are the first thing reclaimed when a
lender needs its GPUs back. Nothing stops now; the line still holds no
more than its quota of work that cannot be reclaimed, and what it holds beyond is
preemptible work on lent capacity, which is all Q7 allows.

The swap is borrowing by proxy, so borrowing's rules apply to the work it displaces
(``Borrowing.refusal`` with the displaced GPUs and their predicted ends): the queue's
cool-down and eviction cap, and rule 1 (the displaced work is predicted to end before
the lenders are predicted to need their GPUs back). Unlike a borrower, displaced work
has a past that a reclaim would count as evicted, so a swap also keeps to the queue's
eviction budget (``Borrowing.budget``; the set displaced is the one with the least GPU
time at risk, ``least_at_risk``). Displaced work is running, preemptible, not demoted, not already borrowed, not moving or leaving; guarantees are
untouched (the scope's active use grows by the job, its guarantee does not).

A job that may *preempt* (an ``urgent`` queue's, ``policy.swaps_before_evicting``) swaps
differently: for it the alternative is evicting its scope's work for quota room, not
waiting. So it swaps in the first pass, without the displaced queues' rules: when its
scope's displaceable work covers what it lacks, the planner treats it as a job within quota
(``instead_of_eviction``), it preempts at most for *nodes*, and it displaces when it starts
(``start_instead``). Evicting for quota room did not work: the accounting re-derives every
plan which work is borrowed, so the scope's borrowed work moved into the room each round
left, and the job evicted again (on the demo one urgent 128-GPU job evicted 467 jobs, 492
GPUs, over four cycles, docs/engine.md).

On with ``PolicyConfig.swap_quota`` (and ``borrowing``). ``check_swaps`` is what
``check_plan`` re-derives of a plan's swaps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from .borrowing import SWAP_RISK, refused_reason
from .consolidation import SWAPPED
from .policy import (
    at_risk,
    at_risk_per_gpu,
    given_gpu_s,
    is_demoted,
    job_runtime,
    may_borrow,
    running_end,
    swap_too_costly,
    swaps_before_evicting,
)
from .types import RUNNING, PendingJob, Plan, PolicyConfig, RunningJob, Snapshot, Swap

if TYPE_CHECKING:
    from .planner import Planner, ShapeT

Scope = tuple[str, str]  # ("queue" | "line", name)

NO_ROOM = (
    "Preemptible work of its queue or line could become the borrowed part so that it "
    "starts within quota, but no idle capacity fits it now."
)
NOT_ENOUGH = ""  # the plain QUOTA_EXCEEDED message: nothing of its own to displace


def swaps(job: PendingJob, policy: PolicyConfig) -> bool:
    """Whether ``job`` may start by a quota swap: the swap is on, and the job could not
    borrow itself (not preemptible, or demoted)."""
    return (
        policy.swap_quota
        and policy.borrowing
        and not may_borrow(job.preemptible, is_demoted(job.preemption_count, policy), policy)
    )


def displaceable(r: RunningJob, borrowed: frozenset[int] | set[int], policy: PolicyConfig) -> bool:
    """Whether running ``r`` may become the borrowed part of its scope: running (not
    preempting or moving), preemptible, not demoted, not borrowed already."""
    return (
        r.state == RUNNING
        and r.preemptible
        and not r.migrating
        and r.id not in borrowed
        and not is_demoted(r.preemption_count, policy)
    )


def newest_order(r: RunningJob) -> tuple[float, int]:
    """Newest run first: the order displaceable work is weighed in. It is the
    accounting's stack from the top (``accounting._borrowed_over``): no displaceable run
    is flagged borrowed once the flags are settled (``accounting.settle``)."""
    return (r.started_at, r.id)


def index_by_scope(
    running: Iterable[RunningJob], borrowed: frozenset[int] | set[int], policy: PolicyConfig
) -> dict[Scope, list[RunningJob]]:
    """Displaceable running jobs per queue and per line, newest first."""
    idx: dict[Scope, list[RunningJob]] = defaultdict(list)
    for r in running:
        if displaceable(r, borrowed, policy):
            idx[("queue", r.queue)].append(r)
            idx[("line", r.line)].append(r)
    for jobs in idx.values():
        jobs.sort(key=newest_order, reverse=True)
    return idx


class Limits:
    """What may still become borrowed of each queue's work: ``room(queue)`` GPUs
    (borrowing's rules 2 and 3) and ``budget(queue)`` GPU-seconds of the runs' past (the
    eviction budget), as of ``now``."""

    def __init__(
        self, room: Callable[[str], float], budget: Callable[[str], float], now: float
    ) -> None:
        self.room, self.budget, self.now = room, budget, now
        self.gpus: dict[str, int] = {}
        self.given: dict[str, float] = {}

    def admits(self, r: RunningJob) -> bool:
        """Whether ``r`` may become borrowed beside what was admitted before it."""
        q = r.queue
        if self.gpus.get(q, 0) + r.gpus > self.room(q):
            return False
        return self.given.get(q, 0.0) + given_gpu_s(r, self.now) <= self.budget(q)

    def admit(self, r: RunningJob) -> None:
        self.gpus[r.queue] = self.gpus.get(r.queue, 0) + r.gpus
        self.given[r.queue] = self.given.get(r.queue, 0.0) + given_gpu_s(r, self.now)

    def copy(self) -> Limits:
        """The same limits with what was admitted so far, to try a set on."""
        other = Limits(self.room, self.budget, self.now)
        other.gpus, other.given = dict(self.gpus), dict(self.given)
        return other


def risk_note(job: PendingJob, chosen: list[RunningJob], now: float, policy: PolicyConfig) -> str:
    """Why a swap that would put too much GPU time at risk (``policy.swap_too_costly``) is
    refused, with its numbers."""
    risk = sum(at_risk(r, now) for r in chosen) / 3600.0
    cap = policy.swap_risk_cap_gpu_h * job.gpus
    return (
        f"Its own quota is held by preemptible work, but the runs that would become the "
        f"borrowed part in its place ({sum(r.gpus for r in chosen):,} GPUs) are so big or have "
        f"run so long that a reclaim an hour from now would count {risk:,.0f} GPU-hours evicted, more "
        f"than the {cap:,.0f} a swap may put at risk for a {job.gpus:,}-GPU job."
    )


def least_at_risk(
    cands: Iterable[RunningJob], short: int, now: float, limits: Limits | None
) -> list[RunningJob] | None:
    """The jobs of ``cands`` that cover ``short`` GPUs with the least GPU time at risk
    (``at_risk``); None if they cannot. ``cands`` come newest first, so cheapest per GPU
    first. Greedy: jobs smaller than what is still short are taken in order, and each job
    that covers the rest alone finishes a candidate set (the jobs taken before it, and
    it), so a small shortfall does not displace a big run that smaller ones cover. (A
    covering job seen earlier never finishes a later set for less: that set holds more.)
    The search stops once the rest, at the current price per GPU, could not beat the best
    set. Any set will do for the accounting: the plan flags the set borrowed and clears the
    flag of any run its scope no longer needs above the quota (``Plan.marks``), so the next
    plan counts borrowed the set it displaced. ``limits`` is only read."""
    best: list[RunningJob] | None = None
    best_cost = float("inf")
    taken: list[RunningJob] = []
    cost = 0.0
    lim = limits.copy() if limits is not None else None
    for r in cands:
        per_gpu = at_risk_per_gpu(r, now)
        if cost + short * per_gpu >= best_cost:
            break  # every run from here costs at least this a GPU (older): no better set
        c = r.gpus * per_gpu
        covers = r.gpus >= short
        if (covers and cost + c >= best_cost) or (lim is not None and not lim.admits(r)):
            continue
        if covers:
            best, best_cost = [*taken, r], cost + c
            continue
        taken.append(r)
        cost += c
        short -= r.gpus
        if lim is not None:
            lim.admit(r)
    return best


def top_of_stack(
    cands: Iterable[RunningJob], short: int, now: float, limits: Limits | None
) -> list[RunningJob] | None:
    """The jobs of ``cands`` (newest first) that cover ``short`` GPUs, taken in order; None
    if they cannot (the rule before ``swap_least_at_risk``). ``limits`` is only read."""
    lim = limits.copy() if limits is not None else None
    out: list[RunningJob] = []
    for r in cands:
        if short <= 0:
            break
        if lim is None or lim.admits(r):
            if lim is not None:
                lim.admit(r)
            out.append(r)
            short -= r.gpus
    return out if short <= 0 else None


def choose(
    shorts: Mapping[Scope, int],
    idx: Mapping[Scope, list[RunningJob]],
    taken: set[int],
    now: float,
    least: bool,
    limits: Limits | None = None,
) -> list[RunningJob] | None:
    """The running jobs that become borrowed so a job fits within every quota it is short
    of (``shorts``: GPUs short per scope); None if a scope has too little. ``limits``:
    what the displaced queues' rules still allow (None: no limit). With ``least``
    (``PolicyConfig.swap_least_at_risk``) the set with the least GPU time at risk
    (``least_at_risk``), else the newest runs."""
    out: dict[int, RunningJob] = {}
    for (scope, name), short in shorts.items():
        if short <= 0:
            continue
        got = sum(r.gpus for r in out.values() if (r.queue if scope == "queue" else r.line) == name)
        if got >= short:
            continue
        pool = (r for r in idx.get((scope, name), ()) if r.id not in out and r.id not in taken)
        pick = least_at_risk if least else top_of_stack
        group = pick(pool, short - got, now, limits)
        if group is None:
            return None
        for x in group:
            if limits is not None:
                limits.admit(x)
            out[x.id] = x
    return list(out.values())


class QuotaSwap:
    """The plan's quota swaps: who defers to the second pass, and what each displaces."""

    def __init__(self, planner: Planner) -> None:
        self.p = planner
        self._idx: dict[Scope, list[RunningJob]] | None = None
        # deferred to the borrowing pass to swap: job id -> GPUs short (queue, line) then
        self.waiting: dict[int, tuple[int, int]] = {}
        self.swaps: list[Swap] = []
        # jobs that displace instead of evicting for quota room (``instead_of_eviction``),
        # or swap first because they are overdue (``overdue_first``), with the scope they
        # are short in
        self.instead: dict[int, Scope] = {}
        # the overdue ones: the displaced queues' rules hold them, and they evict no one
        self.overdue: set[int] = set()
        # GPUs per scope of work this plan started within quota that a swap of the next
        # plan may displace (``started_within``)
        self.fresh: dict[Scope, int] = defaultdict(int)

    def idx(self) -> dict[Scope, list[RunningJob]]:
        if self._idx is None:
            p = self.p
            self._idx = index_by_scope(p.s.running, p.usage.borrowed_ids, p.policy)
        return self._idx

    def _shorts(self, job: PendingJob, short_q: int, short_l: int) -> dict[Scope, int]:
        return {("queue", job.queue): short_q, ("line", job.line): short_l}

    def defer(self, job: PendingJob, short_q: int, short_l: int) -> bool:
        """Whether ``job`` (over quota, may not borrow) tries a swap in the borrowing pass."""
        p = self.p
        if not swaps(job, p.policy):
            return False
        if self._choose_now(self._shorts(job, short_q, short_l)) is None:
            return False
        self.waiting[job.id] = (short_q, short_l)
        return True

    def _choose_now(
        self, shorts: Mapping[Scope, int], limits: Limits | None = None
    ) -> list[RunningJob] | None:
        p = self.p
        return choose(shorts, self.idx(), p.victim_ids, p.now, p.policy.swap_least_at_risk, limits)

    def instead_of_eviction(self, job: PendingJob, short_q: int, short_l: int) -> bool:
        """Whether ``job`` (short of its quota by ``short_q`` / ``short_l``) needs no quota
        victims: it may preempt (``policy.swaps_before_evicting``) and its scope's
        preemptible work covers what it lacks. The planner then treats it as a job within
        quota that may have to preempt for *nodes*, and the work becomes borrowed when it
        starts (``start_instead``). Evicting for quota room took the scope's work in
        rounds: the accounting re-derives every plan which work is borrowed, so the scope's
        borrowed work moved into the room each round left (one urgent 128-GPU job of the
        demo evicted 467 jobs, 492 GPUs, over four cycles; docs/engine.md)."""
        p = self.p
        if not swaps_before_evicting(job, p.queues.get(job.queue), p.policy):
            return False
        if self._choose_now(self._shorts(job, short_q, short_l)) is None:
            return False
        self.instead[job.id] = ("queue", job.queue) if short_q else ("line", job.line)
        return True

    def overdue_first(self, job: PendingJob, short_q: int, short_l: int) -> bool:
        """Whether ``job`` (over quota, may not borrow) swaps in the first pass because it is
        overdue (``policy.hold_quota_when_overdue``): its scope's preemptible work covers what
        it lacks within the displaced queues' rules now. It is then a job within quota
        waiting for *nodes*: it holds a reservation like any job blocked for capacity, and
        the work becomes borrowed when it starts (``start_instead``). In the borrowing pass
        it could only start on GPUs left idle after everyone else, so a gang waited for
        whole free nodes that small jobs kept taking (ITP: a 64-GPU job 14 days,
        docs/replay.md). Unlike a job that swaps instead of evicting, it preempts no one."""
        p = self.p
        if not (
            p.policy.hold_quota_when_overdue
            and job.submitted_at <= p.overdue_since
            and swaps(job, p.policy)
            and self._ruled(job, self._shorts(job, short_q, short_l)) is not None
        ):
            return False
        self.instead[job.id] = ("queue", job.queue) if short_q else ("line", job.line)
        self.overdue.add(job.id)
        return True

    def _ruled(self, job: PendingJob, shorts: Mapping[Scope, int]) -> list[RunningJob] | None:
        """The work a swap for ``job`` would displace under the displaced queues' rules
        (room, eviction budget, risk cap, lenders' forecast); None if they refuse it."""
        p = self.p
        chosen = self._choose_now(
            shorts, Limits(p.borrowing.displace_room, p.borrowing.budget, p.now)
        )
        if chosen is None or swap_too_costly(job, chosen, p.now, p.policy):
            return None
        if self.forecast_refusal(job, chosen) is not None:
            return None
        return chosen

    def note(self, job: PendingJob) -> str:
        """What the verdict of a job swapping instead of evicting adds: why its quota does
        not hold it (empty for other jobs)."""
        got = self.instead.get(job.id)
        if got is None:
            return ""
        return (
            f" It would take {got[0]} {got[1]} over its quota, but that does not hold it: "
            "when it starts, preemptible jobs of its queue or line become the borrowed part "
            "in its place (a quota swap)."
        )

    def covers(self, job: PendingJob, leaving: tuple[RunningJob, ...]) -> bool:
        """A job swapping instead of evicting, or overdue, still finds enough to displace
        now that the plan is complete (its wait is then for nodes, not quota), counting the
        displaceable work the plan started, which the next plan may displace."""
        if job.id not in self.instead:
            return False
        shorts = self._shorts(job, *self.p.quota.short(job, leaving))
        left = {sc: short - self.fresh.get(sc, 0) for sc, short in shorts.items()}
        return self._choose_now(left) is not None

    def started_within(self, job: PendingJob) -> None:
        """``job`` started within quota: if a swap may displace it once it runs, count it
        for ``covers``."""
        p = self.p
        if job.preemptible and not is_demoted(job.preemption_count, p.policy):
            self.fresh[("queue", job.queue)] += job.gpus
            self.fresh[("line", job.line)] += job.gpus

    def start_instead(self, job: PendingJob, sh: ShapeT, nodes: list[int]) -> bool:
        """Start a job swapping instead of evicting on ``nodes``: the preemptible work of
        its scope that ``choose`` picks becomes the borrowed part. False (nothing done) if that work no
        longer covers it (its own victims, still stopping, count against its quota)."""
        p = self.p
        shorts = self._shorts(job, *p.quota.short(job, ()))
        ruled = job.id in self.overdue
        chosen = self._ruled(job, shorts) if ruled else self._choose_now(shorts)
        if chosen is None:
            return False
        p.start(job, sh, nodes, borrowed=False)
        self.displace(job, chosen)
        return True

    def hold_instead(self, job: PendingJob) -> None:
        """A job swapping instead of evicting now holds nodes and has claimed its quota:
        keep the work it will displace for it, so no later job of the plan counts on it or
        stops it. Its scope's use within quota stays as claimed (over the quota): the room
        is the holder's, and only a start displaces (``check_swaps``)."""
        p = self.p
        shorts: dict[Scope, int] = {}
        for scope, name, nb, views in (
            ("queue", job.queue, p.nb_queue, p.queues),
            ("line", job.line, p.nb_line, p.lines),
        ):
            view = views.get(name)
            if view is not None and view.quota_gpus is not None:
                shorts[(scope, name)] = nb.get(name, 0) - view.quota_gpus
        for r in self._choose_now(shorts) or ():
            p.victim_ids.add(r.id)

    def displace(self, job: PendingJob, chosen: list[RunningJob]) -> None:
        """``job`` started within quota by displacing ``chosen``: they are borrowed from now
        on, in the plan's swaps and in the lenders' forecast."""
        if not chosen:
            return  # an earlier swap displaced more than it needed (whole jobs)
        p = self.p
        self.take(chosen)
        self.swaps.append(Swap(job.id, tuple(r.id for r in chosen)))
        for r in chosen:
            end = running_end(r, p.now, p.policy)
            p.borrowing.add_load(r.queue, r.gpus, end, given_gpu_s(r, p.now))

    def consider(self, job: PendingJob) -> None:
        """Start ``job`` within quota by displacing its scope's preemptible work, or
        record why it waits (QUOTA_EXCEEDED, with a borrowing rule if one refused)."""
        p = self.p
        sh = p.shape(job)
        first_q = self.waiting[job.id][0]
        shorts = self._shorts(job, *p.quota.short(job, ()))
        limits = Limits(p.borrowing.displace_room, p.borrowing.budget, p.now)
        chosen = self._choose_now(shorts, limits)
        refused = None
        if chosen is None:
            anyway = self._choose_now(shorts)  # without the displaced queues' rules
            if anyway is not None:
                refused = self.queue_refusal(anyway)
        elif swap_too_costly(job, chosen, p.now, p.policy):
            refused = SWAP_RISK, risk_note(job, chosen, p.now, p.policy)
        note = NOT_ENOUGH
        if refused is None and chosen is not None:
            leaving = tuple(p.leaving_for.get(job.id, ()))
            if p.unavailable(job, sh) is not None or p.hol_blocked(job):
                pass
            elif leaving and p.hold_for_leaving(job, sh, leaving, SWAPPED):
                self.keep(chosen)  # jobs still move off the nodes it will start on
                return
            elif (nodes := p.where.place(job, sh, p.now + job_runtime(job, p.policy))) is None:
                note = NO_ROOM
                if self.forecast_refusal(job, chosen) is None and self.consolidate(job, sh, chosen):
                    return
            elif not chosen:
                # an earlier swap displaced more than it needed (whole jobs): room within quota
                p.start(job, sh, nodes, borrowed=False)
                return
            else:
                refused = self.forecast_refusal(job, chosen)
                if refused is None:
                    p.start(job, sh, nodes, borrowed=False)
                    self.displace(job, chosen)
                    return
        if refused is not None:
            reason, est = p.quota.reason(job, first_q, refused[1])
            p.record(job, refused_reason(reason, refused[0]), est)
            return
        p.record(job, *p.quota.reason(job, first_q, note))

    def forecast_refusal(self, job: PendingJob, chosen: list[RunningJob]) -> tuple[str, str] | None:
        """The lenders' forecast against displacing ``chosen`` for ``job`` until they end
        (None: it allows it, or is off). The displaced runs' part of their line's entitled
        demand now is left out (``Borrowing.own_part``): from the swap on they
        count as the borrowed load instead."""
        p = self.p
        if not chosen or not p.policy.borrow_forecast:
            return None
        until = max(running_end(r, p.now, p.policy) for r in chosen)
        gpus = sum(r.gpus for r in chosen)
        own = p.borrowing.own_part(job.line, gpus)
        return p.borrowing.lenders_refusal(gpus, until - p.now, own)

    def consolidate(self, job: PendingJob, sh: ShapeT, chosen: list[RunningJob]) -> bool:
        """No room for ``job``: ask consolidation to move jobs so it gets its nodes (the
        work it will displace is kept from the search and, if jobs move, from the rest of
        the plan: ``keep``)."""
        victims = self.p.victim_ids
        added = [r.id for r in chosen if r.id not in victims]
        victims.update(added)
        if self.p.consolidation.try_gang(job, sh, SWAPPED):
            return True
        victims.difference_update(added)
        return False

    def consolidate_overdue(self, job: PendingJob, sh: ShapeT) -> bool:
        """An overdue swapper with no room (``overdue_first``): ask consolidation to move
        jobs for it as for a swapper of the borrowing pass, the work it will displace kept
        from the search."""
        chosen = self._ruled(job, self._shorts(job, *self.p.quota.short(job, ())))
        return chosen is not None and self.consolidate(job, sh, chosen)

    def keep(self, chosen: Iterable[RunningJob]) -> None:
        """A job holding nodes until it swaps keeps the work it will displace: no later job
        of the plan stops or moves it (the scope's use within quota stays as it is)."""
        self.p.victim_ids.update(r.id for r in chosen)

    def queue_refusal(self, chosen: list[RunningJob]) -> tuple[str, str] | None:
        """The rule that keeps the queues of ``chosen`` from lending it (the first found)."""
        per_queue: dict[str, tuple[int, float]] = {}
        for r in chosen:
            gpus, given = per_queue.get(r.queue, (0, 0.0))
            per_queue[r.queue] = (gpus + r.gpus, given + given_gpu_s(r, self.p.now))
        for name, (gpus, given) in per_queue.items():
            refused = self.p.borrowing.queue_refusal(name, gpus)
            if refused is None:
                refused = self.p.borrowing.budget_refusal(name, given)
            if refused is not None:
                kind, note = refused
                return kind, f"Its own quota is held by preemptible work that cannot move: {note}"
        return None

    def take(self, chosen: Iterable[RunningJob]) -> None:
        """``chosen`` is borrowed from now on: out of its queue's and line's use within quota,
        and nobody's victim in this plan."""
        p = self.p
        for r in chosen:
            p.victim_ids.add(r.id)
            p.nb_queue[r.queue] = p.nb_queue.get(r.queue, 0) - r.gpus
            p.nb_line[r.line] = p.nb_line.get(r.line, 0) - r.gpus


def check_swaps(
    snapshot: Snapshot, plan: Plan, borrowed: frozenset[int], leaving: set[int]
) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """``plan.swaps`` re-derived from the snapshot: each swapping job started within quota
    and may not borrow, the swap is on, each displaced job is displaceable, of the job's
    queue or line, displaced once and not also stopped by the plan. Returns the errors and,
    per queue and per line, the GPUs the swaps turned into borrowed work (what a scope
    may hold within quota beyond its quota: ``invariants.check_quotas``)."""
    policy = snapshot.policy
    errors: list[str] = []
    room_q: dict[str, int] = defaultdict(int)
    room_l: dict[str, int] = defaultdict(int)
    if not plan.swaps:
        return errors, room_q, room_l
    pending = {j.id: j for j in snapshot.pending}
    running = {r.id: r for r in snapshot.running}
    within = {s.job_id for s in plan.starts if not s.borrowed}
    seen: set[int] = set()
    for sw in plan.swaps:
        job = pending.get(sw.job_id)
        if job is None or sw.job_id not in within:
            errors.append(f"swap for job {sw.job_id}, which does not start within quota")
            continue
        if not swaps(job, policy):
            errors.append(f"job {job.id} swaps quota but may not (borrows itself, or swap off)")
        for rid in sw.displaced:
            r = running.get(rid)
            if r is None or rid in seen or rid in leaving:
                errors.append(f"job {rid} displaced by {job.id} is unknown, twice or stopping")
                continue
            seen.add(rid)
            if not displaceable(r, borrowed, policy):
                errors.append(f"job {rid} displaced by {job.id} cannot be reclaimed")
            if r.queue != job.queue and r.line != job.line:
                errors.append(f"job {rid} displaced by {job.id} is of another line")
            # displaced work is borrowed from then on: within its own queue's quota too,
            # the room a swap of the line frees there (what ``QuotaSwap.take`` books)
            room_q[r.queue] += r.gpus
            room_l[r.line] += r.gpus
    return errors, room_q, room_l
