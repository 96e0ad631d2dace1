"""Idle capacity by cause: why GPUs sit idle while jobs wait (pure, stdlib + engine types).

After every plan of a pool, each GPU left free while some job of the pool waits is
given exactly one cause, in this order:

1. ``unavailable``: it is on a node that is not ready (draining, cordoned, down,
   unhealthy).
2. ``checkpointing``: it is on a node held for a preemptor whose victims are still
   checkpointing (the preemptor's verdict is ``PREEMPTING``).
3. ``reservation``: it is on a node held for a blocked job's reservation.
4. The rest is claimed by the waiting jobs without a reservation, in scheduling
   order (verdict ``position``), each up to its own GPU count, with the cause its
   verdict gives: ``demoted`` (``DEMOTED``, or over quota while demoted: a demoted
   job may not borrow), ``quota`` (``QUOTA_EXCEEDED``: over quota and not allowed
   to borrow), ``topology`` (``TOPOLOGY``: enough GPUs free but scattered),
   ``insufficient`` (``INSUFFICIENT_GPUS``: it needs more GPUs than are free),
   ``order`` (``PRIORITY``: held behind jobs ahead of it), ``unavailable``
   (``NODES_UNAVAILABLE``), ``checkpointing`` (``PREEMPTING``), ``other``
   (any other code).
5. Waiting jobs the plan did not see (the replay's shortcuts leave out jobs whose
   line is at its quota when the policy cannot borrow or preempt) claim next:
   ``quota``, or ``demoted`` for a demoted one.
6. ``beyond_demand``: idle GPUs left once every waiting job has claimed its size
   (more idle GPUs than the waiting jobs ask for).

A plan the replay skips because nothing could start (``shortcuts``) is attributed
the same way without a plan: jobs over their line's quota (when the policy cannot
borrow or preempt) claim ``quota`` / ``demoted``, the others ``insufficient`` (no
waiting job fits the free GPUs).

The plan's counts hold until the pool's next plan (``metrics.FragMeter`` integrates
them; if fewer GPUs are idle later, proportionally fewer): GPUs freed after a plan
(or before a pool's first plan, or after a plan that left nobody waiting) are
``awaiting_cycle`` until the next plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduling.engine import Code, Plan

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
) -> dict[str, int]:
    """Idle GPUs per cause after ``decided`` (free GPUs per node once its starts are placed).

    ``gpus_of``: GPUs asked by each waiting job of the plan; ``demoted``: the ids of
    the demoted ones; ``also_waiting``: ``(GPUs, cause)`` of waiting jobs the plan did
    not see (left out by the replay's shortcuts), claiming after the plan's jobs. The
    counts add up to the free GPUs.
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
    waiting = sorted(
        (v.position if v.position is not None else 1 << 30, jid, v.code)
        for jid, v in verdicts.items()
        if jid not in reserved_jobs and v.code != Code.NEVER_FITS
    )
    for _pos, jid, code in waiting:
        if rest <= 0:
            break
        if code == Code.QUOTA_EXCEEDED and jid in demoted_ids:
            cause = "demoted"
        else:
            cause = _BY_CODE.get(code, "other")
        g = min(rest, gpus_of.get(jid, 0))
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
