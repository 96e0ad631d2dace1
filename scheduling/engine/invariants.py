"""``check_plan(snapshot, plan)``: the rules a plan must never break.

Independent of how the planner reached its decisions; linear in the size of
the snapshot and plan, so it runs in every production cycle. Returns a list of
human-readable violations (empty = OK):

- starts: known pending jobs, once each, on ready nodes not held exclusively,
  on GPUs that are free, no GPU given twice, exactly the job's GPU count (a gang
  is whole or absent), one node for a job that fits on one, and the job's
  per-node limit, memory, RDMA, pool, GPU model, inference and exclusivity
  needs;
- quotas: per queue and line, non-borrowed use plus non-borrowed starts stays
  within quota; borrowed starts are preemptible, non-demoted, and borrowing is on;
- preemptions: known running victims, once each, running (not already
  preempting), preemptible, not demoted, of a strictly lower tier allowed by the
  preemptor's queue or running on borrowed capacity; never below a queue's or
  line's guarantee; preemption on; the preemptor waits (does not also start);
- reservations: no node reserved twice; the reserved job still fits on its
  nodes at its expected start, given the predicted ends of everything running
  or started there (so backfill never delays it);
- verdicts: every pending job that does not start has one, with a known code;
  no started job has one.
"""

from __future__ import annotations

from collections import defaultdict

from .accounting import derive_usage, preemption_budgets
from .placement import class_key, node_matches
from .policy import (
    gc_paused,
    inference_ok,
    is_demoted,
    job_runtime,
    queue_preempts,
    running_end,
    shape_counts,
)
from .types import COLD, GRACEFUL, READY, RUNNING, VERDICT_CODES, Plan, Snapshot


def check_plan(snapshot: Snapshot, plan: Plan) -> list[str]:
    """Violations of the plan against the snapshot (empty list = OK)."""
    with gc_paused():
        return _check_plan(snapshot, plan)


