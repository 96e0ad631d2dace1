"""Idle capacity by cause: why GPUs sit idle while jobs wait (pure: stdlib + engine types).

The one attribution rule of the portal: the replay (``replay.replay``, through
``replay.idle``) and the live loop (``monitoring.idle_account``, after every applied plan)
both call it.

After every plan of a pool, each GPU left free while some job of the pool waits is
given exactly one cause, in this order:

1. ``unavailable``: it is on a node that is not ready (draining, cordoned, down,
   unhealthy). These are the only idle GPUs that are *not healthy*; every other cause
   counts idle GPUs of ready, healthy nodes.
2. ``checkpointing``: it is on a node held for a preemptor whose victims are still
   checkpointing (the preemptor's verdict is ``PREEMPTING``).
3. ``reservation``: it is on a node held for a blocked job's reservation.
4. The rest is claimed by the waiting jobs without a reservation, in scheduling
   order (verdict ``position``), each up to its own GPU count, with the cause its
   verdict gives: ``demoted`` (``DEMOTED``, or over quota while demoted: a demoted
   job may not borrow), ``quota`` (``QUOTA_EXCEEDED``: over quota and not allowed
   to borrow), ``topology`` (``TOPOLOGY``: enough GPUs free but scattered),
   ``topology`` or ``insufficient`` too for a ``QUOTA_EXCEEDED`` job that *may*
   borrow (preemptible, not demoted, borrowing on: its verdict says "none fits it
   now"): what it lacks is free GPUs it can use, not permission, so ``topology``
   when the idle GPUs left are at least its size, else ``insufficient`` (as the
   replay's shortcuts count such a job),
   ``insufficient`` (``INSUFFICIENT_GPUS``: it needs more GPUs than are free),
   ``order`` (``PRIORITY``: held behind jobs ahead of it), ``unavailable``
   (``NODES_UNAVAILABLE``), ``checkpointing`` (``PREEMPTING``), ``other``
   (any other code, and in the live loop a planned start the backend could not
   launch yet).
5. Waiting jobs the plan did not see (the replay's shortcuts leave out jobs whose
   line is at its quota when the policy cannot borrow or preempt) claim next:
   ``quota``, or ``demoted`` for a demoted one.
6. ``beyond_demand``: idle GPUs left once every waiting job has claimed its size
   (more idle GPUs than the waiting jobs ask for).

A plan the replay skips because nothing could start (``shortcuts``) is attributed
the same way without a plan: jobs over their line's quota (when the policy cannot
borrow or preempt) claim ``quota`` / ``demoted``, the others ``insufficient`` (no
waiting job fits the free GPUs).

The plan's counts hold until the pool's next plan (if fewer GPUs are idle later,
proportionally fewer): GPUs freed after a plan (or before a pool's first plan) are
``awaiting_cycle`` until the next plan. The replay integrates them exactly
(``replay.metrics.FragMeter``); the live portal sees only the two plans around an
interval, so it counts the GPUs freed in between as idle for half of it
(``interval_gpu_seconds``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduling.engine import Code, Plan, Snapshot
from scheduling.engine.policy import is_demoted, may_borrow
from scheduling.engine.types import READY

CAUSES = (
    "quota",
    "topology",
    "insufficient",
    "reservation",
    "checkpointing",
    "unavailable",
    "demoted",
    "order",
    "beyond_demand",
    "awaiting_cycle",
    "other",
)
# Idle GPUs not counted as healthy: on nodes out of service.
NOT_HEALTHY = frozenset({"unavailable"})
# How pages and reports name each cause (the question is "why is this GPU idle?").
CAUSE_LABELS = {
    "quota": "over quota, may not borrow",
    "topology": "scattered free GPUs (topology)",
    "insufficient": "too few free for the next job",
    "reservation": "held for a reservation",
    "checkpointing": "held while victims checkpoint",
    "unavailable": "nodes out of service",
    "demoted": "demoted jobs (may not borrow)",
    "order": "held by strict order",
    "beyond_demand": "more idle than jobs ask for",
    "awaiting_cycle": "freed since the last cycle",
    "other": "other",
}

_BY_CODE = {
    Code.QUOTA_EXCEEDED: "quota",
    Code.TOPOLOGY: "topology",
    Code.INSUFFICIENT_GPUS: "insufficient",
    Code.PRIORITY: "order",
    Code.PREEMPTING: "checkpointing",
    Code.NODES_UNAVAILABLE: "unavailable",
    Code.DEMOTED: "demoted",
}


def idle_claims(
    free: Mapping[str, int],
    not_ready: Iterable[str],
    decided: Plan,
    gpus_of: Mapping[int, int],
    demoted: Iterable[int],
    also_waiting: Iterable[tuple[int, str]] = (),
    may_borrow: Iterable[int] = (),
) -> dict[str, int]:
    """Idle GPUs per cause after ``decided`` (free GPUs per node once its starts are placed).

    ``gpus_of``: GPUs asked by each waiting job of the plan; ``demoted``: the ids of
    the demoted ones; ``also_waiting``: ``(GPUs, cause)`` of waiting jobs the plan did
    not see (left out by the replay's shortcuts), claiming after the plan's jobs;
    ``may_borrow``: the ids of those the policy lets borrow (``may_borrow``). The counts
    add up to the free GPUs.
    """
    out: dict[str, int] = {}
    left = dict(free)
    for name in not_ready:
        g = left.pop(name, 0)
        if g:
            out["unavailable"] = out.get("unavailable", 0) + g
    verdicts = decided.verdicts
    reserved_jobs = set()
    for res in decided.reservations:
        reserved_jobs.add(res.job_id)
        v = verdicts.get(res.job_id)
        cause = "checkpointing" if v is not None and v.code == Code.PREEMPTING else "reservation"
        for name in res.nodes:
            g = left.pop(name, 0)
            if g:
                out[cause] = out.get(cause, 0) + g
    rest = sum(left.values())
    if rest <= 0:
        return out
    demoted_ids = set(demoted)
    borrowers = set(may_borrow)
    waiting = sorted(
        (v.position if v.position is not None else 1 << 30, jid, v.code)
        for jid, v in verdicts.items()
        if jid not in reserved_jobs and v.code != Code.NEVER_FITS
    )
    for _pos, jid, code in waiting:
        if rest <= 0:
            break
        size = gpus_of.get(jid, 0)
        if code == Code.QUOTA_EXCEEDED and jid in demoted_ids:
            cause = "demoted"
        elif code == Code.QUOTA_EXCEEDED and jid in borrowers:
            cause = "topology" if size <= rest else "insufficient"
        else:
            cause = _BY_CODE.get(code, "other")
        g = min(rest, size)
        if g:
            out[cause] = out.get(cause, 0) + g
            rest -= g
    return claim_rest(out, rest, also_waiting)


def claim_rest(
    out: dict[str, int], rest: int, waiting: Iterable[tuple[int, str]]
) -> dict[str, int]:
    """``rest`` idle GPUs claimed by ``(GPUs, cause)`` in order, then ``beyond_demand``."""
    for gpus, cause in waiting:
        if rest <= 0:
            break
        g = min(rest, gpus)
        if g:
            out[cause] = out.get(cause, 0) + g
            rest -= g
    if rest > 0:
        out["beyond_demand"] = out.get("beyond_demand", 0) + rest
    return out


def table(by_cause: Mapping[str, float]) -> list[tuple[str, float, float]]:
    """``(cause, GPU-seconds, share)`` in ``CAUSES`` order, causes with time only."""
    total = sum(by_cause.values())
    return [
        (c, by_cause[c], by_cause[c] / total if total > 0 else 0.0)
        for c in CAUSES
        if by_cause.get(c, 0) > 0
    ]


# -- the live loop: one applied plan of the whole cluster ------------------------------


@dataclass(frozen=True)
class PlanIdle:
    """What one applied plan leaves idle: ``free_before`` GPUs were free when the cycle
    planned, ``free_after`` once its starts were placed; ``claims`` gives those a cause
    (empty when no job waits); ``waiting``: some job still waits."""

    free_before: int
    free_after: int
    waiting: bool
    claims: dict[str, int] = field(default_factory=dict)


def plan_idle(snapshot: Snapshot, decided: Plan, not_launched: Iterable[int] = ()) -> PlanIdle:
    """Idle GPUs per cause after ``decided`` was applied to ``snapshot``.

    ``not_launched``: jobs the plan started that the backend could not launch (their GPUs
    stay free and they wait, cause ``other``). Free GPUs are the snapshot's (what the
    backend reported) less the placements of the starts that were launched.
    """
    failed = set(not_launched)
    free = {n.name: len(n.free_gpus) for n in snapshot.nodes}
    free_before = sum(free.values())
    used: dict[str, int] = defaultdict(int)
    for s in decided.starts:
        if s.job_id in failed:
            continue
        for slot in s.placement:
            used[slot.node] += len(slot.gpus)
    for name, g in used.items():
        free[name] = max(0, free.get(name, 0) - g)
    free_after = sum(free.values())
    waiting = bool(decided.verdicts) or bool(failed)
    if not waiting or free_after <= 0:
        return PlanIdle(free_before, free_after, waiting)
    not_ready = [n.name for n in snapshot.nodes if n.state != READY]
    gpus_of = {j.id: j.gpus for j in snapshot.pending}
    policy = snapshot.policy
    demoted = [j.id for j in snapshot.pending if is_demoted(j.preemption_count, policy)]
    borrowers = [j.id for j in snapshot.pending
                 if may_borrow(j.preemptible, is_demoted(j.preemption_count, policy), policy)]  # fmt: skip
    retrying = [(gpus_of.get(jid, 0), "other") for jid in sorted(failed)]
    claims = idle_claims(free, not_ready, decided, gpus_of, demoted, retrying, borrowers)
    return PlanIdle(free_before, free_after, waiting, claims)


def interval_gpu_seconds(
    previous: PlanIdle | None, free_before_next: int, seconds: float
) -> dict[str, float]:
    """Idle GPU-seconds per cause between a plan (``previous``) and the next one,
    ``seconds`` later, when ``free_before_next`` GPUs were free.

    The previous plan's claims hold for the whole interval (proportionally fewer if fewer
    GPUs are free at its end); GPUs freed in between, while jobs waited, are
    ``awaiting_cycle`` for half of it (on average they were freed halfway: the live loop
    sees only the two ends of an interval). Nothing while no job waited.
    """
    if previous is None or seconds <= 0 or not previous.waiting:
        return {}
    claimed = sum(previous.claims.values())
    scale = min(1.0, free_before_next / claimed) if claimed > 0 else 0.0
    out = {c: g * scale * seconds for c, g in previous.claims.items() if g}
    freed = free_before_next - previous.free_after
    if freed > 0:
        out["awaiting_cycle"] = out.get("awaiting_cycle", 0.0) + freed * seconds / 2
    return out


def add(totals: Mapping[str, float], more: Mapping[str, float]) -> dict[str, float]:
    """``totals`` plus ``more``, every cause present (0 for the causes without time)."""
    return {c: float(totals.get(c, 0.0)) + float(more.get(c, 0.0)) for c in CAUSES}
