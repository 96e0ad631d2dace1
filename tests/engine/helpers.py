"""Small builders for engine tests: readable snapshots in a few lines."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from scheduling.engine import (
    LineView,
    NodeView,
    PendingJob,
    Plan,
    PolicyConfig,
    QueueView,
    RunningJob,
    Slot,
    Snapshot,
    Tier,
    check_plan,
    plan,
)

NOW = 1_000_000.0
HOUR = 3600.0

TIERS = {
    "urgent": Tier.URGENT,
    "core": Tier.CORE,
    "finetune": Tier.FINETUNE,
    "experiment": Tier.EXPERIMENT,
}


def node(
    name: str,
    rack: str = "r0",
    block: str = "b0",
    gpus: int = 8,
    free: Iterable[int] | None = None,
    **kw: Any,
) -> NodeView:
    kw.setdefault("gpu_model", "H100")
    kw.setdefault("gpu_memory_gb", 80)
    return NodeView(
        name=name,
        rack=rack,
        block=block,
        gpus_total=gpus,
        free_gpus=tuple(range(gpus)) if free is None else tuple(free),
        **kw,
    )


def rack(prefix: str, count: int, rack: str, block: str = "b0", **kw: Any) -> list[NodeView]:
    return [node(f"{prefix}{i:02d}", rack=rack, block=block, **kw) for i in range(count)]


def standard_queues(line: str = "llm", **quotas: int | None) -> list[QueueView]:
    """One queue per tier in ``line``, named ``<line>-<tier>``."""
    return [
        QueueView(f"{line}-{label}", line, tier, quotas.get(label)) for label, tier in TIERS.items()
    ]


def pjob(
    id: int,
    gpus: int,
    tier: str = "experiment",
    line: str = "llm",
    queue: str | None = None,
    **kw: Any,
) -> PendingJob:
    kw.setdefault("submitted_at", NOW - 1000 + id)
    return PendingJob(
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
) -> RunningJob:
    items = placement.items() if isinstance(placement, dict) else placement
    slots = tuple(Slot(n, tuple(g)) for n, g in items)
    kw.setdefault("preemptible", TIERS[tier] < Tier.CORE)
    kw.setdefault("started_at", NOW - HOUR)
    kw.setdefault("predicted_end", NOW + HOUR)
    return RunningJob(
        id=id,
        queue=queue or f"{line}-{tier}",
        line=line,
        tier=TIERS[tier],
        gpus=sum(len(s.gpus) for s in slots),
        placement=slots,
        **kw,
    )


def occupy(nodes: Sequence[NodeView], running: Iterable[RunningJob]) -> tuple[NodeView, ...]:
    """Remove the running jobs' GPUs from the nodes' free lists."""
    used: dict[str, set[int]] = {}
    excl: set[str] = set()
    for r in running:
        for s in r.placement:
            used.setdefault(s.node, set()).update(s.gpus)
            if r.exclusive_node:
                excl.add(s.node)
    out = []
    for n in nodes:
        taken = used.get(n.name, set())
        out.append(
            NodeView(
                **{
                    **{f: getattr(n, f) for f in NodeView.__dataclass_fields__},
                    "free_gpus": tuple(g for g in n.free_gpus if g not in taken),
                    "exclusive": n.exclusive or n.name in excl,
                }
            )
        )
    return tuple(out)


def snap(
    nodes: Sequence[NodeView],
    pending: Sequence[PendingJob] = (),
    running: Sequence[RunningJob] = (),
    lines: Sequence[LineView] | None = None,
    queues: Sequence[QueueView] | None = None,
    policy: PolicyConfig | None = None,
) -> Snapshot:
    if lines is None:
        names = sorted({j.line for j in pending} | {r.line for r in running} | {"llm"})
        lines = [LineView(n, None) for n in names]
    if queues is None:
        queues = [q for line in lines for q in standard_queues(line.name)]
    return Snapshot(
        nodes=occupy(nodes, running),
        lines=tuple(lines),
        queues=tuple(queues),
        running=tuple(running),
        pending=tuple(pending),
        policy=policy or PolicyConfig(),
    )


def run(snapshot: Snapshot, now: float = NOW) -> Plan:
    """plan() and insist that the plan passes every invariant."""
    result = plan(snapshot, now)
    violations = check_plan(snapshot, result)
    assert violations == [], violations
    return result


def started(result: Plan) -> dict[int, dict[str, tuple[int, ...]]]:
    return {s.job_id: {slot.node: slot.gpus for slot in s.placement} for s in result.starts}


def victims(result: Plan) -> dict[int, int]:
    return {p.victim_id: p.for_job_id for p in result.preemptions}


def code(result: Plan, job_id: int) -> str:
    return result.verdicts[job_id].code
