"""Benchmark of one scheduling decision at cluster scale: ``plan()`` + ``check_plan()``.

    python -m bench.engine --gpus 10000 --pending 5000 --running 2000 --json

builds a random but realistic snapshot (8-GPU nodes in racks of 32, 4 racks per
network block, a few non-RDMA / 40 GB / inference racks, ~2% of nodes out of
service, four business lines with quotas and guarantees, the four tiers, sizes
from 1 to 256 GPUs, a fragmented and nearly full cluster, some borrowed and
some preempting work) and times the engine over several runs. ``--tight-quotas`` sets
every line's quota to what it holds within quota, so that jobs which may not borrow start
by quota swap (``tighten_quotas``): on the default cluster only the odd urgent job short
of its line's quota swaps (in place of an eviction).
``run_bench(...)`` returns the same figures as a dict for the
``bench_cycle`` management command; ``build_snapshot`` is also the cluster that
``bench_cycle --with-db`` and ``bench_pages`` load into the database (``bench.scale``).
Pure like the engine: no Django.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

from scheduling.engine import check_plan, plan
from scheduling.engine.accounting import snapshot_usage
from scheduling.engine.types import (
    PREEMPTING,
    LineView,
    NodeView,
    PendingJob,
    PolicyConfig,
    QueueView,
    RunningJob,
    Slot,
    Snapshot,
    Tier,
)

from .latency import percentile

NODE_GPUS = 8
RACK_NODES = 32
BLOCK_RACKS = 4
MODELS = ("llama-70b", "llama-8b", "qwen-14b", "mixtral", "vit-g", "bert-l", "sd-xl", "t5-xxl")
LINES = (("llm", 0.40), ("search", 0.25), ("multimodal", 0.25), ("ads", 0.15))
TIER_MIX = ((Tier.URGENT, 0.02), (Tier.CORE, 0.18), (Tier.FINETUNE, 0.30), (Tier.EXPERIMENT, 0.50))
PENDING_SIZES = ((1, 20), (2, 10), (4, 20), (8, 25), (16, 10), (32, 7), (64, 4), (128, 3), (256, 1))
RUNNING_SIZES = ((1, 30), (2, 15), (4, 25), (8, 22), (16, 5), (32, 2), (64, 0.7), (128, 0.3))


def _pick(rng: random.Random, table: tuple[tuple[Any, float], ...]) -> Any:
    values = [v for v, _ in table]
    weights = [w for _, w in table]
    return rng.choices(values, weights)[0]


def build_snapshot(gpus: int, pending: int, running: int, seed: int = 0) -> Snapshot:
    """A deterministic random snapshot of the given size."""
    rng = random.Random(seed)
    n_nodes = max(1, gpus // NODE_GPUS)
    n_racks = (n_nodes + RACK_NODES - 1) // RACK_NODES
    special = {r: "" for r in range(n_racks)}
    if n_racks >= 8:
        special[n_racks - 1] = "nordma"
        special[n_racks - 2] = "nordma"
        special[n_racks - 3] = "a100"
        special[n_racks - 4] = "a100"
        special[n_racks - 5] = "inference"
    states = ("cordoned", "draining", "down", "unhealthy")
    free: list[list[int]] = []
    meta = []
    for i in range(n_nodes):
        r = i // RACK_NODES
        kind = special[r]
        state = "ready" if rng.random() > 0.02 else rng.choice(states)
        models = tuple(sorted(set(rng.sample(MODELS, rng.randint(0, 2)))))
        meta.append((i, r, kind, state, models))
        free.append(list(range(NODE_GPUS)))

    lines = tuple(
        LineView(name, int(gpus * share), int(gpus * share * 0.2)) for name, share in LINES
    )
    queues: list[QueueView] = []
    for name, share in LINES:
        quota = int(gpus * share)
        queues.append(QueueView(f"{name}-urgent", name, Tier.URGENT, quota // 4, 0))
        queues.append(QueueView(f"{name}-core", name, Tier.CORE, None, quota // 5))
        queues.append(QueueView(f"{name}-finetune", name, Tier.FINETUNE, None, 0))
        queues.append(QueueView(f"{name}-experiment", name, Tier.EXPERIMENT, quota // 2, 0))
    line_names = [name for name, _ in LINES]
    line_weights = [share for _, share in LINES]

    def queue_of(tier: Tier, line: str) -> str:
        return f"{line}-{tier.label}"

    now = 1_700_000_000.0
    ready_nodes = [m[0] for m in meta if m[3] == "ready"]
    run_jobs: list[RunningJob] = []
    jid = 1
    attempts = 0
    while len(run_jobs) < running and attempts < running * 5:
        attempts += 1
        size = _pick(rng, RUNNING_SIZES)
        tier = _pick(rng, TIER_MIX)
        line = rng.choices(line_names, line_weights)[0]
        placement: list[Slot] = []
        if size <= NODE_GPUS:
            # Random (not best-fit) placement fragments the cluster like real history.
            for _ in range(8):
                n = rng.choice(ready_nodes)
                if len(free[n]) >= size:
                    got = rng.sample(free[n], size)
                    for g in got:
                        free[n].remove(g)
                    placement.append(Slot(f"n{n:05d}", tuple(sorted(got))))
                    break
        else:
            k = size // NODE_GPUS
            whole = [n for n in ready_nodes if len(free[n]) == NODE_GPUS]
            if len(whole) >= k:
                start = rng.randrange(len(whole))
                chosen = (whole[start:] + whole[:start])[:k]
                for n in chosen:
                    placement.append(Slot(f"n{n:05d}", tuple(free[n])))
                    free[n] = []
        if not placement:
            continue
        started = now - rng.uniform(60, 3 * 86400)
        runtime = rng.lognormvariate(9.5, 1.2)
        preemptible = tier < Tier.CORE or (tier == Tier.CORE and rng.random() < 0.3)
        state = "running"
        preempted_for = None
        if tier < Tier.CORE and rng.random() < 0.01:
            state = PREEMPTING
            preempted_for = 10_000_000 + rng.randrange(max(1, pending))
        run_jobs.append(
            RunningJob(
                id=jid,
                queue=queue_of(tier, line),
                line=line,
                tier=tier,
                gpus=size,
                placement=tuple(placement),
                preemptible=preemptible,
                preemption_count=rng.choice((0, 0, 0, 1, 2, 4)),
                started_at=started,
                last_checkpoint_at=started + rng.uniform(0, max(1.0, now - started)),
                predicted_end=started + runtime,
                state=state,
                model_name=rng.choice(MODELS),
                preempted_for=preempted_for,
                preempt_deadline=now + 120 if state == PREEMPTING else None,
                borrowed=rng.random() < 0.05,
                # as the demo's jobs: preemptible work checkpoints (consolidation may move it)
                checkpointable=preemptible,
            )
        )
        jid += 1

    nodes = []
    for i, r, kind, state, models in meta:
        nodes.append(
            NodeView(
                name=f"n{i:05d}",
                rack=f"r{r:03d}",
                block=f"b{r // BLOCK_RACKS:02d}",
                gpu_model="A100" if kind == "a100" else "H100",
                gpu_memory_gb=40 if kind == "a100" else 80,
                gpus_total=NODE_GPUS,
                free_gpus=tuple(free[i]),
                rdma=kind != "nordma",
                state=state,
                recent_models=models,
                inference=kind == "inference",
            )
        )

    pend: list[PendingJob] = []
    for j in range(pending):
        size = _pick(rng, PENDING_SIZES)
        tier = _pick(rng, TIER_MIX)
        line = rng.choices(line_names, line_weights)[0]
        pend.append(
            PendingJob(
                id=10_000_000 + j,
                queue=queue_of(tier, line),
                line=line,
                tier=tier,
                gpus=size,
                gpus_per_node=4 if size > 8 and rng.random() < 0.05 else None,
                gpu_memory_gb=80 if rng.random() < 0.1 else None,
                rdma=size > NODE_GPUS,
                exclusive_node=rng.random() < 0.03,
                avoid_inference=rng.random() < 0.1,
                submitted_at=now - rng.uniform(0, 2 * 86400),
                preemption_count=4 if rng.random() < 0.02 else rng.choice((0, 0, 0, 1)),
                model_name=rng.choice(MODELS) if rng.random() < 0.8 else None,
                predicted_runtime_s=rng.lognormvariate(8.5, 1.3) if rng.random() < 0.9 else None,
                owner=f"user{rng.randrange(300)}",
            )
        )
    return Snapshot(
        nodes=tuple(nodes),
        lines=lines,
        queues=tuple(queues),
        running=tuple(run_jobs),
        pending=tuple(pend),
        policy=PolicyConfig.preset("full"),  # the live loop's policy
    )


BENCH_NOW = 1_700_000_000.0
EVICTION_WINDOW_S = 72 * 3600.0


def tighten_quotas(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with every line's quota at what it holds within quota now (so a waiting
    job that may not borrow finds its line full and its own preemptible work displaceable:
    the plan swaps) and each queue's eviction figures as if it had run at today's use for
    the 72 h window with 5% of it evicted (so the swap's eviction budget has work to do)."""
    usage = snapshot_usage(snapshot)
    lines = tuple(replace(ln, quota_gpus=usage.nb_line.get(ln.name, 0)) for ln in snapshot.lines)
    used: dict[str, int] = {}
    for r in snapshot.running:
        used[r.queue] = used.get(r.queue, 0) + r.gpus
    queues = tuple(
        replace(
            q,
            delivered_gpu_s=(delivered := max(1, used.get(q.name, 0)) * EVICTION_WINDOW_S),
            evicted_gpu_s=0.05 * delivered,
            eviction_ratio=0.05,
        )
        for q in snapshot.queues
    )
    return replace(snapshot, lines=lines, queues=queues)


