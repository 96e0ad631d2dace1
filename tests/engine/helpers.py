"""Small builders for engine tests: readable snapshots in a few lines."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from scheduling.engine import check_plan, plan
from scheduling.engine import types as et

NOW = 1_000_000.0
HOUR = 3600.0

# label -> tier, highest first (the order of ``standard_queues``)
TIERS = {t.label: t for t in sorted(et.Tier, reverse=True)}


def node(
    name: str,
    rack: str = "r0",
    block: str = "b0",
    gpus: int = 8,
    free: Iterable[int] | None = None,
    **kw: Any,
) -> et.NodeView:
    kw.setdefault("gpu_model", "H100")
    kw.setdefault("gpu_memory_gb", 80)
    return et.NodeView(
        name=name,
        rack=rack,
        block=block,
        gpus_total=gpus,
        free_gpus=tuple(range(gpus)) if free is None else tuple(free),
        **kw,
    )


def rack(prefix: str, count: int, rack: str, block: str = "b0", **kw: Any) -> list[et.NodeView]:
    return [node(f"{prefix}{i:02d}", rack=rack, block=block, **kw) for i in range(count)]


def standard_queues(line: str = "llm", **quotas: int | None) -> list[et.QueueView]:
    """One queue per tier in ``line``, named ``<line>-<tier>``."""
    return [
        et.QueueView(f"{line}-{label}", line, tier, quotas.get(label))
        for label, tier in TIERS.items()
    ]


def pjob(
    id: int,
    gpus: int,
    tier: str = "experiment",
    line: str = "llm",
    queue: str | None = None,
    **kw: Any,
) -> et.PendingJob:
    kw.setdefault("submitted_at", NOW - 1000 + id)
    return et.PendingJob(
        id=id,
        queue=queue or f"{line}-{tier}",
        line=line,
        tier=TIERS[tier],
        gpus=gpus,
        **kw,
    )


def rjob(
    id: int,
    placement: dict[str, Sequence[int]] | Sequence[tuple[str, Sequence[int]]],
    tier: str = "experiment",
    line: str = "llm",
    queue: str | None = None,
    **kw: Any,
) -> et.RunningJob:
    items = placement.items() if isinstance(placement, dict) else placement
    slots = tuple(et.Slot(n, tuple(g)) for n, g in items)
    kw.setdefault("preemptible", TIERS[tier] < et.Tier.CORE)
    kw.setdefault("started_at", NOW - HOUR)
    kw.setdefault("predicted_end", NOW + HOUR)
    return et.RunningJob(
        id=id,
        queue=queue or f"{line}-{tier}",
        line=line,
        tier=TIERS[tier],
        gpus=sum(len(s.gpus) for s in slots),
        placement=slots,
        **kw,
    )


def occupy(
    nodes: Sequence[et.NodeView], running: Iterable[et.RunningJob]
) -> tuple[et.NodeView, ...]:
    """Remove the running jobs' GPUs from the nodes' free lists."""
    used: dict[str, set[int]] = {}
    excl: set[str] = set()
    for r in running:
        for s in r.placement:
            used.setdefault(s.node, set()).update(s.gpus)
            if r.exclusive_node:
                excl.add(s.node)
    return tuple(
        dataclasses.replace(
            n,
            free_gpus=tuple(g for g in n.free_gpus if g not in used.get(n.name, ())),
            exclusive=n.exclusive or n.name in excl,
        )
        for n in nodes
    )


def snap(
    nodes: Sequence[et.NodeView],
    pending: Sequence[et.PendingJob] = (),
    running: Sequence[et.RunningJob] = (),
    lines: Sequence[et.LineView] | None = None,
    queues: Sequence[et.QueueView] | None = None,
    policy: et.PolicyConfig | None = None,
) -> et.Snapshot:
    if lines is None:
        names = sorted({j.line for j in pending} | {r.line for r in running} | {"llm"})
        lines = [et.LineView(n, None) for n in names]
    if queues is None:
        queues = [q for line in lines for q in standard_queues(line.name)]
    return et.Snapshot(
        nodes=occupy(nodes, running),
        lines=tuple(lines),
        queues=tuple(queues),
        running=tuple(running),
        pending=tuple(pending),
        policy=policy or et.PolicyConfig(),
    )


def run(snapshot: et.Snapshot, now: float = NOW) -> et.Plan:
    """plan() and insist that the plan passes every invariant."""
    result = plan(snapshot, now)
    violations = check_plan(snapshot, result)
    assert violations == [], violations
    return result


def started(result: et.Plan) -> dict[int, dict[str, tuple[int, ...]]]:
    return {s.job_id: {slot.node: slot.gpus for slot in s.placement} for s in result.starts}


def victims(result: et.Plan) -> dict[int, int]:
    return {p.victim_id: p.for_job_id for p in result.preemptions}


def code(result: et.Plan, job_id: int) -> str:
    return result.verdicts[job_id].code
