"""The one placement check the real backends make before they start a run.

The engine asks for exact GPUs; a real cluster must run them exactly or refuse
(Slurm and Kubernetes pick physical GPUs themselves, so the portal checks first,
against its last observation). The simulated cluster makes the same checks itself
(``scheduling.simcore``), as a real one would.

Order of the checks, so that a request wrong in several ways always gets the same
answer: the request's own shape (:func:`shape_problems`), then node by node:
unknown, refused by the backend (down, drained, cordoned), GPU indices beyond the
node, GPUs in use, an exclusive run on a node that is not empty. Every refusal is
permanent except what the backend says otherwise in ``NodeCapacity.refusal``.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass

from scheduling.backends.base import (
    BackendError,
    LaunchRequest,
    PermanentBackendError,
    parse_run_ref,
)
from scheduling.engine.types import Slot


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """One node as the placement check sees it. ``refusal``: why nothing may start there
    now (the backend's own error, e.g. a drained Slurm node), or None."""

    gpus_total: int
    free_gpus: Sequence[int]
    refusal: BackendError | None = None


def shape_problems(placement: Sequence[Slot]) -> list[str]:
    """What is wrong with a placement on its face, before any node is looked at."""
    problems = []
    if not placement:
        problems.append("placement is empty")
    seen: set[str] = set()
    for slot in placement:
        if not slot.gpus:
            problems.append(f"no GPUs on {slot.node}")
        if len(set(slot.gpus)) != len(slot.gpus) or any(g < 0 for g in slot.gpus):
            problems.append(f"bad GPU indices {list(slot.gpus)} on {slot.node}")
        if slot.node in seen:
            problems.append(f"node {slot.node} listed twice")
        seen.add(slot.node)
    return problems


def check_placement(
    request: LaunchRequest, nodes: Mapping[str, NodeCapacity], *, unknown_hint: str = ""
) -> None:
    """Raise the backend error for the first reason ``request`` cannot run exactly as asked.

    ``nodes`` holds at least the placement's known nodes; ``unknown_hint`` follows
    "unknown node X" (where the backend looked, e.g. " in partition gpu").
    """
    problems = shape_problems(request.placement)
    if problems:
        raise PermanentBackendError(problems[0], code="invalid_placement")
    for slot in request.placement:
        node = nodes.get(slot.node)
        if node is None:
            raise PermanentBackendError(
                f"unknown node {slot.node}{unknown_hint}", code="unknown_node"
            )
        if node.refusal is not None:
            raise node.refusal
        if any(g >= node.gpus_total for g in slot.gpus):
            raise PermanentBackendError(
                f"bad GPU indices {list(slot.gpus)} on {slot.node} ({node.gpus_total} GPUs)",
                code="invalid_placement",
            )
        busy = [g for g in slot.gpus if g not in node.free_gpus]
        if busy:
            raise PermanentBackendError(f"{slot.node} GPU(s) {busy} are in use", code="gpu_busy")
        if request.exclusive_node and len(node.free_gpus) != node.gpus_total:
            raise PermanentBackendError(
                f"{slot.node} is not empty; an exclusive run needs the whole node",
                code="gpu_busy",
            )


def launch_ref(request: LaunchRequest) -> tuple[int, int]:
    """(job id, attempt) of the run a launch names; a ref of another job is refused."""
    parsed = parse_run_ref(request.ref)
    if parsed is None or parsed[0] != request.job_id:
        raise PermanentBackendError(
            f"run ref {request.ref!r} does not name job {request.job_id}", code="bad_ref"
        )
    return parsed


def take_gpus(free: MutableMapping[str, list[int]], request: LaunchRequest) -> None:
    """Mark a launched run's GPUs taken in a backend's view of free GPUs (an exclusive
    run takes its whole nodes), so later launches in the same cycle see them busy."""
    for slot in request.placement:
        if request.exclusive_node:
            free[slot.node] = []
        else:
            free[slot.node] = [g for g in free.get(slot.node, []) if g not in slot.gpus]
