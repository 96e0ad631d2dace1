"""Hypothesis strategies: small random clusters, contracts and workloads.

Sizes and policy switches are drawn by Hypothesis (and shrink); the details
come from an RNG seeded by Hypothesis, which keeps each example cheap enough for
thousands of them. Snapshots are consistent by construction: running jobs hold GPUs that are
removed from their nodes' free lists, exclusive holders flag their nodes, and
preempting jobs point at pending jobs.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import strategies as st

from scheduling.engine import types as et

NOW = 100_000.0
STATES = ("ready",) * 8 + ("cordoned", "draining", "down", "unhealthy")
MODELS = ("m1", "m2", "m3")


@st.composite
def policies(draw) -> et.PolicyConfig:
    return et.PolicyConfig(
        backfill=draw(st.booleans()),
        borrowing=draw(st.booleans()),
        preemption=draw(st.booleans() | st.just(True)),
        strict_fifo=draw(st.integers(0, 4)) == 0,
        grace_seconds=draw(st.sampled_from([0.0, 60.0, 300.0])),
        demote_after=draw(st.sampled_from([1, 3])),
        max_reservations=draw(st.integers(0, 3)),
        default_runtime_s=draw(st.sampled_from([600.0, 3600.0, 43200.0])),
        max_preemptors=draw(st.integers(1, 4)),
        preemption_mode=draw(st.sampled_from(["graceful", "graceful", "cold"])),
        swap_quota=draw(st.booleans()),
        overrun_foresight=draw(st.sampled_from([0.0, 0.5, 1.0])),
    )


def random_policy(rng: random.Random) -> et.PolicyConfig:
    """The same policy space as ``policies()``, drawn from a plain RNG (for fixed corpora)."""
    return et.PolicyConfig(
        backfill=rng.random() < 0.5,
        borrowing=rng.random() < 0.5,
        preemption=rng.random() < 0.75,
        strict_fifo=rng.randint(0, 4) == 0,
        grace_seconds=rng.choice([0.0, 60.0, 300.0]),
        demote_after=rng.choice([1, 3]),
        max_reservations=rng.randint(0, 3),
        default_runtime_s=rng.choice([600.0, 3600.0, 43200.0]),
        max_preemptors=rng.randint(1, 4),
        preemption_mode=rng.choice(["graceful", "graceful", "cold"]),
    )


@st.composite
def snapshots(
    draw, max_nodes: int = 10, max_running: int = 12, max_pending: int = 14
) -> et.Snapshot:
    """Sizes are drawn by Hypothesis (so they shrink); details come from a seeded RNG."""
    n_nodes = draw(st.integers(1, max_nodes))
    n_running = draw(st.integers(0, max_running))
    n_pending = draw(st.integers(0, max_pending))
    n_lines = draw(st.integers(1, 3))
    policy = draw(policies())
    return build_snapshot(
        random.Random(draw(st.integers(0, 2**32 - 1))),
        n_nodes,
        n_running,
        n_pending,
        n_lines,
        policy,
    )


def identity(job_id: int, line: str, tier: et.Tier) -> dict[str, Any]:
    """A generated job's id, line, tier and queue (its line's queue of that tier)."""
    return {"id": job_id, "queue": f"{line}-{tier.label}", "line": line, "tier": tier}


def build_snapshot(
    rng: random.Random,
    n_nodes: int,
    n_running: int,
    n_pending: int,
    n_lines: int,
    policy: et.PolicyConfig,
) -> et.Snapshot:
    n_blocks = rng.randint(1, 2)
    n_racks = rng.randint(n_blocks, 4)
    rack_block = [r % n_blocks for r in range(n_racks)]
    specs = []
    for i in range(n_nodes):
        r = rng.randrange(n_racks)
        specs.append(
            dict(
                name=f"n{i}",
                rack=f"r{r}",
                block=f"b{rack_block[r]}",
                gpu_model=rng.choice(["H100", "A100"]),
                gpu_memory_gb=rng.choice([40, 80]),
                gpus_total=rng.choice([8, 8, 8, 4]),
                rdma=rng.random() < 0.75,
                state=rng.choice(STATES),
                recent_models=tuple(rng.sample(MODELS, rng.randint(0, 2))),
                inference=rng.random() < 0.1,
                pool=None,
            )
        )
    free = {sp["name"]: list(range(sp["gpus_total"])) for sp in specs}
    total = {sp["name"]: sp["gpus_total"] for sp in specs}
    excl: set[str] = set()

    lines = []
    queues = []
    for li in range(n_lines):
        name = f"L{li}"
        quota = None if rng.random() < 0.4 else rng.randint(0, 64)
        lines.append(et.LineView(name, quota, rng.randint(0, 16)))
        for tier in et.Tier:
            q_quota = None if rng.random() < 0.6 else rng.randint(0, 48)
            preempts = None
            if rng.random() < 0.3:
                preempts = frozenset(t for t in et.Tier if rng.random() < 0.4)
            queues.append(
                et.QueueView(
                    f"{name}-{tier.label}", name, tier, q_quota, rng.randint(0, 16), preempts
                )
            )

    pending_ids = list(range(1, n_pending + 1))
    running = []
    for jid in range(1000, 1000 + n_running):
        tier = rng.choice(list(et.Tier))
        line = rng.choice(lines).name
        placement = []
        exclusive = False
        if rng.random() < 0.2:
            whole = [n for n in free if len(free[n]) == total[n] and n not in excl]
            if len(whole) >= 2:
                for n in rng.sample(whole, rng.randint(2, min(3, len(whole)))):
                    placement.append(et.Slot(n, tuple(free[n])))
                    free[n] = []
        if not placement:
            candidates = [n for n in free if free[n] and n not in excl]
            if not candidates:
                break
            n = rng.choice(candidates)
            k = rng.randint(1, len(free[n]))
            gpus = rng.sample(free[n], k)
            exclusive = len(free[n]) == total[n] and k == total[n] and rng.random() < 0.3
            exclusive = exclusive or (len(free[n]) == total[n] and rng.random() < 0.1)
            for g in gpus:
                free[n].remove(g)
            placement.append(et.Slot(n, tuple(sorted(gpus))))
            if exclusive:
                excl.add(n)
        started = NOW - rng.randint(0, 20_000)
        state = "running"
        preempted_for = None
        deadline = None
        if pending_ids and rng.random() < 0.15:
            state = "preempting"
            preempted_for = rng.choice(pending_ids + [99_999])
            deadline = NOW + rng.randint(-100, 600)
        running.append(
            et.RunningJob(
                **identity(jid, line, tier),
                gpus=sum(len(sl.gpus) for sl in placement),
                placement=tuple(placement),
                preemptible=rng.random() < 0.7,
                preemption_count=rng.randint(0, 5),
                started_at=started,
                last_checkpoint_at=None if rng.random() < 0.5 else started + 10,
                predicted_end=None if rng.random() < 0.2 else NOW + rng.randint(-3000, 30_000),
                state=state,
                exclusive_node=exclusive,
                model_name=rng.choice([None, *MODELS]),
                preempted_for=preempted_for,
                preempt_deadline=deadline,
                borrowed=rng.random() < 0.3,
            )
        )

    nodes = tuple(
        et.NodeView(
            **{**sp, "free_gpus": tuple(sorted(free[sp["name"]])), "exclusive": sp["name"] in excl}
        )
        for sp in specs
    )

    pending = []
    tiers = (
        [et.Tier.URGENT] * 3
        + [et.Tier.CORE] * 2
        + [et.Tier.FINETUNE, et.Tier.EXPERIMENT, et.Tier.EXPERIMENT]
    )
    for jid in pending_ids:
        tier = rng.choice(tiers)
        line = rng.choice(lines).name
        pending.append(
            et.PendingJob(
                **identity(jid, line, tier),
                gpus=rng.choice([1, 1, 2, 3, 4, 4, 6, 8, 8, 8, 12, 16, 16, 24, 32, 40]),
                gpus_per_node=None if rng.random() < 0.8 else rng.randint(1, 8),
                gpu_memory_gb=None if rng.random() < 0.85 else rng.choice([40, 80]),
                rdma=rng.random() < 0.3,
                exclusive_node=rng.random() < 0.1,
                avoid_inference=rng.random() < 0.2,
                preemptible=rng.choice([None, True, False]),
                submitted_at=NOW - rng.randint(0, 5000),
                preemption_count=rng.choice([0, 0, 0, 1, 2, 3, 4, 5]),
                model_name=rng.choice([None, *MODELS]),
                predicted_runtime_s=rng.choice([None, 60.0, 600.0, 3600.0, 36000.0]),
                gpu_model=None if rng.random() < 0.85 else rng.choice(["H100", "A100"]),
            )
        )
    return et.Snapshot(
        nodes=nodes,
        lines=tuple(lines),
        queues=tuple(queues),
        running=tuple(running),
        pending=tuple(pending),
        policy=policy,
    )
