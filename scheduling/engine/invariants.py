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
  within quota, but for the running work quota swaps turn into borrowed work
  (``quota_swap.check_swaps``: a swapping job may not borrow and starts within quota,
  what it displaces is running, preemptible, not demoted, not borrowed, not stopping,
  of its queue or line, displaced once); borrowed starts are preemptible,
  non-demoted, and borrowing is on;
- preemptions: known running victims, once each, running (not already
  preempting), preemptible, not demoted, of a strictly lower tier allowed by the
  preemptor's queue or running on borrowed capacity; never below a queue's or
  line's guarantee; preemption on; the preemptor waits (does not also start);
- migrations (``consolidation.check_migrations``): movable jobs only (checkpointable,
  never guaranteed, demoted, urgent or borrowed work), within the plan's eviction
  budget overall and per queue and, with the preemptions, the guarantees; each with
  room on a node that can run it; the gang waits and holds its nodes; no start or move
  takes the room kept for a moved job still checkpointing (``kept_rooms.check_kept_rooms``);
- borrowing (``borrowing.check_borrowing``): no borrowed start within a cool-down, over
  its queue's eviction cap, or predicted to be reclaimed before its predicted end;
- maintenance (``NodeView.unavailable_from``): no start on a node entering maintenance
  before the job's predicted end; no move to, nor reservation of, such a node;
- reservations: no node reserved twice; the reserved job still fits on its
  nodes at its expected start, given the predicted ends of everything running
  or started there (so backfill never delays it);
- verdicts: every pending job that does not start has one, with a known code;
  no started job has one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TypeVar

from . import policy as rules
from .accounting import derive_usage, preemption_budgets
from .borrowing import check_borrowing
from .consolidation import check_migrations
from .kept_rooms import check_kept_rooms
from .placement import ClassKey, class_key, node_matches
from .quota_swap import check_swaps
from .types import (
    COLD,
    GRACEFUL,
    READY,
    RUNNING,
    VERDICT_CODES,
    NodeView,
    PendingJob,
    Plan,
    RunningJob,
    Snapshot,
    Start,
)

T = TypeVar("T")


def check_plan(snapshot: Snapshot, plan: Plan) -> list[str]:
    """Violations of the plan against the snapshot (empty list = OK)."""
    with rules.gc_paused():
        return _Checker(snapshot, plan).run()


def _over_limits(
    scope: str,
    added: Mapping[str, int],
    held: Mapping[str, int],
    limits: Mapping[str, int | None],
    errors: list[str],
    swapped: Mapping[str, int],
) -> None:
    """Quota: ``held`` plus ``added`` GPUs per queue / line stays within its limit, plus
    what quota swaps there turn into borrowed work (``swapped``)."""
    for name, add in added.items():
        quota = limits.get(name)
        if quota is not None:
            total = held.get(name, 0) + add
            if total > quota + swapped.get(name, 0):
                errors.append(f"{scope} {name} would hold {total} GPUs within quota, over {quota}")


def _over_budgets(
    scope: str, lost: Mapping[str, int], budgets: Mapping[str, int], errors: list[str]
) -> None:
    """Guarantees: GPUs preempted per queue / line stay within its budget."""
    for name, gpus in lost.items():
        if gpus > budgets.get(name, 0):
            errors.append(f"{scope} {name} loses {gpus} GPUs to preemption, below its guarantee")


