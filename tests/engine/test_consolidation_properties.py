"""Hypothesis properties of consolidation (#19): it never touches guaranteed or demoted
work (nor non-preemptible, non-checkpointable, urgent or borrowed work) and never exceeds
its eviction budget, per queue and per plan.

The workloads are built to need consolidation: racks of partly used nodes (small jobs of
random queues, tiers, guarantees, demotion counts, ages and checkpointing) and waiting
gangs, with random budgets. Every property is re-derived here, independently of the
engine's checker, and ``check_plan`` must agree that the plan is valid.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduling.engine import Plan, Snapshot, check_plan, plan
from scheduling.engine import types as et
from scheduling.engine.accounting import snapshot_usage
from scheduling.engine.policy import effective_tier

from .strategies import NOW, build_snapshot, random_policy

FAST = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LINES = ("L0", "L1")


def fragmented(rng: random.Random, tight: bool = False, defrag: bool = False) -> Snapshot:
    """Racks of 8-GPU nodes, partly used by small jobs; gangs (and a few small jobs) wait.
    ``tight``: small line quotas and borrowing on, so most gangs are over their quota and
    may only borrow or start by a quota swap. ``defrag``: defragmentation on too (up to 3
    nodes a plan), and fewer gangs waiting."""
    n_blocks = rng.randint(1, 2)
    nodes: list[dict] = []
    for b in range(n_blocks):
        for r in range(rng.randint(1, 3)):
            for i in range(rng.randint(2, 5)):
                nodes.append(
                    dict(
                        name=f"b{b}r{r}n{i}",
                        rack=f"b{b}r{r}",
                        block=f"b{b}",
                        gpu_model="A100" if rng.random() < 0.1 else "H100",
                        gpu_memory_gb=40 if rng.random() < 0.1 else 80,
                        gpus_total=8,
                        rdma=rng.random() < 0.9,
                        state="ready" if rng.random() < 0.95 else "cordoned",
                        inference=rng.random() < 0.05,
                    )
                )
    free = {n["name"]: list(range(8)) for n in nodes}
    lines = tuple(
        et.LineView(
            name,
            rng.choice([8, 16, 32]) if tight else rng.choice([None, None, 64, 200]),
            rng.choice([0, 0, 8, 24]),
        )
        for name in LINES
    )
    queues = tuple(
        et.QueueView(
            f"{line}-{tier.label}",
            line,
            tier,
            rng.choice([None, None, None, 16]),
            rng.choice([0, 0, 0, 2, 4, 8]),
        )
        for line in LINES
        for tier in et.Tier
    )
    # How often a running job is movable in each respect: some workloads mostly movable
    # (consolidation happens, budgets bind), some mostly protected.
    ok = rng.choice([0.6, 0.9, 0.97])
    running = []
    for jid in range(1000, 1000 + len(nodes) * rng.randint(1, 3)):
        name = rng.choice([n["name"] for n in nodes])
        if not free[name]:
            continue
        g = min(len(free[name]), rng.choice([1, 1, 1, 2, 2, 3, 4, 8]))
        gpus = tuple(sorted(rng.sample(free[name], g)))
        for x in gpus:
            free[name].remove(x)
        tier = et.Tier.EXPERIMENT if rng.random() < ok else rng.choice(list(et.Tier))
        line = rng.choice(LINES)
        started = NOW - (36000 if rng.random() < ok else rng.choice([300, 1200, 3600]))
        state = et.RUNNING if rng.random() < 0.95 else et.PREEMPTING
        running.append(
            et.RunningJob(
                id=jid,
                queue=f"{line}-{tier.label}",
                line=line,
                tier=tier,
                gpus=g,
                placement=(et.Slot(name, gpus),),
                preemptible=rng.random() < ok,
                checkpointable=rng.random() < ok,
                preemption_count=0 if rng.random() < ok else rng.choice([1, 3, 4, 5]),
                started_at=started,
                last_checkpoint_at=started + 100 if rng.random() < 0.5 else None,
                predicted_end=NOW
                + (100000 if rng.random() < ok else rng.choice([300, 1200, 7200])),
                state=state,
                preempted_for=None if state == et.RUNNING else rng.randint(1, 6),
                preempt_deadline=None if state == et.RUNNING else NOW + 200,
                migrating=state == et.PREEMPTING and rng.random() < 0.5,
                borrowed=rng.random() > ok,
            )
        )
    pending = []
    for jid in range(1, rng.randint(2, 7)):
        tier = rng.choice(list(et.Tier))
        line = rng.choice(LINES)
        gang = rng.random() < (0.3 if defrag else 0.75)
        pending.append(
            et.PendingJob(
                id=jid,
                queue=f"{line}-{tier.label}",
                line=line,
                tier=tier,
                gpus=rng.choice([8, 8, 16, 16, 24, 32]) if gang else rng.choice([1, 2, 4]),
                exclusive_node=rng.random() < 0.15,
                rdma=rng.random() < 0.3,
                gpu_memory_gb=rng.choice([None, None, 80]),
                preemption_count=0 if rng.random() < 0.9 else 4,
                submitted_at=NOW - rng.randint(0, 5000),
                predicted_runtime_s=rng.choice([None, 600.0, 3600.0]),
                preemptible=rng.random() < 0.5 if tight else None,
            )
        )
    policy = et.PolicyConfig(
        backfill=rng.random() < 0.9,
        borrowing=tight or rng.random() < 0.5,
        grace_seconds=rng.choice([60.0, 300.0]),
        max_reservations=rng.randint(0, 3),
        max_migrations=rng.randint(0, 6),
        max_migrations_per_queue=rng.randint(0, 3),
        max_consolidations=rng.randint(1, 3),
        consolidate_min_wait_s=rng.choice([0.0, 900.0]),
        migrate_min_run_s=rng.choice([0.0, 1800.0]),
        defragment_nodes=rng.randint(1, 3) if defrag else 0,
        defragment_min_left_s=rng.choice([0.0, 3600.0, 50000.0]),
    )
    views = tuple(et.NodeView(**{**n, "free_gpus": tuple(sorted(free[n["name"]]))}) for n in nodes)
    return Snapshot(views, lines, queues, tuple(running), tuple(pending), policy)


def independent_violations(s: Snapshot, p: Plan) -> list[str]:
    """Consolidation's promises, re-derived without the engine's code (but ``derive_usage``,
    which defines borrowed work)."""
    out: list[str] = []
    policy = s.policy
    running = {r.id: r for r in s.running}
    pending = {j.id: j for j in s.pending}
    nodes = {n.name: n for n in s.nodes}
    queues = {q.name: q for q in s.queues}
    lines = {line.name: line for line in s.lines}
    borrowed = snapshot_usage(s).borrowed_ids
    if len(p.migrations) > policy.max_migrations:
        out.append("over the plan's eviction budget")
    per_queue = Counter(running[m.job_id].queue for m in p.migrations)
    if any(n > policy.max_migrations_per_queue for n in per_queue.values()):
        out.append(f"over a queue's eviction budget: {per_queue}")
    if p.migrations and not (policy.consolidation and policy.preemption):
        out.append("moves while consolidation is off")
    preempted = {x.victim_id for x in p.preemptions}
    moved = [m.job_id for m in p.migrations]
    if len(set(moved)) != len(moved):
        out.append("a job moved twice")
    displaced = {d for sw in p.swaps for d in sw.displaced}
    if displaced & set(moved):
        out.append(f"jobs {sorted(displaced & set(moved))} both displaced and moved")
    into: Counter[str] = Counter()
    started_on = {slot.node for st in p.starts for slot in st.placement}
    for m in p.migrations:
        v = running[m.job_id]
        if v.preemption_count > policy.demote_after:
            out.append(f"demoted job {v.id} moved")
        if not (v.preemptible and v.checkpointable) or v.tier == et.Tier.URGENT:
            out.append(f"job {v.id} moved: not preemptible, not checkpointable or urgent")
        if v.id in borrowed or v.state != et.RUNNING or v.id in preempted:
            out.append(f"job {v.id} moved: borrowed, not running, or also preempted")
        if m.for_job_id is None:
            if v.predicted_end is not None and v.predicted_end < policy.defragment_min_left_s + NOW:
                out.append(f"job {v.id} moved to defragment but ends soon by itself")
        elif v.tier > effective_tier(
            pending[m.for_job_id].tier, queues.get(pending[m.for_job_id].queue)
        ):
            out.append(f"job {v.id} moved for a lower-tier job")
        src, dest = nodes[v.placement[0].node], nodes[m.to_node]
        if dest.name == src.name or dest.state != "ready":
            out.append(f"job {v.id} moved to its own or an unusable node")
        if dest.gpu_model != src.gpu_model or dest.gpu_memory_gb < src.gpu_memory_gb:
            out.append(f"job {v.id} moved to a node that cannot run it")
        if src.rdma and not dest.rdma:
            out.append(f"job {v.id} moved off RDMA")
        if dest.name not in started_on and len(dest.free_gpus) == dest.gpus_total != v.gpus:
            out.append(f"job {v.id} broke a wholly free node")  # not one a start broke
        into[dest.name] += v.gpus
    for st_ in p.starts:
        for sl in st_.placement:
            into[sl.node] += len(sl.gpus)
    for name, gpus in into.items():
        if gpus > len(nodes[name].free_gpus) and any(m.to_node == name for m in p.migrations):
            out.append(f"node {name} over capacity with the jobs moved there")
    # Defragmentation empties whole nodes, at most defragment_nodes of them.
    emptied = {running[m.job_id].placement[0].node for m in p.migrations if m.for_job_id is None}
    if len(emptied) > policy.defragment_nodes:
        out.append(f"{len(emptied)} nodes emptied, over {policy.defragment_nodes}")
    for name in emptied:
        stay = [r.id for r in s.running if any(sl.node == name for sl in r.placement)
                and r.id not in set(moved)]  # fmt: skip
        if stay:
            out.append(f"node {name} defragmented but jobs {stay} stay")
        if any(m.to_node == name for m in p.migrations):
            out.append(f"node {name} defragmented but a moved job goes there")
    # Guarantees: active use less what preemptions and migrations take stays at the guarantee.
    for scope, key, contracts in (("queue", "queue", queues), ("line", "line", lines)):
        active: Counter[str] = Counter()
        lost: Counter[str] = Counter()
        for r in s.running:
            if r.state == et.RUNNING:
                active[getattr(r, key)] += r.gpus
        for jid in [*preempted, *moved]:
            lost[getattr(running[jid], key)] += running[jid].gpus
        for name, gpus in lost.items():
            contract = contracts.get(name)
            guarantee = contract.guarantee_gpus if contract is not None else 0
            if gpus > max(0, active[name] - guarantee):
                out.append(f"{scope} {name} pushed below its guarantee")
    return out


@FAST
@given(st.integers(0, 2**32 - 1))
def test_consolidation_never_touches_protected_work_nor_exceeds_its_budget(seed):
    s = fragmented(random.Random(seed))
    p = plan(s, NOW)
    assert check_plan(s, p) == []
    assert independent_violations(s, p) == []


@FAST
@given(st.integers(0, 2**32 - 1))
@example(2358)  # a line's swap displaced work of another queue: room in that queue's quota
@example(6829)  # a job moved onto a node a start of the same plan had already broken
def test_for_gangs_over_their_quota_too(seed):
    """Tight quotas: jobs move for gangs that will borrow or swap, under the same rules."""
    s = fragmented(random.Random(seed), tight=True)
    p = plan(s, NOW)
    assert check_plan(s, p) == []
    assert independent_violations(s, p) == []


@FAST
@given(st.integers(0, 2**32 - 1))
def test_on_the_general_random_snapshots_too(seed):
    """The engine's usual random workloads, with checkpointable running work."""
    rng = random.Random(seed)
    s = build_snapshot(
        rng, rng.randint(1, 10), rng.randint(0, 14), rng.randint(0, 14), 2, random_policy(rng)
    )
    running = tuple(
        r.__class__(**{**_fields(r), "checkpointable": rng.random() < 0.7}) for r in s.running
    )
    s = Snapshot(s.nodes, s.lines, s.queues, running, s.pending, s.policy)
    p = plan(s, NOW)
    assert check_plan(s, p) == []
    assert independent_violations(s, p) == []