def run_bench(
    gpus: int = 10_000,
    pending: int = 5_000,
    running: int = 2_000,
    runs: int = 7,
    seed: int = 0,
    inference_rise: int = 0,
    switches: dict[str, bool | int] | None = None,
    tight_quotas: bool = False,
) -> dict[str, Any]:
    """Time plan()+check_plan() on one snapshot; returns the figures as a dict.
    ``inference_rise``: every shared inference node is forecast to need that many GPUs
    more in every hour, a forecast that has seen the whole day (#19), so each single-node
    job allowed beside inference tries the shared nodes first and each fallback to a
    shared node runs the forecast.
    ``switches``: boolean or whole-number ``PolicyConfig`` options set on the snapshot's policy (e.g.
    ``{"swap_quota": False}``, to time an option against the same cluster without it).
    ``tight_quotas``: every line at quota (``tighten_quotas``), so the plan swaps."""
    snapshot = build_snapshot(gpus, pending, running, seed)
    if tight_quotas:
        snapshot = tighten_quotas(snapshot)
    if switches:
        snapshot = replace(snapshot, policy=replace(snapshot.policy, **switches))
    if inference_rise:
        rise = (inference_rise,) * 24
        nodes = tuple(
            replace(n, inference_rise=rise, inference_day_learned=True) if n.inference else n
            for n in snapshot.nodes
        )
        snapshot = replace(snapshot, nodes=nodes)
    runs = max(1, runs)
    totals: list[float] = []
    cpu: list[float] = []
    plan_ms: list[float] = []
    check_ms: list[float] = []
    result = None
    violations: list[str] = []
    for _ in range(runs):
        c0 = time.process_time()
        t0 = time.perf_counter()
        result = plan(snapshot, BENCH_NOW)
        t1 = time.perf_counter()
        violations = check_plan(snapshot, result)
        t2 = time.perf_counter()
        cpu.append((time.process_time() - c0) * 1000)
        plan_ms.append((t1 - t0) * 1000)
        check_ms.append((t2 - t1) * 1000)
        totals.append((t2 - t0) * 1000)
    assert result is not None
    median = statistics.median(totals)
    free = sum(len(n.free_gpus) for n in snapshot.nodes if n.state == "ready")
    return {
        "gpus": sum(n.gpus_total for n in snapshot.nodes),
        "nodes": len(snapshot.nodes),
        "pending": len(snapshot.pending),
        "running": len(snapshot.running),
        "free_gpus_before": free,
        "seed": seed,
        "runs": runs,
        "median_ms": round(median, 2),
        "p95_ms": round(percentile(totals, 95), 2),
        "min_ms": round(min(totals), 2),
        "cpu_median_ms": round(statistics.median(cpu), 2),
        "plan_median_ms": round(statistics.median(plan_ms), 2),
        "check_median_ms": round(statistics.median(check_ms), 2),
        "starts": len(result.starts),
        "started_gpus": sum(len(s.gpus) for st in result.starts for s in st.placement),
        "preemptions": len(result.preemptions),
        "migrations": len(result.migrations),
        "swaps": len(result.swaps),
        "tight_quotas": tight_quotas,
        "reservations": len(result.reservations),
        "jobs_placed_per_s": round(len(result.starts) / (median / 1000), 1) if median else 0.0,
        "verdicts": result.counts_by_code(),
        "violations": len(violations),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--pending", type=int, default=5_000)
    parser.add_argument("--running", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--inference-rise", type=int, default=0, metavar="GPUS",
        help="shared inference nodes are forecast to need GPUS more in every hour",
    )  # fmt: skip
    parser.add_argument(
        "--switch", action="append", default=[], metavar="NAME=VALUE",
        help="set a boolean or whole-number policy option (e.g. swap_quota=false, "
        "defragment_nodes=2); repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--tight-quotas", action="store_true",
        help="every line's quota at what it holds within quota, so that the plan swaps",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    switches: dict[str, bool | int] = {}
    for item in args.switch:
        name, _, value = item.partition("=")
        default = getattr(PolicyConfig.preset("full"), name, None)
        if isinstance(default, bool) and value in ("true", "false"):
            switches[name] = value == "true"
        elif type(default) is int and value.isdigit():
            switches[name] = int(value)
        else:
            parser.error(
                "--switch takes NAME=true|false for a boolean policy option or NAME=N for "
                f"a whole-number one: {item!r}"
            )
    res = run_bench(args.gpus, args.pending, args.running, args.runs, args.seed,
                    args.inference_rise, switches, args.tight_quotas)  # fmt: skip
    if args.json:
        print(json.dumps(res, sort_keys=True))
    else:
        print(
            f"{res['gpus']} GPUs / {res['pending']} pending / {res['running']} running "
            f"({res['free_gpus_before']} GPUs free), {res['runs']} runs: "
            f"median {res['median_ms']} ms, p95 {res['p95_ms']} ms, "
            f"CPU median {res['cpu_median_ms']} ms "
            f"(plan {res['plan_median_ms']} ms + check {res['check_median_ms']} ms); "
            f"{res['starts']} starts ({res['jobs_placed_per_s']} jobs placed/s), "
            f"{res['preemptions']} preemptions, {res['migrations']} migrations, "
            f"{res['swaps']} swaps, "
            f"{res['reservations']} reservations, "
            f"{res['violations']} violations"
        )
        print("verdicts: " + ", ".join(f"{k}={v}" for k, v in res["verdicts"].items()))
    return 0 if res["violations"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