def _check_plan(snapshot: Snapshot, plan: Plan) -> list[str]:
    errors: list[str] = []
    policy = snapshot.policy
    nodes = {n.name: n for n in snapshot.nodes}
    node_gpus = max((n.gpus_total for n in snapshot.nodes), default=0) or 8
    pending = {j.id: j for j in snapshot.pending}
    running = {r.id: r for r in snapshot.running}
    queues = {q.name: q for q in snapshot.queues}
    lines = {line.name: line for line in snapshot.lines}
    usage = derive_usage(snapshot.running, queues, lines)
    now = plan.now

    # -- starts ----------------------------------------------------------------
    taken: dict[str, set[int]] = defaultdict(set)
    jobs_on: dict[str, int] = defaultdict(int)
    excl_start_nodes: set[str] = set()
    started: set[int] = set()
    start_end: dict[int, float] = {}
    for s in plan.starts:
        job = pending.get(s.job_id)
        if job is None:
            errors.append(f"start of unknown pending job {s.job_id}")
            continue
        if s.job_id in started:
            errors.append(f"job {s.job_id} started twice")
            continue
        started.add(s.job_id)
        if now is not None:
            start_end[s.job_id] = now + job_runtime(job, policy)
        k, c, _last = shape_counts(job.gpus, job.gpus_per_node, node_gpus)
        count = sum(len(slot.gpus) for slot in s.placement)
        if count != job.gpus:
            errors.append(f"job {job.id} gets {count} GPUs but asked for {job.gpus} (gang broken)")
        names = [slot.node for slot in s.placement]
        if len(set(names)) != len(names):
            errors.append(f"job {job.id} lists a node twice")
        if len(names) > k:
            errors.append(f"job {job.id} spread over {len(names)} nodes; {k} suffice")
        key = class_key(job.gpu_memory_gb, job.rdma, inference_ok(job), job.pool, job.gpu_model)
        for slot in s.placement:
            node = nodes.get(slot.node)
            if node is None:
                errors.append(f"job {job.id} placed on unknown node {slot.node}")
                continue
            if node.state != READY:
                errors.append(f"job {job.id} placed on {node.state} node {node.name}")
            if node.exclusive:
                errors.append(f"job {job.id} placed on exclusively held node {node.name}")
            if not node_matches(node, key):
                errors.append(
                    f"job {job.id} placed on node {node.name} that does not meet its needs "
                    "(memory, RDMA, inference, pool or GPU model)"
                )
            if len(slot.gpus) > c:
                errors.append(f"job {job.id} has {len(slot.gpus)} GPUs on {node.name}, limit {c}")
            free = set(node.free_gpus)
            for g in slot.gpus:
                if g not in free:
                    errors.append(f"job {job.id} given GPU {g} of {node.name}, which is not free")
                if g in taken[node.name]:
                    errors.append(f"GPU {g} of {node.name} given twice")
                taken[node.name].add(g)
            jobs_on[node.name] += 1
            if job.exclusive_node:
                excl_start_nodes.add(node.name)
                if len(node.free_gpus) != node.gpus_total:
                    errors.append(f"exclusive job {job.id} placed on shared node {node.name}")
    for name, gpus in taken.items():
        node = nodes.get(name)
        if node is not None and len(gpus) > node.gpus_total:
            errors.append(f"node {name} over capacity")
    for name in excl_start_nodes:
        if jobs_on[name] > 1:
            errors.append(f"node {name} is exclusive to one job but several start there")

    # -- quotas ----------------------------------------------------------------
    add_q: dict[str, int] = defaultdict(int)
    add_l: dict[str, int] = defaultdict(int)
    for s in plan.starts:
        job = pending.get(s.job_id)
        if job is None:
            continue
        if s.borrowed:
            if not policy.borrowing:
                errors.append(f"job {job.id} borrows capacity but borrowing is off")
            if not job.preemptible:
                errors.append(f"non-preemptible job {job.id} started on borrowed capacity")
            if is_demoted(job.preemption_count, policy):
                errors.append(f"demoted job {job.id} started on borrowed capacity")
        else:
            add_q[job.queue] += job.gpus
            add_l[job.line] += job.gpus
    for name, add in add_q.items():
        q = queues.get(name)
        if q is not None and q.quota_gpus is not None:
            held = usage.nb_queue.get(name, 0)
            if held + add > q.quota_gpus:
                errors.append(
                    f"queue {name} would hold {held + add} GPUs within quota, over {q.quota_gpus}"
                )
    for name, add in add_l.items():
        line = lines.get(name)
        if line is not None and line.quota_gpus is not None:
            held = usage.nb_line.get(name, 0)
            if held + add > line.quota_gpus:
                errors.append(
                    f"line {name} would hold {held + add} GPUs within quota, over {line.quota_gpus}"
                )

    # -- preemptions -----------------------------------------------------------
    budget_q, budget_l = preemption_budgets(usage, queues, lines)
    lost_q: dict[str, int] = defaultdict(int)
    lost_l: dict[str, int] = defaultdict(int)
    victims: set[int] = set()
    deadline_of: dict[int, float] = {}
    if plan.preemptions and not policy.preemption:
        errors.append("preemptions planned but preemption is off")
    for p in plan.preemptions:
        v = running.get(p.victim_id)
        if v is None:
            errors.append(f"preemption of unknown running job {p.victim_id}")
            continue
        if p.victim_id in victims:
            errors.append(f"job {v.id} preempted twice")
            continue
        victims.add(v.id)
        deadline_of[v.id] = p.grace_deadline
        if p.mode not in (GRACEFUL, COLD):
            errors.append(f"preemption of {v.id} has unknown mode {p.mode!r}")
        job = pending.get(p.for_job_id)
        if job is None:
            errors.append(f"job {v.id} preempted for unknown pending job {p.for_job_id}")
            continue
        if job.id in started:
            errors.append(f"job {job.id} both starts and preempts job {v.id}")
        if v.state != RUNNING:
            errors.append(f"job {v.id} is {v.state}, cannot be preempted again")
        if not v.preemptible:
            errors.append(f"non-preemptible job {v.id} preempted")
        if is_demoted(v.preemption_count, policy):
            errors.append(f"demoted job {v.id} preempted")
        allowed = queue_preempts(queues.get(job.queue), job.tier)
        if v.tier not in allowed and v.id not in usage.borrowed_ids:
            errors.append(
                f"job {v.id} ({v.tier.label}) preempted for job {job.id} ({job.tier.label}): "
                "not a lower tier this queue may preempt, nor borrowed capacity"
            )
        lost_q[v.queue] += v.gpus
        lost_l[v.line] += v.gpus
    for name, lost in lost_q.items():
        if lost > budget_q.get(name, 0):
            errors.append(f"queue {name} loses {lost} GPUs to preemption, below its guarantee")
    for name, lost in lost_l.items():
        if lost > budget_l.get(name, 0):
            errors.append(f"line {name} loses {lost} GPUs to preemption, below its guarantee")

    # -- reservations ----------------------------------------------------------
    reserved_by: dict[str, int] = {}
    for res in plan.reservations:
        if res.job_id not in pending:
            errors.append(f"reservation for unknown pending job {res.job_id}")
        if res.job_id in started:
            errors.append(f"job {res.job_id} both starts and holds a reservation")
        for name in res.nodes:
            if name not in nodes:
                errors.append(f"reservation of unknown node {name}")
            if name in reserved_by:
                errors.append(f"node {name} reserved twice")
            reserved_by[name] = res.job_id
    if now is not None and plan.reservations:
        _check_reservations(snapshot, plan, now, start_end, deadline_of, errors)

    # -- verdicts --------------------------------------------------------------
    for job in snapshot.pending:
        v = plan.verdicts.get(job.id)
        if job.id in started:
            if v is not None:
                errors.append(f"job {job.id} starts but also has a verdict")
        elif v is None:
            errors.append(f"pending job {job.id} has no verdict")
        elif v.code not in VERDICT_CODES:
            errors.append(f"job {job.id} has unknown verdict code {v.code!r}")
    for job_id in plan.verdicts:
        if job_id not in pending:
            errors.append(f"verdict for unknown job {job_id}")
    return errors