@FAST
@given(st.integers(0, 2**32 - 1))
def test_defragmentation_empties_whole_nodes_within_the_same_budgets(seed):
    """Moves for no gang (defragmentation) keep every promise of consolidation, empty whole
    nodes, at most ``defragment_nodes`` of them, and move only long-running work."""
    s = fragmented(random.Random(seed), tight=seed % 2 == 1, defrag=True)
    p = plan(s, NOW)
    assert check_plan(s, p) == []
    assert independent_violations(s, p) == []


def _fields(r: et.RunningJob) -> dict:
    return {f: getattr(r, f) for f in r.__dataclass_fields__}


def test_the_workloads_do_consolidate():
    """Not vacuous: over 600 fixed seeds, plans move jobs, and budgets bind."""
    moved = limited = guarded = 0
    for seed in range(600):
        s = fragmented(random.Random(seed))
        p = plan(s, NOW)
        moved += bool(p.migrations)
        queue_of = {r.id: r.queue for r in s.running}
        per_queue = Counter(queue_of[m.job_id] for m in p.migrations)
        limited += bool(p.migrations) and (
            len(p.migrations) == s.policy.max_migrations
            or max(per_queue.values()) == s.policy.max_migrations_per_queue
        )
        guarded += bool(p.migrations) and any(q.guarantee_gpus for q in s.queues)
    assert moved >= 20, moved
    assert limited >= 5, limited
    assert guarded >= 10, guarded
    over_quota: Counter[str] = Counter()
    for seed in range(600):
        p = plan(fragmented(random.Random(seed), tight=True), NOW)
        over_quota.update(
            v.details["over_quota"] for v in p.verdicts.values() if "over_quota" in v.details
        )
    assert over_quota["borrowed"] >= 10 and over_quota["swapped"] >= 5, over_quota
    emptied = capped = 0
    for seed in range(600):
        s = fragmented(random.Random(seed), defrag=True)
        p = plan(s, NOW)
        queue_of = {r.id: r.queue for r in s.running}
        node_of = {r.id: r.placement[0].node for r in s.running}
        nodes = {node_of[m.job_id] for m in p.migrations if m.for_job_id is None}
        emptied += bool(nodes)
        capped += len(nodes) == s.policy.defragment_nodes or bool(
            nodes
            and max(Counter(queue_of[m.job_id] for m in p.migrations).values())
            == s.policy.max_migrations_per_queue
        )
    assert emptied >= 20 and capped >= 10, (emptied, capped)
