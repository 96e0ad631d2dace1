"""Pending reasons in words and numbers (V1).

Each builder returns ``(code, message, details, remedy)``; the planner adds the
estimated start and the position. ``details`` are the API's machine fields: GPU and node
counts as integers, times as ISO 8601 strings in UTC (``..._at``), durations as whole
seconds (``..._seconds``), names as strings; never an epoch number or a float. Messages
and remedies say the same numbers for people: times as ``2026-12-01 00:30 UTC`` (``when``),
durations as ``2 h 10 min`` (``duration``). A time a message names is the verdict's one
estimated start (or the deadline it is derived from), formatted the same way everywhere.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from typing import Any

from .types import Code, PendingJob

Reason = tuple[str, str, dict[str, Any], str]

# ``details`` key naming why a verdict has no estimated start (absent when it has one).
NO_ESTIMATE = "no_estimate_reason"


def when(t: float | None) -> str:
    """Cluster time for people: ``2026-12-01 00:30 UTC`` (to the minute, truncated, as the
    job page, the API's readers and ``gpuctl`` show it), ``unknown`` for None."""
    if t is None:
        return "unknown"
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def iso(t: float) -> str:
    """Cluster time for machines: ISO 8601 in UTC, to the second (``2026-12-01T00:30:57Z``)."""
    return datetime.fromtimestamp(int(t), tz=UTC).isoformat().replace("+00:00", "Z")


def minute_up(t: float) -> float:
    """Up to the whole minute: a predicted end said as a verdict says times, stable from
    one cycle to the next."""
    return math.ceil(t / 60) * 60


def num(n: int) -> str:
    """A count for people, with thousands separators: ``2,750``, as every page writes it
    (the ``count`` filter, scheduling/templatetags/counts.py; ``Dom.count`` in scripts)."""
    return f"{n:,}"


def count(n: int, noun: str) -> str:
    """A number with its noun for people: ``1 GPU``, ``8 GPUs``, ``1,024 GPUs``."""
    return f"{n} {noun}" if n == 1 else f"{n:,} {noun}s"


def verb(n: int, one: str, many: str) -> str:
    """The verb that agrees with a count: ``verb(1, "is", "are")`` is ``is``."""
    return one if n == 1 else many


def duration(seconds: float) -> str:
    """A duration for people: ``45 s``, ``20 min``, ``2 h 10 min`` (up to 47 h), ``3 d 4 h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    minutes = s // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days:,} d {hours} h" if hours else f"{days:,} d"


def kind_of(job: PendingJob) -> str:
    """' (80 GB, H100, RDMA)' style qualifier for the GPUs a job asks for."""
    parts = []
    if job.gpu_memory_gb:
        parts.append(f"{job.gpu_memory_gb} GB")
    if job.gpu_model:
        parts.append(job.gpu_model)
    if job.rdma:
        parts.append("RDMA")
    return f" ({', '.join(parts)})" if parts else ""


def describe_shape(
    job: PendingJob,
    k: int,
    c: int,
    exclusive: bool,
    node_gpus: int,
    max_rack_nodes: int | None = None,
) -> str:
    """What the job needs, in words. ``max_rack_nodes``: the most nodes of its kind one rack
    has; when fewer than ``k``, it says the job spans racks rather than "in one rack"."""
    kind = kind_of(job)
    if k == 1:
        where = "a whole node to itself" if exclusive else "one node"
        return f"needs {count(job.gpus, 'GPU')}{kind} on {where}"
    rdma = "RDMA " if job.rdma else ""
    rest = kind_of(dataclasses.replace(job, rdma=False))
    if exclusive or c >= node_gpus:
        nodes = f"{k} whole {rdma}nodes{rest}"
    else:
        nodes = f"{k} {rdma}nodes{rest} with {c} free GPUs each,"
    if max_rack_nodes is not None and max_rack_nodes < k:
        return (
            f"needs {nodes} across the fewest racks of one block (no rack has {k} such nodes: "
            f"at most {max_rack_nodes})"
        )
    return f"needs {nodes} in one rack (else the fewest racks of one block)"


def never_fits(job: PendingJob, why: str, details: dict[str, Any]) -> Reason:
    return (
        Code.NEVER_FITS,
        f"This job can never run as asked, even on an empty, healthy cluster: {why}.",
        dict(details, **{NO_ESTIMATE: "it can never run as asked"}),
        "Change the request (fewer GPUs, fewer GPUs per node, less GPU memory, or no RDMA) "
        "and resubmit.",
    )


def quota_exceeded(
    job: PendingJob,
    scope: str,
    name: str,
    held: int,
    quota: int,
    borrow_note: str,
    room_at: float | None = None,
    reserved_at: float | None = None,
    ahead_gpus: int = 0,
    borrow_at: float | None = None,
) -> Reason:
    """Over quota. ``room_at``: when running work of the scope is predicted to have released
    enough for it, after ``ahead_gpus`` GPUs for the jobs ahead of it waiting for the same
    room: the verdict's estimated start (the earliest it could start), said in the remedy
    and stored as ``quota_room_at``. ``reserved_at``: for an overdue job that reserved
    nodes from after its room is due (``Planner.reserve_for_quota_room``), that later
    start, which is then the estimate (``reservation_starts_at``). ``borrow_at``: for a job
    that may borrow, when it is predicted to find idle capacity to borrow, before its room
    (``line_estimate``): then that is the estimate, the one time the remedy says."""
    room = max(0, quota - held)
    details: dict[str, Any] = {
        "scope": scope,
        "name": name,
        "held_gpus": held,
        "quota_gpus": quota,
        "requested_gpus": job.gpus,
        "room_gpus": room,
        "short_gpus": job.gpus - room,
    }
    if ahead_gpus:
        details["waiting_ahead_gpus"] = ahead_gpus
    if job.gpus > quota:
        remedy = f"The job is larger than the whole {scope} quota: ask for a quota increase."
        details[NO_ESTIMATE] = f"it is larger than the whole {scope} quota"
    elif borrow_at is not None:
        own = (
            f"when {scope} {name}'s room comes round to it (the jobs ahead of it wait for "
            f"{num(ahead_gpus)} GPUs of it)"
            if ahead_gpus
            else f"once {num(job.gpus - room)} GPUs of {scope} {name} are released"
        )
        remedy = (
            f"Predicted to start by {when(borrow_at)} on borrowed idle capacity; otherwise it "
            f"starts {own}, or after a quota increase."
        )
        if room_at is not None:
            details["quota_room_at"] = iso(room_at)
    else:
        if ahead_gpus and room_at is not None and reserved_at is None:
            # the room goes round (quota_turns.first_fit): its turn says when, not a count
            released = (
                f"Starts when {scope} {name}'s room comes round to it (predicted by "
                f"{when(room_at)}; the jobs ahead of it wait for {num(ahead_gpus)} GPUs of it)"
            )
        else:
            released = (
                f"Starts once {num(job.gpus - room + ahead_gpus)} GPUs of {scope} {name} are "
                "released"
            )
            if ahead_gpus:
                released += f" ({num(ahead_gpus)} of them for the jobs ahead of it)"
            if reserved_at is not None:
                released += f" and its reserved nodes free (predicted by {when(reserved_at)})"
            elif room_at is not None:
                released += f" (predicted by {when(room_at)})"
        remedy = released + ", or after a quota increase."
        if room_at is not None:
            details["quota_room_at"] = iso(room_at)
        else:
            details[NO_ESTIMATE] = (
                f"no running work of {scope} {name} is predicted to release enough GPUs"
                + (" for it and the jobs ahead of it" if ahead_gpus else "")
            )
        if reserved_at is not None:
            details["reservation_starts_at"] = iso(reserved_at)
        if not job.preemptible:
            remedy += " A preemptible job could borrow idle capacity meanwhile."
        elif borrow_note and room_at is not None:
            # a borrower: its turn for the quota room is the latest it waits, unless it
            # borrows first (docs/engine.md, "Turns for quota room")
            remedy += " It may start sooner on borrowed idle capacity."
    msg = (
        f"{scope.capitalize()} {name} holds {num(held)} of its {num(quota)} GPU quota; "
        f"this job needs {num(job.gpus)}."
    )
    if borrow_note:
        msg += " " + borrow_note
    return Code.QUOTA_EXCEEDED, msg, details, remedy


def nodes_unavailable(job: PendingJob, shape: str, details: dict[str, Any]) -> Reason:
    """The nodes it needs are out of service, or (``maintenance_nodes`` in ``details``)
    enter scheduled maintenance before it is predicted to end."""
    leaving = details.get("maintenance_nodes")
    if leaving:
        starts = when(datetime.fromisoformat(details["maintenance_starts_at"]).timestamp())
        reason = details.get("maintenance_reason") or ""
        reason = reason if len(reason) <= 80 else reason[:79] + "…"  # the details keep it all
        return (
            Code.NODES_UNAVAILABLE,
            f"This job {shape}; that only exists if nodes entering scheduled maintenance are "
            f"counted ({count(leaving, 'matching node')}, {details['maintenance_node_names']}"
            f"{', …' if leaving > 5 else ''}, from {starts}{f': {reason}' if reason else ''}), "
            "and it is predicted to run past the maintenance's start.",
            dict(details, **{NO_ESTIMATE: "it depends on when the maintenance ends"}),
            "Starts when the maintenance is over, or before it if its runtime estimate ends "
            "before the maintenance starts; ask on-call, or request fewer GPUs.",
        )
    return (
        Code.NODES_UNAVAILABLE,
        f"This job {shape}; that only exists if unavailable nodes are counted "
        f"({num(details['unavailable_nodes'])} matching nodes are cordoned, draining, down or "
        "unhealthy).",
        dict(details, **{NO_ESTIMATE: "it depends on when unavailable nodes return to service"}),
        "Starts when enough of those nodes return to service; ask on-call, or request fewer GPUs.",
    )


def priority(
    job: PendingJob,
    shape: str,
    ahead_jobs: int,
    ahead_gpus: int,
    reservations: int,
    strict_order: bool,
    overdue: int = 0,
) -> Reason:
    """Behind higher-priority work: strict order (no backfill), or the GPUs left free this
    cycle would fit it but are reserved for jobs ahead of it (``overdue`` of those
    reservations for jobs past the starvation bound, which go first in their tier)."""
    details: dict[str, Any] = {
        "ahead_jobs": ahead_jobs,
        "ahead_gpus": ahead_gpus,
        "reservations_ahead": reservations,
        "strict_order": int(strict_order),
    }
    if overdue:
        details["overdue_reservations_ahead"] = overdue
    if strict_order:
        msg = (
            "Waiting its turn: the policy keeps strict order and "
            f"{count(ahead_jobs, 'job')} ahead needing {count(ahead_gpus, 'GPU')} "
            f"{verb(ahead_jobs, 'is', 'are')} blocked."
        )
        remedy = "Starts after the jobs ahead of it start."
    else:
        msg = (
            f"This job {shape}; the GPUs left free this cycle would fit it, but they are "
            f"reserved for higher-priority work ({count(reservations, 'reservation')} "
            f"{verb(reservations, 'holds', 'hold')} nodes, and {count(ahead_jobs, 'job')} ahead "
            f"still {verb(ahead_jobs, 'waits', 'wait')} for {count(ahead_gpus, 'GPU')})."
        )
        if overdue:
            msg += (
                f" {overdue} of the reservations are for jobs that have waited past the "
                "starvation bound; they go first."
            )
        remedy = (
            "Starts when the work ahead is placed; a shorter predicted runtime lets it "
            "backfill before reservations."
        )
    return Code.PRIORITY, msg, details, remedy


def quota_held(
    job: PendingJob, scope: str, name: str, holder: int, room_at: float | None
) -> Reason:
    """Behind an overdue job of its queue or line that holds the quota room it waits for
    (#19): this job would take room that job needs and is not predicted to end before."""
    details: dict[str, Any] = {"scope": scope, "name": name, "quota_held_for": holder}
    if room_at is not None:
        details["quota_room_at"] = iso(room_at)
    msg = (
        f"Job {holder} of {scope} {name} has waited past the starvation bound and holds the "
        f"{scope}'s quota room as it is released; this job would take some of it"
        + (f" and is not predicted to end by {when(room_at)}." if room_at is not None else ".")
    )
    remedy = f"Starts once job {holder} has started, or earlier if predicted to end sooner."
    details[NO_ESTIMATE] = f"it waits for job {holder} to start first"
    return Code.PRIORITY, msg, details, remedy


def overdue(reason: Reason, overdue_at: float, bound_s: float) -> Reason:
    """``reason`` for a job past the starvation bound since ``overdue_at`` (#19,
    ``aging.py``): it says so, and that the job now goes first in its tier."""
    code, msg, details, remedy = reason
    msg += (
        f" It has waited past the {duration(bound_s)} starvation bound, so it goes ahead of "
        "every job of its tier that has waited less."
    )
    return code, msg, dict(details, overdue_at=iso(overdue_at)), remedy


def preempting(job: PendingJob, victims: int, gpus: int, deadline: float | None) -> Reason:
    """Victims checkpoint to make room; ``deadline`` (when the last has stopped) is also the
    verdict's estimated start."""
    details: dict[str, Any] = {"victims": victims, "victim_gpus": gpus}
    if deadline is not None:
        details["victims_stop_at"] = iso(deadline)
    else:
        details[NO_ESTIMATE] = "the jobs making room have no stop deadline"
    return (
        Code.PREEMPTING,
        f"Making room: {count(victims, 'running job')} holding {count(gpus, 'GPU')} (lower "
        f"priority, or on borrowed capacity) {verb(victims, 'is', 'are')} being preempted and "
        f"will stop by {when(deadline)}.",
        details,
        "Nothing to do: it starts as soon as they have stopped.",
    )


def topology(job: PendingJob, shape: str, diag: dict[str, Any]) -> Reason:
    where = diag.get("where", "")
    if diag["nodes_needed"] == 1:
        best = f"the emptiest matching node has {num(diag['best_node_free'])}"
    elif not diag["best_rack"]:
        best = "no rack has a whole matching node free"
    else:
        best = (
            f"the best rack ({diag['best_rack']}) has {num(diag['best_rack_nodes'])} and the "
            f"best block {num(diag['best_block_nodes'])} such nodes"
        )
    msg = (
        f"This job {shape}; {num(diag['free_gpus'])} such GPUs are left free this cycle but "
        f"scattered: {best}." + (f" Free GPUs by rack: {where}." if where else "")
    )
    remedy = (
        "Starts when enough neighbouring capacity frees up; fewer GPUs, a smaller "
        "gpus_per_node, or dropping exclusivity would fit sooner."
    )
    return Code.TOPOLOGY, msg, diag, remedy


def insufficient(job: PendingJob, shape: str, diag: dict[str, Any]) -> Reason:
    short = job.gpus - diag["free_gpus"]
    free = diag["free_gpus"]
    left = (
        f"only {count(free, 'matching GPU')} {verb(free, 'is', 'are')}"
        if free
        else "no matching GPU is"
    )
    msg = f"This job {shape}; {left} left free this cycle, {num(short)} short."
    remedy = f"Starts when {count(short, 'more matching GPU')} {verb(short, 'is', 'are')} released."
    details = dict(diag, short_gpus=short)
    reclaims = diag.get("inference_reclaims_gpus")
    if reclaims:
        end = diag["predicted_end_at"]
        details["predicted_end_at"] = iso(end)
        msg += (
            f" {num(reclaims)} more are free on nodes shared with online inference, which is "
            f"predicted to want them back before this job would end ({when(end)})."
        )
        remedy += " A shorter predicted runtime would let it use the shared nodes' GPUs."
    return Code.INSUFFICIENT_GPUS, msg, details, remedy


def demoted(job: PendingJob, underlying: Reason, demote_after: int) -> Reason:
    code, msg, details, remedy = underlying
    return (
        Code.DEMOTED,
        f"Preempted {job.preemption_count} times (more than {demote_after}): moved to the "
        f"back of its tier and protected from further preemption. Meanwhile: {msg}",
        dict(details, underlying_code=code, preemption_count=job.preemption_count),
        "Re-check the job's priority and queue with your team lead. " + remedy,
    )


# Why a waiting job has no estimated start, when its reason does not say.
NO_RESERVATION = (
    "only the first {n} jobs blocked for capacity get a reservation and an estimated start; "
    "jobs ahead of it hold them"
)
NO_PLACEMENT_AHEAD = "no placement opens up for it even when all running work ends as predicted"
STRICT_ORDER = "in strict order it starts only after the blocked jobs ahead of it"