class _Checker:
    """One check: the snapshot's lookups, what earlier sections found, and the errors."""

    def __init__(self, snapshot: Snapshot, plan: Plan) -> None:
        self.s = snapshot
        self.plan = plan
        self.policy = snapshot.policy
        self.now = plan.now
        self.nodes = {n.name: n for n in snapshot.nodes}
        self.node_gpus = max((n.gpus_total for n in snapshot.nodes), default=0) or 8
        self.pending = {j.id: j for j in snapshot.pending}
        self.running = {r.id: r for r in snapshot.running}
        self.queues = {q.name: q for q in snapshot.queues}
        self.lines = {line.name: line for line in snapshot.lines}
        self.usage = derive_usage(snapshot.running, self.queues, self.lines)
        self.errors: list[str] = []
        self.started: set[int] = set()
        self.start_end: dict[int, float] = {}
        self.deadline_of: dict[int, float] = {}

    def run(self) -> list[str]:
        self.check_starts()
        self.check_quotas()
        self.check_preemptions()
        self.check_migrations()
        self.check_marks()
        self.errors.extend(check_borrowing(self.s, self.plan))
        self.check_reservations()
        self.check_verdicts()
        return self.errors

    def once(
        self, key: int, known: Mapping[int, T], seen: set[int], action: str, kind: str, verb: str
    ) -> T | None:
        """The item ``key`` names, the first time; else say why it is not usable."""
        item = known.get(key)
        if item is None:
            self.errors.append(f"{action} of unknown {kind} job {key}")
        elif key in seen:
            self.errors.append(f"job {key} {verb} twice")
            item = None
        else:
            seen.add(key)
        return item

    def check_marks(self) -> None:
        """The flags the plan writes back are the settled accounting's, on running jobs
        the plan leaves alone, each once (``accounting.marks``)."""
        decided = self.plan.decided_ids()
        seen: set[int] = set()
        for m in self.plan.marks:
            r = self.once(m.job_id, self.running, seen, "borrowed flag", "running", "flagged")
            if r is None:
                continue
            if r.state != RUNNING or m.job_id in decided:
                self.errors.append(
                    f"job {m.job_id} is flagged but not running, or the plan stops, moves or displaces it"
                )
            elif m.borrowed != (m.job_id in self.usage.borrowed_ids) or m.borrowed == r.borrowed:
                self.errors.append(
                    f"job {m.job_id} flagged borrowed={m.borrowed} against the accounting"
                )

    # -- starts ----------------------------------------------------------------
    def check_starts(self) -> None:
        taken: dict[str, set[int]] = defaultdict(set)
        jobs_on: dict[str, int] = defaultdict(int)
        excl_start_nodes: set[str] = set()
        for s in self.plan.starts:
            job = self.once(s.job_id, self.pending, self.started, "start", "pending", "started")
            if job is None:
                continue
            if self.now is not None:
                self.start_end[s.job_id] = self.now + rules.job_runtime(job, self.policy)
            c = self.check_start_shape(job, s)
            key = class_key(
                job.gpu_memory_gb, job.rdma, rules.inference_ok(job), job.pool, job.gpu_model
            )
            for slot in s.placement:
                node = self.nodes.get(slot.node)
                if node is None:
                    self.errors.append(f"job {job.id} placed on unknown node {slot.node}")
                    continue
                self.check_slot(job, node, slot.gpus, c, key, taken)
                end = self.start_end.get(s.job_id)
                leaves = node.unavailable_from
                if leaves is not None and end is not None and leaves < end:
                    self.errors.append(
                        f"job {job.id} placed on {node.name}, which enters maintenance "
                        "before the job's predicted end"
                    )
                jobs_on[node.name] += 1
                if job.exclusive_node:
                    excl_start_nodes.add(node.name)
        for name, gpus in taken.items():
            node = self.nodes.get(name)
            if node is not None and len(gpus) > node.gpus_total:
                self.errors.append(f"node {name} over capacity")
        for name in excl_start_nodes:
            if jobs_on[name] > 1:
                self.errors.append(f"node {name} is exclusive to one job but several start there")

    def check_start_shape(self, job: PendingJob, s: Start) -> int:
        """A whole gang on distinct nodes, no more of them than needed; returns
        the job's per-node GPU limit."""
        k, c, _last = rules.shape_counts(job.gpus, job.gpus_per_node, self.node_gpus)
        count = sum(len(slot.gpus) for slot in s.placement)
        if count != job.gpus:
            self.errors.append(
                f"job {job.id} gets {count} GPUs but asked for {job.gpus} (gang broken)"
            )
        names = [slot.node for slot in s.placement]
        if len(set(names)) != len(names):
            self.errors.append(f"job {job.id} lists a node twice")
        if len(names) > k:
            self.errors.append(f"job {job.id} spread over {len(names)} nodes; {k} suffice")
        return c

    def check_slot(
        self,
        job: PendingJob,
        node: NodeView,
        gpus: tuple[int, ...],
        c: int,
        key: ClassKey,
        taken: dict[str, set[int]],
    ) -> None:
        """One node of a start: usable, matching, within the per-node limit, and
        only free GPUs nobody else is given (``taken``: GPUs given so far, per node)."""
        errors = self.errors
        if node.state != READY:
            errors.append(f"job {job.id} placed on {node.state} node {node.name}")
        if node.exclusive:
            errors.append(f"job {job.id} placed on exclusively held node {node.name}")
        if not node_matches(node, key):
            errors.append(
                f"job {job.id} placed on node {node.name} that does not meet its needs "
                "(memory, RDMA, inference, pool or GPU model)"
            )
        if len(gpus) > c:
            errors.append(f"job {job.id} has {len(gpus)} GPUs on {node.name}, limit {c}")
        free = set(node.free_gpus)
        for g in gpus:
            if g not in free:
                errors.append(f"job {job.id} given GPU {g} of {node.name}, which is not free")
            if g in taken[node.name]:
                errors.append(f"GPU {g} of {node.name} given twice")
            taken[node.name].add(g)
        if job.exclusive_node and len(node.free_gpus) != node.gpus_total:
            errors.append(f"exclusive job {job.id} placed on shared node {node.name}")

    # -- quotas ----------------------------------------------------------------
    def check_quotas(self) -> None:
        policy = self.policy
        add_q: dict[str, int] = defaultdict(int)
        add_l: dict[str, int] = defaultdict(int)
        for s in self.plan.starts:
            job = self.pending.get(s.job_id)
            if job is None:
                continue
            if s.borrowed:
                if not policy.borrowing:
                    self.errors.append(f"job {job.id} borrows capacity but borrowing is off")
                if not job.preemptible:
                    self.errors.append(f"non-preemptible job {job.id} started on borrowed capacity")
                if rules.is_demoted(job.preemption_count, policy):
                    self.errors.append(f"demoted job {job.id} started on borrowed capacity")
            else:
                add_q[job.queue] += job.gpus
                add_l[job.line] += job.gpus
        quota_q = {name: q.quota_gpus for name, q in self.queues.items()}
        quota_l = {name: line.quota_gpus for name, line in self.lines.items()}
        leaving = {p.victim_id for p in self.plan.preemptions}
        leaving.update(m.job_id for m in self.plan.migrations)
        errors, swapped_q, swapped_l = check_swaps(
            self.s, self.plan, self.usage.borrowed_ids, leaving
        )
        self.errors.extend(errors)
        _over_limits("queue", add_q, self.usage.nb_queue, quota_q, self.errors, swapped_q)
        _over_limits("line", add_l, self.usage.nb_line, quota_l, self.errors, swapped_l)

    # -- preemptions -----------------------------------------------------------
    def check_preemptions(self) -> None:
        budget_q, budget_l = preemption_budgets(self.usage, self.queues, self.lines)
        lost_q: dict[str, int] = defaultdict(int)
        lost_l: dict[str, int] = defaultdict(int)
        victims: set[int] = set()
        if self.plan.preemptions and not self.policy.preemption:
            self.errors.append("preemptions planned but preemption is off")
        for p in self.plan.preemptions:
            v = self.once(p.victim_id, self.running, victims, "preemption", "running", "preempted")
            if v is None:
                continue
            self.deadline_of[v.id] = p.grace_deadline
            if p.mode not in (GRACEFUL, COLD):
                self.errors.append(f"preemption of {v.id} has unknown mode {p.mode!r}")
            job = self.pending.get(p.for_job_id)
            if job is None:
                self.errors.append(f"job {v.id} preempted for unknown pending job {p.for_job_id}")
                continue
            self.check_victim(v, job)
            lost_q[v.queue] += v.gpus
            lost_l[v.line] += v.gpus
        _over_budgets("queue", lost_q, budget_q, self.errors)
        _over_budgets("line", lost_l, budget_l, self.errors)

    def check_victim(self, v: RunningJob, job: PendingJob) -> None:
        """``v`` may be stopped for ``job``: the preemptor waits, and the victim
        runs, is preemptible, not demoted, and of a tier ``job`` may preempt
        (or on borrowed capacity)."""
        errors = self.errors
        if job.id in self.started:
            errors.append(f"job {job.id} both starts and preempts job {v.id}")
        if v.state != RUNNING:
            errors.append(f"job {v.id} is {v.state}, cannot be preempted again")
        if not v.preemptible:
            errors.append(f"non-preemptible job {v.id} preempted")
        if rules.is_demoted(v.preemption_count, self.policy):
            errors.append(f"demoted job {v.id} preempted")
        allowed = rules.queue_preempts(self.queues.get(job.queue), job.tier)
        if v.tier not in allowed and v.id not in self.usage.borrowed_ids:
            errors.append(
                f"job {v.id} ({v.tier.label}) preempted for job {job.id} ({job.tier.label}): "
                "not a lower tier this queue may preempt, nor borrowed capacity"
            )

    # -- migrations (consolidation.py) ------------------------------------------
    def check_migrations(self) -> None:
        """Moved jobs: movable, within the budgets and guarantees, with room elsewhere; they
        are gone by their deadline (for the reservations' fit)."""
        self.errors.extend(check_migrations(self.s, self.plan, self.started))
        self.errors.extend(check_kept_rooms(self.s, self.plan))
        for m in self.plan.migrations:
            self.deadline_of.setdefault(m.job_id, m.grace_deadline)
            node = self.nodes.get(m.to_node)
            if node is not None and node.unavailable_from is not None:
                self.errors.append(f"job {m.job_id} moved to {m.to_node}, entering maintenance")

    # -- reservations ----------------------------------------------------------
    def check_reservations(self) -> None:
        reserved_by: dict[str, int] = {}
        for res in self.plan.reservations:
            if res.job_id not in self.pending:
                self.errors.append(f"reservation for unknown pending job {res.job_id}")
            if res.job_id in self.started:
                self.errors.append(f"job {res.job_id} both starts and holds a reservation")
            for name in res.nodes:
                if name not in self.nodes:
                    self.errors.append(f"reservation of unknown node {name}")
                elif self.nodes[name].unavailable_from is not None:
                    self.errors.append(f"node {name} reserved but entering maintenance")
                if name in reserved_by:
                    self.errors.append(f"node {name} reserved twice")
                reserved_by[name] = res.job_id
        if self.now is not None and self.plan.reservations:
            self.check_reservations_fit(self.now)

    def check_reservations_fit(self, now: float) -> None:
        """Backfill never delays a reservation: at its expected start, the reserved
        job still fits on its nodes given predicted ends of everything there."""
        releases: dict[str, list[tuple[float, int]]] = defaultdict(list)
        for r in self.s.running:
            t = self.deadline_of.get(r.id)
            if t is None:
                t = rules.running_end(r, now, self.policy)
            for slot in r.placement:
                releases[slot.node].append((t, len(slot.gpus)))
        starts_on: dict[str, list[tuple[float, int, bool]]] = defaultdict(list)
        for s in self.plan.starts:
            job = self.pending.get(s.job_id)
            if job is None:
                continue
            for slot in s.placement:
                starts_on[slot.node].append(
                    (self.start_end[s.job_id], len(slot.gpus), job.exclusive_node)
                )
        for res in self.plan.reservations:
            job = self.pending.get(res.job_id)
            if job is None:
                continue
            t = float("inf") if res.expected_start is None else res.expected_start
            k, c, _last = rules.shape_counts(job.gpus, job.gpus_per_node, self.node_gpus)
            fitting = 0
            for name in res.nodes:
                node = self.nodes.get(name)
                if node is None:
                    continue
                free = _free_at(node, t, releases.get(name, ()), starts_on.get(name, ()))
                if (
                    free is not None
                    and free >= c
                    and (not job.exclusive_node or free == node.gpus_total)
                ):
                    fitting += 1
            if fitting < k and res.expected_start is not None:
                self.errors.append(
                    f"reservation for job {job.id} does not fit on its nodes at its expected start"
                )

    # -- verdicts --------------------------------------------------------------
    def check_verdicts(self) -> None:
        verdicts = self.plan.verdicts
        for job in self.s.pending:
            v = verdicts.get(job.id)
            if job.id in self.started:
                if v is not None:
                    self.errors.append(f"job {job.id} starts but also has a verdict")
            elif v is None:
                self.errors.append(f"pending job {job.id} has no verdict")
            elif v.code not in VERDICT_CODES:
                self.errors.append(f"job {job.id} has unknown verdict code {v.code!r}")
        for job_id in verdicts:
            if job_id not in self.pending:
                self.errors.append(f"verdict for unknown job {job_id}")


def _free_at(
    node: NodeView,
    t: float,
    releases: Iterable[tuple[float, int]],
    starts: Iterable[tuple[float, int, bool]],
) -> int | None:
    """Free GPUs of ``node`` at ``t``: what is free now, plus what running work
    releases by then, less what starts still hold; None if something exclusive
    still holds it."""
    free = len(node.free_gpus)
    blocked = False
    for end, g in releases:
        if end <= t:
            free += g
        elif node.exclusive:
            blocked = True
    if node.exclusive and not blocked:
        free = node.gpus_total
    for end, g, excl in starts:
        if end > t:
            free -= g
            blocked = blocked or excl
    if blocked:
        return None
    return min(free, node.gpus_total)
