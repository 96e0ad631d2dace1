"""Pending reasons in words and numbers (V1).

Each builder returns ``(code, message, details, remedy)``; the planner adds the
estimated start and the position. Details hold only numbers and strings so they
serialise straight into the API's ``pending_reason.details``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from .types import Code, PendingJob

Reason = tuple[str, str, dict[str, Any], str]


def when(t: float | None) -> str:
    if t is None:
        return "unknown"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


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


def describe_shape(job: PendingJob, k: int, c: int, exclusive: bool, node_gpus: int) -> str:
    kind = kind_of(job)
    if k == 1:
        where = "a whole node to itself" if exclusive else "one node"
        return f"needs {job.gpus} GPUs{kind} on {where}"
    rdma = "RDMA " if job.rdma else ""
    rest = kind_of(dataclasses.replace(job, rdma=False))
    if exclusive or c >= node_gpus:
        return f"needs {k} whole {rdma}nodes{rest} in one rack (else the fewest racks of one block)"
    return (
        f"needs {k} {rdma}nodes{rest} with {c} free GPUs each, in one rack "
        "(else the fewest racks of one block)"
    )


def never_fits(job: PendingJob, why: str, details: dict[str, Any]) -> Reason:
    return (
        Code.NEVER_FITS,
        f"This job can never run as asked: {why}.",
        details,
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
) -> Reason:
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
    if job.gpus > quota:
        remedy = f"The job is larger than the whole {scope} quota: ask for a quota increase."
    else:
        remedy = (
            f"Starts once {job.gpus - room} GPUs of {scope} {name} are released"
            + (f" (predicted by {when(room_at)})" if room_at is not None else "")
            + ", or after a quota increase."
        )
        if room_at is not None:
            details["quota_room_at"] = room_at
        if not job.preemptible:
            remedy += " A preemptible job could borrow idle capacity meanwhile."
    msg = (
        f"{scope.capitalize()} {name} holds {held} of its {quota} GPU quota; "
        f"this job needs {job.gpus}."
    )
    if borrow_note:
        msg += " " + borrow_note
    return Code.QUOTA_EXCEEDED, msg, details, remedy


def nodes_unavailable(job: PendingJob, shape: str, details: dict[str, Any]) -> Reason:
    return (
        Code.NODES_UNAVAILABLE,
        f"This job {shape}; that only exists if unavailable nodes are counted "
        f"({details['unavailable_nodes']} matching nodes are cordoned, draining, down or "
        "unhealthy).",
        details,
        "Starts when enough of those nodes return to service; ask on-call, or request fewer GPUs.",
    )


def priority(
    job: PendingJob,
    shape: str,
    ahead_jobs: int,
    ahead_gpus: int,
    started_jobs: int,
    started_gpus: int,
    reservations: int,
    strict_order: bool,
) -> Reason:
    details: dict[str, Any] = {
        "ahead_jobs": ahead_jobs,
        "ahead_gpus": ahead_gpus,
        "started_ahead_jobs": started_jobs,
        "started_ahead_gpus": started_gpus,
        "reservations_ahead": reservations,
        "strict_order": int(strict_order),
    }
    if strict_order:
        msg = (
            f"Waiting its turn: the policy keeps strict order and {ahead_jobs} job(s) ahead "
            f"needing {ahead_gpus} GPUs are blocked."
        )
        remedy = "Starts after the jobs ahead of it start."
    else:
        msg = (
            f"This job {shape}; that capacity is free but taken or reserved by higher-priority "
            f"work: {started_jobs} job(s) ahead started now with {started_gpus} GPUs, "
            f"{reservations} reservation(s) hold nodes, and {ahead_jobs} job(s) ahead still "
            f"wait for {ahead_gpus} GPUs."
        )
        remedy = (
            "Starts when the work ahead is placed; a shorter predicted runtime lets it "
            "backfill before reservations."
        )
    return Code.PRIORITY, msg, details, remedy


def preempting(job: PendingJob, victims: int, gpus: int, deadline: float | None) -> Reason:
    return (
        Code.PREEMPTING,
        f"Making room: {victims} running job(s) holding {gpus} GPUs (lower priority, or "
        f"on borrowed capacity) are being preempted and will stop by {when(deadline)}.",
        {"victims": victims, "victim_gpus": gpus, "deadline": deadline or 0.0},
        "Nothing to do: it starts as soon as they have stopped.",
    )


def topology(job: PendingJob, shape: str, diag: dict[str, Any]) -> Reason:
    where = diag.get("where", "")
    if diag["nodes_needed"] == 1:
        best = f"the emptiest matching node has {diag['best_node_free']}"
    else:
        best = (
            f"the best rack ({diag['best_rack']}) has {diag['best_rack_nodes']} and the best "
            f"block {diag['best_block_nodes']} such nodes"
        )
    msg = f"This job {shape}; {diag['free_gpus']} such GPUs are free but scattered: {best}." + (
        f" Free GPUs by rack: {where}." if where else ""
    )
    remedy = (
        "Starts when enough neighbouring capacity frees up; fewer GPUs, a smaller "
        "gpus_per_node, or dropping exclusivity would fit sooner."
    )
    return Code.TOPOLOGY, msg, diag, remedy


def insufficient(job: PendingJob, shape: str, diag: dict[str, Any]) -> Reason:
    short = job.gpus - diag["free_gpus"]
    msg = f"This job {shape}; only {diag['free_gpus']} matching GPUs are free, {short} short."
    remedy = f"Starts when {short} more matching GPUs are released."
    return Code.INSUFFICIENT_GPUS, msg, dict(diag, short_gpus=short), remedy


def demoted(job: PendingJob, underlying: Reason, demote_after: int) -> Reason:
    code, msg, details, remedy = underlying
    return (
        Code.DEMOTED,
        f"Preempted {job.preemption_count} times (more than {demote_after}): moved to the "
        f"back of its tier and protected from further preemption. Meanwhile: {msg}",
        dict(details, underlying_code=code, preemption_count=job.preemption_count),
        "Re-check the job's priority and queue with your team lead. " + remedy,
    )