def _check_reservations(
    snapshot: Snapshot,
    plan: Plan,
    now: float,
    start_end: dict[int, float],
    deadline_of: dict[int, float],
    errors: list[str],
) -> None:
    """Backfill never delays a reservation: at its expected start, the reserved
    job still fits on its nodes given predicted ends of everything there."""
    policy = snapshot.policy
    nodes = {n.name: n for n in snapshot.nodes}
    node_gpus = max((n.gpus_total for n in snapshot.nodes), default=0) or 8
    pending = {j.id: j for j in snapshot.pending}
    releases: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for r in snapshot.running:
        t = deadline_of.get(r.id)
        if t is None:
            t = running_end(r, now, policy)
        for slot in r.placement:
            releases[slot.node].append((t, len(slot.gpus)))
    starts_on: dict[str, list[tuple[float, int, bool]]] = defaultdict(list)
    for s in plan.starts:
        job = pending.get(s.job_id)
        if job is None:
            continue
        for slot in s.placement:
            starts_on[slot.node].append((start_end[s.job_id], len(slot.gpus), job.exclusive_node))
    for res in plan.reservations:
        job = pending.get(res.job_id)
        if job is None:
            continue
        t = float("inf") if res.expected_start is None else res.expected_start
        k, c, _last = shape_counts(job.gpus, job.gpus_per_node, node_gpus)
        fitting = 0
        for name in res.nodes:
            node = nodes.get(name)
            if node is None:
                continue
            free = len(node.free_gpus)
            blocked = False
            for end, g in releases.get(name, ()):
                if end <= t:
                    free += g
                elif node.exclusive:
                    blocked = True
            if node.exclusive and not blocked:
                free = node.gpus_total
            for end, g, excl in starts_on.get(name, ()):
                if end > t:
                    free -= g
                    blocked = blocked or excl
            free = min(free, node.gpus_total)
            if blocked:
                continue
            if free >= c and (not job.exclusive_node or free == node.gpus_total):
                fitting += 1
        if fitting < k and res.expected_start is not None:
            errors.append(
                f"reservation for job {job.id} does not fit on its nodes at its expected start"
            )
