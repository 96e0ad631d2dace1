"""Borrowing that does not thrash (#19): who may borrow idle quota, and for how long.

A job over its quota that is preemptible and not demoted may *borrow*: start on capacity
other lines are entitled to but leave idle (``planner.consider_borrower``, in the plan's
second pass). Borrowed work is the first thing reclaimed (preempted) when a lender's own
work needs the GPUs back. Without further rules, small jobs borrow, are reclaimed a few
minutes later and borrow again (ITP on 1,280 GPUs: eviction ratio 0.32, 8% of jobs
demoted). Three rules, checked here before a borrower is placed, keep that from
happening:

1. **It must end before the lenders return.** The cluster's *entitled demand* (summed
   over lines: the GPUs a line holds within quota plus the GPUs its waiting jobs ask
   for, at most its quota) is forecast per look-ahead ``h`` in ``HORIZONS_S`` as its peak
   of the last ``h`` (``Snapshot.demand_peaks``, kept by the caller): *within the next h,
   the lenders are predicted to need back as much as they used at peak in the last h*,
   and never less than they need now. A reclaim happens when entitled demand no longer finds room beside
   the borrowed work, so a borrower of ``g`` GPUs and predicted runtime ``R`` (the plan's
   own quantile, ``predicted_runtime_s``) starts only if, at every instant of ``[now,
   now + R]``::

       forecast entitled demand(t) + borrowed GPUs still running at t + g <= ready GPUs

   where the borrowed work still running counts running borrowed jobs until their
   predicted end (victims until their deadline) and the jobs this plan already let
   borrow. The forecast is a step function (one step per horizon) and borrowed work only
   decreases, so the check is one inequality per horizon segment. A runtime longer than
   the last horizon uses the last horizon's peak. The borrower's own part of the
   entitled demand now (``own_demand``: its line's room it would fill) is left out of
   every horizon's forecast, as it is counted in ``g``; the recent peaks held it too while
   it waited or ran within quota. (Before session 27 it was counted twice, and a reclaimed
   job larger than its line's room never borrowed again, however idle the cluster.)
   A quota swap's displaced runs are judged the same way: their part of their line's
   entitled demand now (``Borrowing.own_part``) is left out, as they count in ``g``.
2. **Cool-down.** A job evicted less than ``borrow_cooldown_s`` ago
   (``PendingJob.last_evicted_at``), or any job of a queue that had a job evicted that
   recently (``QueueView.last_reclaim_at``), does not borrow: it waits within its quota.
3. **Eviction ratio above target tightens** (``borrow_cap``, off by default: it fed on
   itself after a cold start, docs/engine.md). A queue whose recent eviction ratio
   (``QueueView.eviction_ratio``) is above ``borrow_eviction_target`` may hold at most
   ``floor(quota x (2 - ratio / target))`` borrowed GPUs (its own quota, else its line's),
   a cap that shrinks as the ratio climbs and is 0 from twice the target; as the ratio
   falls back (the caller's window moves on), the cap grows back.

   A quota swap (``quota_swap.py``) turns running work into borrowed work *with its
   past*: a reclaim then counts the whole of the run's GPU time as evicted, so with
   ``swap_eviction_budget`` (off by default) a swap also keeps to the queue's **eviction
   budget**, ``target x delivered - evicted`` GPU-seconds over the caller's window
   (``eviction_budget``): the GPU time the queue's borrowed work has been given so far
   (``policy.given_gpu_s``), with the displaced runs', may not exceed it, so that
   reclaiming all of it at once would leave the queue's ratio within the target.

A refused borrower reads ``QUOTA_EXCEEDED`` as before, with the rule in its message and
``details.borrow_refused`` (``cooldown``, ``queue_cooldown``, ``eviction_cap``,
``eviction_budget`` (swaps only), ``swap_risk`` (swaps only: ``policy.swap_too_costly``) or
``lenders_return``). Rule 1 is on with
``borrow_forecast``; rules 2 and 3 with a positive cool-down / target. ``check_borrowing`` re-derives rule 1-3 for a finished plan
(``check_plan`` calls it).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from . import explain
from .accounting import derive_usage
from .policy import (
    given_gpu_s,
    job_runtime,
    running_end,
    swap_too_costly,
    swaps_before_evicting,
)
from .types import READY, LineView, PendingJob, Plan, PolicyConfig, QueueView, Snapshot

if TYPE_CHECKING:
    from .planner import Planner

#: Look-aheads (seconds) of the lenders' demand forecast: 15 min .. 24 h. The caller keeps
#: one peak per horizon in ``Snapshot.demand_peaks``.
HORIZONS_S: tuple[float, ...] = (900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 57600.0, 86400.0)
# Segment i of the look-ahead covers [STARTS[i], HORIZONS_S[i]).
_STARTS: tuple[float, ...] = (0.0, *HORIZONS_S[:-1])

COOLDOWN = "cooldown"
QUEUE_COOLDOWN = "queue_cooldown"
# the rules whose refusal ends at a known time (``Borrowing.cooled_from``)
COOLDOWNS = frozenset({COOLDOWN, QUEUE_COOLDOWN})
EVICTION_CAP = "eviction_cap"
EVICTION_BUDGET = "eviction_budget"
LENDERS_RETURN = "lenders_return"
SWAP_RISK = "swap_risk"


def eviction_cap(queue: QueueView | None, line: LineView | None, target: float) -> int | None:
    """Borrowed GPUs a queue may hold (rule 3); None: no cap (ratio unknown or on target)."""
    if queue is None or target <= 0:
        return None
    ratio = queue.eviction_ratio
    if ratio is None or ratio <= target:
        return None
    base = queue.quota_gpus
    if base is None and line is not None:
        base = line.quota_gpus
    return max(0, math.floor((base or 0) * (2.0 - ratio / target)))


def eviction_budget(queue: QueueView | None, policy: PolicyConfig) -> float | None:
    """GPU-seconds of a queue's work that may be evicted before its eviction ratio passes
    the target: ``target x delivered - evicted`` over the caller's window, at least 0
    (rule 3, for quota swaps). None: no budget (``borrow_cap`` or ``swap_eviction_budget``
    off, no target, or the queue's figures unknown)."""
    target = policy.borrow_eviction_target
    if queue is None or target <= 0 or not (policy.borrow_cap and policy.swap_eviction_budget):
        return None
    if queue.evicted_gpu_s is None or queue.delivered_gpu_s is None:
        return None
    evicted = queue.evicted_gpu_s
    return max(0.0, target * max(queue.delivered_gpu_s, evicted) - evicted)


def over_target(queue: QueueView | None, target: float) -> bool:
    """Whether ``queue``'s recent eviction ratio is above ``target`` (rule 3's trigger)."""
    if queue is None or target <= 0 or queue.eviction_ratio is None:
        return False
    return queue.eviction_ratio > target


def forecast_applies(job: PendingJob, over: bool, policy: PolicyConfig) -> bool:
    """Whether rule 1 gates ``job``: every borrower, one already reclaimed, or (with
    ``borrow_forecast_over_target``) any borrower of a queue above its eviction target."""
    return (
        policy.borrow_forecast_all
        or job.preemption_count > 0
        or (over and policy.borrow_forecast_over_target)
    )


def queue_cooldown_s(over: bool, policy: PolicyConfig) -> float:
    """Rule 2's queue cool-down for a queue (``over``: above its eviction target)."""
    if policy.borrow_queue_cooldown_over_target and not over:
        return 0.0
    return policy.borrow_queue_cooldown_s


def cap_for(queue: QueueView | None, line: LineView | None, policy: PolicyConfig) -> int | None:
    """Rule 3's cap for ``queue`` under ``policy`` (None: no cap)."""
    if not policy.borrow_cap:
        return None
    return eviction_cap(queue, line, policy.borrow_eviction_target)


def in_cooldown(t: float | None, now: float, cooldown_s: float) -> bool:
    return t is not None and cooldown_s > 0 and now - t < cooldown_s


def cooldown_end(t: float | None, now: float, cooldown_s: float) -> float | None:
    """When a cool-down of ``cooldown_s`` from ``t`` ends, if it still runs at ``now``."""
    return t + cooldown_s if in_cooldown(t, now, cooldown_s) else None  # type: ignore[operator]


def entitled_now(lines: Mapping[str, LineView], demand_now: Mapping[str, int]) -> int:
    """The cluster's entitled demand now: per line at most its quota, summed."""
    total = 0
    for name, d in demand_now.items():
        line = lines.get(name)
        if line is not None and line.quota_gpus is not None and d > line.quota_gpus:
            d = line.quota_gpus
        total += d
    return total


def own_demand(line: LineView | None, line_demand: int, gpus: int) -> int:
    """What a waiting job of ``gpus`` GPUs adds to the entitled demand now: its line's
    term (``line_demand`` held within quota plus waiting, at most the quota) with it,
    less without it. Rule 1 leaves it out of the lenders' forecast: once the job
    borrows, its GPUs count as borrowed load instead, and counting them twice kept a
    reclaimed job larger than its line's room from ever borrowing again, even on an
    empty cluster."""
    quota = None if line is None else line.quota_gpus
    if quota is None:
        return gpus
    return min(line_demand, quota) - min(max(0, line_demand - gpus), quota)


def forecast_demand(now_gpus: int, peaks: Sequence[int]) -> list[int]:
    """Forecast entitled demand per horizon (rule 1): the recent peak, never less than now."""
    return [max(now_gpus, peaks[i] if i < len(peaks) else 0) for i in range(len(HORIZONS_S))]


def entitled_demand_now(
    nb_line: Mapping[str, int], pending: Iterable[PendingJob]
) -> dict[str, int]:
    """Per line: GPUs held within quota plus GPUs its waiting jobs ask for (uncapped)."""
    out = dict(nb_line)
    for j in pending:
        out[j.line] = out.get(j.line, 0) + j.gpus
    return out


def segments(runtime_s: float) -> int:
    """How many horizon segments a run of ``runtime_s`` overlaps (at least 1)."""
    return max(1, min(len(HORIZONS_S), bisect_left(_STARTS, runtime_s)))


class BorrowedLoad:
    """Borrowed GPUs over time: running borrowed work until its end, plus new borrowers."""

    __slots__ = ("ends", "gpus", "suffix")

    def __init__(self, items: Iterable[tuple[float, int]]) -> None:
        pairs = sorted(items)
        self.ends = [t for t, _ in pairs]
        self.gpus = [g for _, g in pairs]
        self.suffix = [0] * (len(pairs) + 1)
        for k in range(len(pairs) - 1, -1, -1):
            self.suffix[k] = self.suffix[k + 1] + self.gpus[k]

    def at(self, t: float) -> int:
        """GPUs of borrowed work still running at ``t`` (ending strictly after it)."""
        return self.suffix[bisect_right(self.ends, t)]


class Borrowing:
    """The plan's borrowing rules (one per plan, built lazily at the first borrower)."""

    def __init__(self, planner: Planner) -> None:
        self.p = planner
        self._slack: list[int] | None = None
        self._queue_borrowed: dict[str, int] = {}
        self._queue_exposure: dict[str, float] = {}  # GPU time its borrowed runs were given
        self._line_demand: dict[str, int] = {}  # per line: held within quota + waiting
        self.capacity = 0

    def _prepare(self) -> list[int]:
        p = self.p
        s = p.s
        self.capacity = sum(t for t, r in zip(p.topo.total, p.topo.ready, strict=True) if r)
        borrowed = p.usage.borrowed_ids
        now = p.now
        load: list[tuple[float, int]] = []
        qb = self._queue_borrowed
        for r in s.running:
            if r.id in borrowed:
                end = p._end_override.get(r.id)
                if end is None:
                    end = running_end(r, now, p.policy)
                load.append((end, r.gpus))
                if r.id not in p.victim_ids:
                    qb[r.queue] = qb.get(r.queue, 0) + r.gpus
                    qx = self._queue_exposure
                    qx[r.queue] = qx.get(r.queue, 0.0) + given_gpu_s(r, now)
        bl = BorrowedLoad(load)
        self._line_demand = entitled_demand_now(p.usage.nb_line, s.pending)
        demand = forecast_demand(entitled_now(p.lines, self._line_demand), s.demand_peaks)
        self._slack = [
            self.capacity - demand[i] - bl.at(now + _STARTS[i]) for i in range(len(HORIZONS_S))
        ]
        return self._slack

    def refusal(self, job: PendingJob) -> tuple[str, str] | None:
        """Why ``job`` may not borrow now (``(kind, note)``), or None if it may."""
        p = self.p
        policy = p.policy
        now = p.now
        # the cool-down that ends last is named: its end is the job's turn at the earliest
        until = cooldown_end(job.last_evicted_at, now, policy.borrow_cooldown_s)
        if until is not None and until >= self.cooled_from(job):
            return COOLDOWN, (
                f"It was preempted {explain.duration(now - job.last_evicted_at)} ago and may "  # type: ignore[operator]
                f"borrow idle capacity again from {explain.when(until)} (cool-down)."
            )
        refused = self.queue_refusal(job.queue, job.gpus)
        if refused is not None:
            return refused
        over = over_target(p.queues.get(job.queue), policy.borrow_eviction_target)
        if policy.borrow_forecast and forecast_applies(job, over, policy):
            own = self.own_part(job.line, job.gpus)
            return self.lenders_refusal(job.gpus, job_runtime(job, policy), own)
        return None

    def cooled_from(self, job: PendingJob) -> float:
        """When rule 2's cool-downs (the job's own and its queue's) let ``job`` borrow: now,
        or when the later of them ends."""
        p = self.p
        ends = (
            cooldown_end(job.last_evicted_at, p.now, p.policy.borrow_cooldown_s),
            self._queue_cooldown_end(p.queues.get(job.queue)),
        )
        return max((t for t in ends if t is not None), default=p.now)

    def _queue_cooldown_end(self, queue: QueueView | None) -> float | None:
        """When the cool-down after a reclaim of ``queue``'s work ends, if it still runs."""
        if queue is None:
            return None
        policy = self.p.policy
        qcool = queue_cooldown_s(over_target(queue, policy.borrow_eviction_target), policy)
        return cooldown_end(queue.last_reclaim_at, self.p.now, qcool)

    def queue_refusal(self, name: str, gpus: int) -> tuple[str, str] | None:
        """Rules 2 and 3 for ``gpus`` more borrowed GPUs of queue ``name``: its cool-down
        after a reclaim, its eviction cap (None: allowed)."""
        p = self.p
        policy = p.policy
        now = p.now
        queue = p.queues.get(name)
        if queue is None:
            return None
        until = self._queue_cooldown_end(queue)
        if until is not None:
            return QUEUE_COOLDOWN, (
                f"Queue {name} had work preempted "
                f"{explain.duration(now - queue.last_reclaim_at)} ago; its jobs may borrow "  # type: ignore[operator]
                f"idle capacity again from {explain.when(until)} (cool-down)."
            )
        if self._slack is None:
            self._prepare()
        cap = cap_for(queue, p.lines.get(queue.line), policy)
        if cap is not None:
            held = self._queue_borrowed.get(name, 0)
            if held + gpus > cap:
                return EVICTION_CAP, (
                    f"Queue {name} has an eviction ratio of {queue.eviction_ratio:.0%}, above "
                    f"the {policy.borrow_eviction_target:.0%} target, so it may hold at most "
                    f"{explain.num(cap)} borrowed GPUs ({explain.num(held)} now)."
                )
        return None

    def displace_room(self, name: str) -> float:
        """GPUs of queue ``name``'s running work a quota swap may still make borrowed now
        (rules 2 and 3 for that queue): none in its cool-down after a reclaim, what its
        eviction cap leaves, else no limit."""
        if self.queue_refusal(name, 0) is not None:
            return 0.0
        queue = self.p.queues.get(name)
        cap = None if queue is None else cap_for(queue, self.p.lines.get(queue.line), self.p.policy)
        if cap is None:
            return math.inf
        return float(max(0, cap - self._queue_borrowed.get(name, 0)))

    def budget(self, name: str) -> float:
        """GPU-seconds of queue ``name``'s running work a quota swap may still make
        borrowed now: its eviction budget less what its borrowed work has been given
        (no limit without a budget)."""
        queue = self.p.queues.get(name)
        room = eviction_budget(queue, self.p.policy)
        if room is None:
            return math.inf
        if self._slack is None:
            self._prepare()
        return max(0.0, room - self._queue_exposure.get(name, 0.0))

    def budget_refusal(self, name: str, gpu_s: float) -> tuple[str, str] | None:
        """The eviction budget's refusal for displacing ``gpu_s`` GPU-seconds of queue
        ``name``'s running work (None: within it)."""
        room = self.budget(name)
        if gpu_s <= room:
            return None
        target = self.p.policy.borrow_eviction_target
        return EVICTION_BUDGET, (
            f"Queue {name}'s runs that would become borrowed have been given "
            f"{gpu_s / 3600:,.1f} GPU-hours; were they reclaimed, its eviction ratio would "
            f"pass the {target:.0%} target ({room / 3600:,.1f} GPU-hours of room)."
        )

    def own_part(self, line: str, gpus: int) -> int:
        """The part of line ``line``'s entitled demand now that ``gpus`` GPUs of its work
        make (``own_demand``): a borrower's waiting GPUs, or the runs a quota swap
        displaces. Rule 1 leaves it out, as they count as the borrowed load instead."""
        if self._slack is None:
            self._prepare()
        return own_demand(self.p.lines.get(line), self._line_demand.get(line, 0), gpus)

    def lenders_refusal(self, gpus: int, runtime: float, own: int = 0) -> tuple[str, str] | None:
        """Rule 1 for ``gpus`` GPUs borrowed for ``runtime`` seconds (None: allowed);
        ``own``: the borrower's own part of the entitled demand (``own_demand``), which
        the forecast leaves out."""
        slack = self._slack if self._slack is not None else self._prepare()
        if min(slack[: segments(runtime)]) + own < gpus:
            return LENDERS_RETURN, (
                f"It is predicted to run {explain.duration(runtime)}, and the lenders "
                "are predicted to need their idle GPUs back before then."
            )
        return None

    def started(self, job: PendingJob, end: float) -> None:
        """``job`` starts on borrowed capacity until ``end`` (its predicted end)."""
        self.add_load(job.queue, job.gpus, end)

    def add_load(self, queue: str, gpus: int, end: float, given_gpu_s: float = 0.0) -> None:
        """``gpus`` GPUs of ``queue`` run on borrowed capacity until ``end``; their run
        has been given ``given_gpu_s`` GPU-seconds so far (a displaced run's past)."""
        slack = self._slack if self._slack is not None else self._prepare()
        run = end - self.p.now
        for i, t0 in enumerate(_STARTS):
            if t0 < run:
                slack[i] -= gpus
        self._queue_borrowed[queue] = self._queue_borrowed.get(queue, 0) + gpus
        self._queue_exposure[queue] = self._queue_exposure.get(queue, 0.0) + given_gpu_s


#: The details' key naming the borrowing rule that refused a QUOTA_EXCEEDED job.
BORROW_REFUSED = "borrow_refused"


def refused_reason(reason: explain.Reason, kind: str) -> explain.Reason:
    """A QUOTA_EXCEEDED reason with the borrowing rule that refused it in its details."""
    code, msg, details, remedy = reason
    return code, msg, dict(details, **{BORROW_REFUSED: kind}), remedy


def check_borrowing(snapshot: Snapshot, plan: Plan) -> list[str]:
    """Rules 1-3 for every borrowed start and quota swap of ``plan``, re-derived from the
    snapshot alone (in the plan's order of starts, so each borrower counts the ones
    before it)."""
    policy: PolicyConfig = snapshot.policy
    now = float(plan.now if plan.now is not None else 0.0)
    if not plan.swaps and not any(s.borrowed for s in plan.starts):
        return []
    pending = {j.id: j for j in snapshot.pending}
    queues = {q.name: q for q in snapshot.queues}
    lines = {line.name: line for line in snapshot.lines}
    usage = derive_usage(snapshot.running, queues, lines)
    leaving = {p.victim_id: p.grace_deadline for p in plan.preemptions}
    leaving.update({m.job_id: m.grace_deadline for m in plan.migrations})
    load: list[tuple[float, int]] = []
    qb: dict[str, int] = {}
    qx: dict[str, float] = {}  # GPU time the queue's borrowed runs were given
    for r in snapshot.running:
        if r.id in usage.borrowed_ids:
            load.append((leaving.get(r.id, running_end(r, now, policy)), r.gpus))
            if r.id not in leaving:
                qb[r.queue] = qb.get(r.queue, 0) + r.gpus
                qx[r.queue] = qx.get(r.queue, 0.0) + given_gpu_s(r, now)
    ready = sum(n.gpus_total for n in snapshot.nodes if n.state == READY)
    line_demand = entitled_demand_now(usage.nb_line, snapshot.pending)
    demand = forecast_demand(entitled_now(lines, line_demand), snapshot.demand_peaks)
    errors: list[str] = []
    running = {r.id: r for r in snapshot.running}
    swapped = {sw.job_id: sw.displaced for sw in plan.swaps}
    for s in plan.starts:
        j = pending.get(s.job_id)
        if j is None or not (s.borrowed or s.job_id in swapped):
            continue
        # a swap (quota_swap.py) borrows by proxy: the displaced work is what may be
        # reclaimed, until its predicted ends, and the forecast gates every swap
        proxy = [running[i] for i in swapped.get(s.job_id, ()) if i in running]
        adds = [(running_end(r, now, policy), r.gpus, r.queue) for r in proxy] or [
            (now + job_runtime(j, policy), j.gpus, j.queue)
        ]
        for r in proxy:
            qx[r.queue] = qx.get(r.queue, 0.0) + given_gpu_s(r, now)
        # a job that displaces instead of evicting: no borrowing rule holds it (quota_swap.py)
        if not (proxy and swaps_before_evicting(j, queues.get(j.queue), policy)):
            gpus = sum(g for _t, g, _q in adds)
            runtime = max(t for t, _g, _q in adds) - now
            if not proxy and in_cooldown(j.last_evicted_at, now, policy.borrow_cooldown_s):
                errors.append(f"job {j.id} borrows within its cool-down")
            if proxy and swap_too_costly(j, proxy, now, policy):
                errors.append(f"job {j.id} displaces more GPU time than its swap may risk")
            # rules 2 and 3 for the queue(s) whose work becomes borrowed
            per_queue: dict[str, int] = {}
            for _t, g, name in adds:
                per_queue[name] = per_queue.get(name, 0) + g
            for name in {r.queue for r in proxy}:
                budget = eviction_budget(queues.get(name), policy)
                if budget is not None and qx[name] > budget + 1e-6:
                    errors.append(f"job {j.id} displaces queue {name} past its eviction budget")
            for name, g in per_queue.items():
                q = queues.get(name)
                over = over_target(q, policy.borrow_eviction_target)
                if q is not None and in_cooldown(
                    q.last_reclaim_at, now, queue_cooldown_s(over, policy)
                ):
                    errors.append(f"job {j.id} borrows within queue {name}'s cool-down")
                cap = cap_for(q, lines.get(q.line) if q is not None else None, policy)
                if cap is not None and qb.get(name, 0) + g > cap:
                    errors.append(f"job {j.id} takes queue {name} over its borrowing cap {cap}")
            over = over_target(queues.get(j.queue), policy.borrow_eviction_target)
            if policy.borrow_forecast and (proxy or forecast_applies(j, over, policy)):
                bl = BorrowedLoad(load)
                own = own_demand(lines.get(j.line), line_demand.get(j.line, 0), gpus)
                for i in range(segments(runtime)):
                    if demand[i] - own + bl.at(now + _STARTS[i]) + gpus > ready:
                        errors.append(
                            f"job {j.id} borrows but is predicted to be reclaimed before it ends"
                        )
                        break
        for t, g, queue in adds:
            load.append((t, g))
            qb[queue] = qb.get(queue, 0) + g
    return errors
