"""Consolidation (#19): move a few checkpointable jobs so a waiting gang can start.

A *gang* (a multi-node job, or one that needs a whole node) may wait while the GPUs it
needs sit free but scattered over partly used nodes. When moving a few small jobs off
some nodes would give it room now, the planner *migrates* them: each checkpoints, stops by
the grace deadline, goes back to pending with its progress kept, and restarts from its
checkpoint on an already used node, where this plan keeps room for it. The gang holds the
nodes they leave and starts once they are gone. A migration is not a preemption: the moved
job keeps its ``preemption_count`` (it is never demoted for it) and is counted apart from
evictions (``Plan.migrations``; the eviction ratio leaves it out).

What may move (``MoveIndex``, once per plan): a job running (not already stopping),
preemptible, checkpointable, not demoted, not urgent, not on borrowed capacity (that is
reclaimed by preemption), on one node and not holding it exclusively, running for at least
``migrate_min_run_s`` since its (re)start (so no job moves twice in a row) and not predicted
to end within ``consolidate_min_wait_s`` (it would free its GPUs by itself). Per search, a
job of a tier above the gang's is left alone, and so is anything that would break a budget:

- the **eviction budget** of the plan: ``max_migrations`` moved jobs overall and
  ``max_migrations_per_queue`` per queue (the moved job's queue);
- the **guarantees**: preemptions and migrations of one plan together take at most
  ``active - guarantee`` GPUs from a queue or a line (``accounting.preemption_budgets``),
  so guaranteed work is never touched.

The search (``find_moves``) is the preemption search with movable jobs as candidates: per
node the fewest movable jobs that bring it to the gang's ``c`` free GPUs (a node it needs
whole must lose every job on it), then the cheapest ``k`` such nodes of one rack, else of
one block (``victim_nodes``). Then each moved job needs a destination outside those nodes:
best fit on a ready, usable node at least as capable as the one it leaves (same GPU model
and pool, as much GPU memory, RDMA if it had it, inference only if it was on one), and
*already used* (a wholly free node only if the job fills it): consolidation never breaks a
whole node to free another. If any job has no destination, nothing moves.

It runs for a gang within its quota and, with ``consolidate_over_quota`` (on by default),
for a gang over its quota that finds no room in the borrowing pass but would start there:
one the borrowing rules let borrow (``borrowing.py``; the nodes it gets are borrowed
capacity, ``BORROWED``) or one that starts by a quota swap (``quota_swap.py``,
``SWAPPED``). Such a gang claims no quota when jobs move for it. The gang is not demoted
and otherwise expected to wait longer than ``consolidate_min_wait_s`` (its backfill
reservation, ``backfill.Timeline``), with graceful preemption on (``policy.preemption``,
``preemption_mode="graceful"``, a grace period > 0), at most ``max_consolidations`` gangs
per plan. Failed searches are cached per shape and tier (capacity and budgets only shrink
within a plan).

The planner calls ``Consolidation.try_gang`` for a gang blocked for capacity (before it
reserves, or in the borrowing pass) and ``leaving_reason`` for a gang whose moved jobs are
still checkpointing; ``check_migrations`` is the invariant checker's part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import explain
from .accounting import derive_usage, preemption_budgets
from .placement import Topology
from .policy import effective_tier, is_demoted, running_end
from .types import (
    GRACEFUL,
    READY,
    RUNNING,
    Code,
    Migration,
    NodeView,
    PendingJob,
    Plan,
    PolicyConfig,
    RunningJob,
    Snapshot,
    Tier,
)
from .victim_nodes import (
    NodeOption,
    choose_nodes,
    shared_node_option,
    whole_node_option,
)

if TYPE_CHECKING:
    from .planner import Planner, ShapeT

# How a gang over its quota will start on the nodes jobs move off (``try_gang``): on
# borrowed capacity, or within quota by a quota swap. "" for a gang within its quota.
BORROWED = "borrowed"
SWAPPED = "swapped"
_OVER_QUOTA_NOTES = {
    BORROWED: " It is over its quota: it starts on borrowed idle capacity, which its owners"
    " may reclaim.",
    SWAPPED: " It is over its quota: when it starts, preemptible jobs of its queue or line"
    " become the borrowed part in its place (a quota swap).",
}

# Per plan, searches beyond the gangs that may get room (failed ones are cached too).
SEARCHES_PER_CONSOLIDATION = 2


def enabled(policy: PolicyConfig) -> bool:
    """Consolidation needs graceful preemption: a moved job must checkpoint on its way out."""
    return (
        policy.consolidation
        and policy.preemption
        and policy.preemption_mode == GRACEFUL
        and policy.grace_seconds > 0
        and policy.max_migrations > 0
        and policy.max_migrations_per_queue > 0
        and policy.max_consolidations > 0
    )


def movable(job: RunningJob, borrowed: AbstractSet[int], now: float, policy: PolicyConfig) -> bool:
    """May ``job`` be moved at all, whoever asks (budgets aside)?"""
    return (
        job.state == RUNNING
        and job.preemptible
        and job.checkpointable
        and not is_demoted(job.preemption_count, policy)
        and job.tier < Tier.URGENT
        and job.id not in borrowed
        and not job.exclusive_node
        and len(job.placement) == 1
        and job.started_at <= now - policy.migrate_min_run_s
        and running_end(job, now, policy) > now + policy.consolidate_min_wait_s
    )


def dominates(dest: NodeView, src: NodeView) -> bool:
    """A job running on ``src`` may run on ``dest``: whatever it asks, ``src`` has it, and
    ``dest`` has at least as much (same GPU model and pool, as much memory per GPU, RDMA if
    ``src`` has it, an inference node only if ``src`` is one)."""
    return (
        dest.gpu_model == src.gpu_model
        and dest.pool == src.pool
        and dest.gpu_memory_gb >= src.gpu_memory_gb
        and (dest.rdma or not src.rdma)
        and (src.inference or not dest.inference)
    )


class MoveIndex:
    """The jobs that may move in one plan, per node (built once, on the first search)."""

    __slots__ = ("by_id", "node_of", "ranked", "movable_gpus", "cost")

    def __init__(
        self,
        running: Iterable[RunningJob],
        borrowed: AbstractSet[int],
        topo: Topology,
        now: float,
        policy: PolicyConfig,
    ) -> None:
        self.by_id: dict[int, RunningJob] = {}
        self.node_of: dict[int, int] = {}
        # node -> (cost, -GPUs, id, GPUs), cheapest first: about one per job, bigger
        # jobs a little cheaper, so a node is freed by as few moves as possible.
        self.ranked: dict[int, list[tuple[float, int, int, int]]] = {}
        self.movable_gpus: dict[int, int] = {}
        self.cost: dict[int, float] = {}
        index = topo.index
        for r in running:
            if not movable(r, borrowed, now, policy):
                continue
            n = index.get(r.placement[0].node)
            if n is None:
                continue
            g = len(r.placement[0].gpus)
            self.by_id[r.id] = r
            self.node_of[r.id] = n
            self.cost[r.id] = move_cost(g, topo.total[n])
            self.ranked.setdefault(n, []).append((self.cost[r.id], -g, r.id, g))
            self.movable_gpus[n] = self.movable_gpus.get(n, 0) + g
        for lst in self.ranked.values():
            lst.sort()


def move_cost(gpus: int, node_gpus: int) -> float:
    """What moving one job costs the search: one move, bigger jobs slightly cheaper (fewer
    moves free a node), but a job filling its node as much as three moves (it needs a
    wholly free node elsewhere, which is rare)."""
    return 1.0 - min(gpus, 512) / 1024.0 + (2.0 if gpus >= node_gpus else 0.0)


@dataclass(frozen=True, slots=True)
class MoveRequest:
    """A gang that could start if jobs moved: ``k`` nodes with ``c`` free GPUs each
    (wholly free if ``exclusive``) among ``elig`` (1/0 per node: ready, of its class, not
    reserved); ``tier``: its effective tier (nothing of a higher tier moves for it)."""

    job: PendingJob
    k: int
    c: int
    exclusive: bool
    elig: Sequence[int]
    tier: Tier


@dataclass(frozen=True, slots=True)
class MoveBudget:
    """What the plan may still move: ``total`` jobs overall, ``per_queue_max`` per queue
    less ``per_queue_used``; ``budget_q``/``budget_l``: GPUs each queue / line may still
    lose (guarantees); ``chosen``: jobs already preempted or moved in this plan."""

    total: int
    per_queue_max: int
    per_queue_used: Mapping[str, int]
    budget_q: Mapping[str, int]
    budget_l: Mapping[str, int]
    chosen: AbstractSet[int]


@dataclass(frozen=True, slots=True)
class Capacity:
    """Free capacity as the plan holds it (read-only): per node index ``nfree`` free GPUs,
    ``usable`` (1: may take work now), ``holders`` (running jobs there and their GPUs),
    ``buckets[f]`` usable nodes with ``f`` free GPUs, ``excl_held`` nodes held exclusively,
    ``started_on`` jobs this plan started there."""

    topo: Topology
    nfree: Sequence[int]
    usable: Sequence[int]
    holders: Sequence[Sequence[tuple[RunningJob, int]]]
    buckets: Sequence[Sequence[int]]
    excl_held: AbstractSet[int]
    started_on: Sequence[int]


@dataclass(frozen=True, slots=True)
class Moves:
    """The gang's nodes, and each job to move with the node kept for it."""

    nodes: tuple[int, ...]
    moves: tuple[tuple[RunningJob, int], ...]


def find_moves(
    request: MoveRequest, capacity: Capacity, budget: MoveBudget, index: MoveIndex
) -> Moves | None:
    """The fewest moves that give the gang its nodes now, each with a destination; None if
    there are none within the budgets."""
    if budget.total <= 0 or not could_fit(request, capacity, index, budget.total):
        return None
    is_candidate = candidate_filter(request, budget, index, room_for(capacity))
    options = node_options(request, capacity, index, is_candidate)
    nodes = choose_nodes(options, request.k, request.c, capacity.topo, index.cost)
    if nodes is None:
        return None
    picked = sorted({i for n in nodes for i in options[n][2]})
    if not picked or not within_budget(picked, index.by_id, budget):
        return None
    dest = destinations([index.by_id[i] for i in picked], set(nodes), capacity, index)
    if dest is None:
        return None
    return Moves(tuple(nodes), tuple((index.by_id[i], dest[i]) for i in picked))


def could_fit(request: MoveRequest, capacity: Capacity, index: MoveIndex, moves: int) -> bool:
    """A quick necessary condition: some block has ``k`` nodes that are free enough, or would
    be once their movable jobs went, with at most ``moves`` nodes needing a move."""
    topo = capacity.topo
    c, k, elig, exclusive = request.c, request.k, request.elig, request.exclusive
    nfree, usable, total = capacity.nfree, capacity.usable, topo.total
    ready: dict[int, int] = {}
    movable: dict[int, int] = {}
    for f in range(min(c, len(capacity.buckets)), len(capacity.buckets)):
        for n in capacity.buckets[f]:
            if elig[n] and (not exclusive or f == total[n]):
                b = topo.block_of[n]
                ready[b] = ready.get(b, 0) + 1
    for n, g in index.movable_gpus.items():
        f = nfree[n]
        if elig[n] and usable[n] and f + g >= c and (f < c or (exclusive and f < total[n])):
            b = topo.block_of[n]
            movable[b] = movable.get(b, 0) + 1
    return any(ready.get(b, 0) + min(m, moves) >= k for b, m in movable.items())


def room_for(capacity: Capacity) -> tuple[int, bool]:
    """The most GPUs free on one already used usable node, and whether a wholly free one
    exists: a job bigger than the first (that does not fill a node) has nowhere to go."""
    total, buckets = capacity.topo.total, capacity.buckets
    most = 0
    for f in range(len(buckets) - 1, 0, -1):
        if any(f < total[n] for n in buckets[f]):
            most = f
            break
    whole = any(
        buckets[f] and any(f == total[n] for n in buckets[f]) for f in range(1, len(buckets))
    )
    return most, whole


def candidate_filter(
    request: MoveRequest, budget: MoveBudget, index: MoveIndex, room: tuple[int, bool]
) -> Any:
    """``is_candidate(id)``: a movable job this gang may move, that alone fits every budget
    and could find room somewhere (``room_for``)."""
    memo: dict[int, bool] = {}
    most, whole = room
    by_id, tier = index.by_id, request.tier
    # For a one-node gang, a job as big as what it needs could only go where the gang
    # itself would fit: moving it gains nothing.
    max_gpus = request.c - 1 if request.k == 1 else None
    chosen, bq, bl = budget.chosen, budget.budget_q, budget.budget_l
    used, cap = budget.per_queue_used, budget.per_queue_max

    def is_candidate(vid: int) -> bool:
        got = memo.get(vid)
        if got is None:
            v = by_id.get(vid)
            got = (
                v is not None
                and vid not in chosen
                and v.tier <= tier
                and (max_gpus is None or v.gpus <= max_gpus)
                and (v.gpus <= most or whole)
                and used.get(v.queue, 0) < cap
                and v.gpus <= bq.get(v.queue, 0)
                and v.gpus <= bl.get(v.line, 0)
            )
            memo[vid] = got
        return got

    return is_candidate


def node_options(
    request: MoveRequest, capacity: Capacity, index: MoveIndex, is_candidate: Any
) -> dict[int, NodeOption]:
    """What each node worth looking at offers the gang: free enough now, or once some of
    its movable jobs go (``victim_nodes`` options, cost about one per move)."""
    topo = capacity.topo
    c, elig, exclusive = request.c, request.elig, request.exclusive
    nfree, usable, total = capacity.nfree, capacity.usable, topo.total
    movable_gpus = index.movable_gpus
    look = {n for n, g in movable_gpus.items() if nfree[n] + g >= c}
    for f in range(min(c, len(capacity.buckets)), len(capacity.buckets)):
        look.update(capacity.buckets[f])
    cost = index.cost
    options: dict[int, NodeOption] = {}
    no_leaving: frozenset[int] = frozenset()
    for n in sorted(look):
        # A node held exclusively is held by a job that may not move.
        if not elig[n] or not usable[n] or n in capacity.excl_held:
            continue
        if exclusive:
            if capacity.started_on[n]:
                continue
            got = whole_node_option(
                capacity.holders[n], nfree[n], total[n], c, is_candidate, no_leaving, cost
            )
        else:
            got = shared_node_option(nfree[n], total[n], c, index.ranked.get(n, ()), is_candidate)
        if got is not None:
            options[n] = got
    return options


def within_budget(ids: Sequence[int], by_id: Mapping[int, RunningJob], budget: MoveBudget) -> bool:
    """The moves together stay within the plan's eviction budget and the guarantees."""
    if len(ids) > budget.total:
        return False
    per_q: dict[str, int] = {}
    gpus_q: dict[str, int] = {}
    gpus_l: dict[str, int] = {}
    for i in ids:
        v = by_id[i]
        per_q[v.queue] = per_q.get(v.queue, 0) + 1
        gpus_q[v.queue] = gpus_q.get(v.queue, 0) + v.gpus
        gpus_l[v.line] = gpus_l.get(v.line, 0) + v.gpus
    return (
        all(budget.per_queue_used.get(q, 0) + n <= budget.per_queue_max for q, n in per_q.items())
        and all(g <= budget.budget_q.get(q, 0) for q, g in gpus_q.items())
        and all(g <= budget.budget_l.get(line, 0) for line, g in gpus_l.items())
    )


def destinations(
    jobs: Sequence[RunningJob], away: AbstractSet[int], capacity: Capacity, index: MoveIndex
) -> dict[int, int] | None:
    """A node for each moved job (biggest first): best fit among usable nodes outside
    ``away`` that can run it (``dominates``) and are already used, unless the job fills a
    wholly free node; None if one has nowhere to go."""
    topo = capacity.topo
    nodes, total = topo.nodes, topo.total
    buckets = capacity.buckets
    taken: dict[int, int] = {}
    out: dict[int, int] = {}
    for v in sorted(jobs, key=lambda v: (-v.gpus, v.id)):
        g = v.gpus
        src = nodes[index.node_of[v.id]]
        best: tuple[int, int] | None = None

        def consider(n: int, f: int, src: NodeView = src, g: int = g) -> tuple[int, int] | None:
            if n in away or f < g or (f == total[n] and g != total[n]):
                return None
            if not dominates(nodes[n], src):
                return None
            return (f, n)

        for n, extra in taken.items():
            got = consider(n, capacity.nfree[n] - extra)
            if got is not None and (best is None or got < best):
                best = got
        for f in range(g, len(buckets)):
            if best is not None and best[0] <= f:
                break
            for n in buckets[f]:
                if n in taken:
                    continue
                got = consider(n, f)
                if got is not None:
                    best = got if best is None or got < best else best
                    break
        if best is None:
            return None
        out[v.id] = best[1]
        taken[best[1]] = taken.get(best[1], 0) + g
    return out


class Consolidation:
    """The planner's consolidation state for one plan (the index, counters and caches)."""

    def __init__(self, planner: Planner) -> None:
        self.p = planner
        self.on = enabled(planner.policy)
        self.index: MoveIndex | None = None
        self.per_queue: dict[str, int] = {}
        self.gangs = 0
        self.searches = 0
        # per shape, the highest tier whose search failed: capacity, movable work and
        # budgets only shrink within a plan, and a lower tier may move less
        self.failed: dict[ShapeT, Tier] = {}
        self.migrations: list[Migration] = []

    def try_gang(self, job: PendingJob, sh: ShapeT, over_quota: str = "") -> bool:
        """A gang blocked for capacity: move jobs so it can start, if that is allowed and
        worth it; True if it now waits for them (it holds its nodes). ``over_quota``
        (``BORROWED`` or ``SWAPPED``): the gang is over its quota and the borrowing pass
        has checked that it would start that way if it had room."""
        if not self.on or (over_quota and not self.p.policy.consolidate_over_quota):
            return False
        key, k, c, _last, excl = sh
        failed = self.failed.get(sh)
        if failed is Tier.URGENT:  # cheapest first: most gangs of a plan share a few shapes
            return False
        p = self.p
        policy = p.policy
        if not self.is_gang(sh):
            return False
        left = policy.max_migrations - len(self.migrations)
        if (
            left <= 0
            or self.gangs >= policy.max_consolidations
            or self.searches >= SEARCHES_PER_CONSOLIDATION * policy.max_consolidations
        ):
            self.on = False  # nothing more moves in this plan
            return False
        if is_demoted(job.preemption_count, policy) or p.hol_blocked(job):
            return False
        tier = effective_tier(job.tier, p.queues.get(job.queue))
        if failed is not None and tier <= failed:
            return False
        if p.live.free_gpus_of(p.live.node_class(key)) < job.gpus:
            return False  # moves free no GPUs: the gang's must already be free somewhere
        self.searches += 1
        if self.index is None:
            self.index = MoveIndex(p.s.running, p.usage.borrowed_ids, p.topo, p.now, policy)
        found = None
        if self.index.by_id:
            request = MoveRequest(job, k, c, excl, p.open_elig(key), tier)
            budget = MoveBudget(
                left,
                policy.max_migrations_per_queue,
                self.per_queue,
                p.budget_q,
                p.budget_l,
                p.victim_ids,
            )
            found = find_moves(request, self.capacity(), budget, self.index)
        if found is None:
            self.failed[sh] = max(tier, failed) if failed is not None else tier
            return False
        deadline = p.now + policy.grace_seconds
        if not self.worth_it(job, sh, deadline):
            self.failed[sh] = Tier.URGENT  # it will start soon anyway, whoever asks
            return False
        self.apply(job, found, deadline, over_quota)
        return True

    def is_gang(self, sh: ShapeT) -> bool:
        """Several nodes, a whole node, or as many GPUs as a node has: what may get room."""
        _key, k, c, _last, excl = sh
        return k > 1 or excl or c >= self.p.topo.max_gpus

    def capacity(self) -> Capacity:
        p = self.p
        live = p.live
        return Capacity(
            p.topo, live.nfree, live.usable, p.on_node, live.buckets, p.excl_held, p.started_on
        )

    def worth_it(self, job: PendingJob, sh: ShapeT, deadline: float) -> bool:
        """Only for a gang that would otherwise wait longer than ``consolidate_min_wait_s``
        (and past the moved jobs' deadline): its earliest start as things are."""
        p = self.p
        key, k, c, _last, excl = sh
        horizon = max(deadline, p.now + p.policy.consolidate_min_wait_s)
        res = p.timeline().earliest_start(
            p.topo,
            p.open_elig(key),
            p.live.usable_counts(),
            k,
            c,
            excl,
            job.model_name,
            p.now,
            horizon,
        )
        return res is None  # no start by the horizon

    def apply(self, job: PendingJob, found: Moves, deadline: float, over_quota: str) -> None:
        """Move the jobs: charge the budgets, keep room on their destinations, move their
        releases to the deadline, hold the gang's nodes and claim its quota (a gang over
        its quota claims none)."""
        p = self.p
        topo = p.topo
        policy = p.policy
        for v, dest in found.moves:
            self.migrations.append(Migration(v.id, job.id, deadline, topo.nodes[dest].name))
            self.per_queue[v.queue] = self.per_queue.get(v.queue, 0) + 1
            p.mark_leaving(v, deadline)
            p.live.take(dest, v.gpus, False)
            end = max(running_end(v, p.now, policy), deadline + policy.overrun_s)
            p._start_events.append((end, dest, v.gpus))
            if p._timeline is not None:
                p._timeline.add(end, dest, v.gpus)
        p.hold(job, found.nodes, deadline)
        if not over_quota:
            p.quota.claim_for(job, ())
        moved = [v for v, _ in found.moves]
        p.record(job, moving(job, moved, topo, deadline, over_quota), deadline)
        p.n_preemptors += 1
        self.gangs += 1


def moved_off(jobs: Sequence[RunningJob], topo: Topology) -> str:
    """Where jobs move off, in words: ``rack r012``, ``racks r01, r02`` or ``node n7``."""
    index = topo.index
    nodes = sorted({s.node for v in jobs for s in v.placement if s.node in index})
    racks = sorted({topo.rack_label[topo.rack_of[index[n]]] for n in nodes})
    if len(nodes) == 1:
        return f"node {nodes[0]}"
    if len(racks) == 1:
        return f"rack {racks[0]}"
    return "racks " + ", ".join(racks)


def moving(
    job: PendingJob,
    jobs: Sequence[RunningJob],
    topo: Topology,
    deadline: float | None,
    over_quota: str = "",
) -> explain.Reason:
    """PREEMPTING, for a gang that waits for moved jobs: "starts after 3 jobs move off rack
    r012". ``deadline`` (when the last has stopped) is also its estimated start;
    ``over_quota``: how a gang over its quota will start (``try_gang``)."""
    gpus = sum(v.gpus for v in jobs)
    where = moved_off(jobs, topo)
    details: dict[str, Any] = {
        "victims": len(jobs),
        "victim_gpus": gpus,
        "moving_off": where,
        "consolidation": 1,
    }
    if deadline is not None:
        details["victims_stop_at"] = explain.iso(deadline)
    else:
        details[explain.NO_ESTIMATE] = "the jobs making room have no stop deadline"
    when = explain.when(deadline)
    if len(jobs) == 1:
        moves = f"1 job moves off {where} ({gpus} GPUs): it checkpoints by {when} and restarts"
        moves += " elsewhere from its checkpoint"
    else:
        moves = f"{len(jobs)} jobs move off {where} ({gpus} GPUs): they checkpoint by {when}"
        moves += " and restart elsewhere from their checkpoints"
    if over_quota:
        details["over_quota"] = over_quota
    return (
        Code.PREEMPTING,
        f"Starts after {moves} (consolidation).{_OVER_QUOTA_NOTES.get(over_quota, '')}",
        details,
        "Nothing to do: it starts as soon as they have moved.",
    )


def leaving_reason(
    job: PendingJob,
    leaving: Sequence[RunningJob],
    topo: Topology,
    deadline: float,
    over_quota: str = "",
) -> explain.Reason | None:
    """The verdict of a gang whose moved jobs are still checkpointing (None when what it
    waits for includes preempted jobs: the usual PREEMPTING verdict); ``over_quota`` as
    for ``moving``."""
    if not leaving or not all(v.migrating for v in leaving):
        return None
    return moving(job, leaving, topo, deadline, over_quota)


# -- invariants ------------------------------------------------------------------------
def check_migrations(snapshot: Snapshot, plan: Plan, started: AbstractSet[int]) -> list[str]:
    """What ``check_plan`` checks of ``plan.migrations`` (empty list = OK): consolidation on;
    each moved job known, once, running, movable (preemptible, checkpointable, not demoted,
    not urgent, not borrowed, on one node, not exclusive, run long enough, not ending soon),
    not also preempted, of a tier the gang's may move, for a gang that waits and holds a
    reservation; the eviction budget (overall and per queue); guarantees with the plan's
    preemptions; a destination that can run it, on another ready usable node, with room
    once the plan's starts are placed."""
    migrations = plan.migrations
    if not migrations:
        return []
    errors: list[str] = []
    policy = snapshot.policy
    now = plan.now if plan.now is not None else 0.0
    if not enabled(policy):
        errors.append("migrations planned but consolidation is off")
    if len(migrations) > policy.max_migrations:
        errors.append(f"{len(migrations)} migrations in one plan, over {policy.max_migrations}")
    queues = {q.name: q for q in snapshot.queues}
    lines = {line.name: line for line in snapshot.lines}
    usage = derive_usage(snapshot.running, queues, lines)
    running = {r.id: r for r in snapshot.running}
    pending = {j.id: j for j in snapshot.pending}
    nodes = {n.name: n for n in snapshot.nodes}
    preempted = {p.victim_id for p in plan.preemptions}
    reserved_for = {res.job_id for res in plan.reservations}
    seen: set[int] = set()
    per_queue: dict[str, int] = {}
    lost_q: dict[str, int] = {}
    lost_l: dict[str, int] = {}
    into: dict[str, int] = {}
    started_on = {slot.node for s in plan.starts for slot in s.placement}
    for m in migrations:
        v = running.get(m.job_id)
        if v is None:
            errors.append(f"migration of unknown running job {m.job_id}")
            continue
        if v.id in seen:
            errors.append(f"job {v.id} moved twice")
            continue
        seen.add(v.id)
        if not movable(v, usage.borrowed_ids, now, policy):
            errors.append(
                f"job {v.id} moved but may not move (it must run, be preemptible, "
                "checkpointable, not demoted, not urgent, not borrowed, on one node, not "
                "exclusive, have run long enough and not be about to end)"
            )
        if v.id in preempted:
            errors.append(f"job {v.id} both preempted and moved")
        if abs(m.grace_deadline - (now + policy.grace_seconds)) > 1e-6:
            errors.append(f"job {v.id} moved with a deadline other than now + grace")
        if m.for_job_id is None:
            check_defragment(v, policy, now, errors)
        elif (gang := pending.get(m.for_job_id)) is None:
            errors.append(f"job {v.id} moved for unknown pending job {m.for_job_id}")
        else:
            if gang.id in started:
                errors.append(f"job {gang.id} both starts and has jobs moved for it")
            if gang.id not in reserved_for:
                errors.append(f"job {gang.id} has jobs moved for it but holds no nodes")
            if v.tier > effective_tier(gang.tier, queues.get(gang.queue)):
                errors.append(f"job {v.id} ({v.tier.label}) moved for a lower-tier job {gang.id}")
        per_queue[v.queue] = per_queue.get(v.queue, 0) + 1
        lost_q[v.queue] = lost_q.get(v.queue, 0) + v.gpus
        lost_l[v.line] = lost_l.get(v.line, 0) + v.gpus
        check_destination(m, v, nodes, started_on, errors)
        into[m.to_node] = into.get(m.to_node, 0) + v.gpus
    for q, n in per_queue.items():
        if n > policy.max_migrations_per_queue:
            errors.append(
                f"queue {q} has {n} jobs moved in one plan, over {policy.max_migrations_per_queue}"
            )
    check_guarantees(plan, running, usage, queues, lines, lost_q, lost_l, errors)
    check_room(plan, nodes, into, errors)
    check_emptied(snapshot, plan, errors)
    return errors


def check_emptied(snapshot: Snapshot, plan: Plan, errors: list[str]) -> None:
    """Defragmentation (moves for no gang) empties whole nodes, at most
    ``defragment_nodes`` of them, none that a start of the plan, a reservation or another
    moved job uses."""
    moved = {m.job_id for m in plan.migrations if m.for_job_id is None}
    if not moved:
        return
    on_node: dict[str, set[int]] = {}
    for r in snapshot.running:
        for slot in r.placement:
            on_node.setdefault(slot.node, set()).add(r.id)
    sources = {n for n, ids in on_node.items() if ids & moved}
    if len(sources) > snapshot.policy.defragment_nodes:
        errors.append(
            f"{len(sources)} nodes emptied to defragment, over {snapshot.policy.defragment_nodes}"
        )
    taken = {slot.node for s in plan.starts for slot in s.placement}
    taken.update(n for res in plan.reservations for n in res.nodes)
    into = {m.to_node for m in plan.migrations}
    for n in sorted(sources):
        if not on_node[n] <= moved:
            errors.append(f"node {n} defragmented but jobs stay on it")
        if n in taken or n in into:
            errors.append(
                f"node {n} defragmented but a start, a reservation or a moved job uses it"
            )


def check_defragment(v: RunningJob, policy: PolicyConfig, now: float, errors: list[str]) -> None:
    """A job moved for no gang (``defragment.py``): defragmentation is on and the job is
    predicted to run long enough to be worth moving."""
    if policy.defragment_nodes <= 0:
        errors.append(f"job {v.id} moved for no waiting job but defragmentation is off")
    if running_end(v, now, policy) < now + policy.defragment_min_left_s:
        errors.append(f"job {v.id} moved to defragment but predicted to end soon")


def check_destination(
    m: Migration,
    v: RunningJob,
    nodes: Mapping[str, NodeView],
    started_on: AbstractSet[str],
    errors: list[str],
) -> None:
    """The node kept for a moved job can run it and is another ready, usable node, not
    one wholly free (unless the job fills it) that no start of the plan uses."""
    dest = nodes.get(m.to_node)
    if dest is None:
        errors.append(f"job {v.id} moved to unknown node {m.to_node}")
        return
    src = nodes.get(v.placement[0].node) if v.placement else None
    if dest.state != READY or dest.exclusive:
        errors.append(f"job {v.id} moved to unusable node {dest.name}")
    if src is not None and (src.name == dest.name or not dominates(dest, src)):
        errors.append(f"job {v.id} moved to node {dest.name}, which cannot run it")
    wholly_free = len(dest.free_gpus) == dest.gpus_total and dest.name not in started_on
    if wholly_free and v.gpus != dest.gpus_total:
        errors.append(f"job {v.id} moved onto wholly free node {dest.name}, breaking it")


def check_guarantees(
    plan: Plan,
    running: Mapping[int, RunningJob],
    usage: Any,
    queues: Mapping[str, Any],
    lines: Mapping[str, Any],
    lost_q: dict[str, int],
    lost_l: dict[str, int],
    errors: list[str],
) -> None:
    """Preemptions and migrations together keep every queue and line at its guarantee."""
    budget_q, budget_l = preemption_budgets(usage, dict(queues), dict(lines))
    for p in plan.preemptions:
        v = running.get(p.victim_id)
        if v is not None:
            lost_q[v.queue] = lost_q.get(v.queue, 0) + v.gpus
            lost_l[v.line] = lost_l.get(v.line, 0) + v.gpus
    for scope, lost, budgets in (("queue", lost_q, budget_q), ("line", lost_l, budget_l)):
        for name, gpus in lost.items():
            if gpus > budgets.get(name, 0):
                errors.append(
                    f"{scope} {name} loses {gpus} GPUs to preemption and migration, "
                    "below its guarantee"
                )


def check_room(
    plan: Plan, nodes: Mapping[str, NodeView], into: Mapping[str, int], errors: list[str]
) -> None:
    """Each destination has room for the jobs moved there once the plan's starts are placed."""
    started_on: dict[str, int] = {}
    for s in plan.starts:
        for slot in s.placement:
            started_on[slot.node] = started_on.get(slot.node, 0) + len(slot.gpus)
    for name, gpus in into.items():
        node = nodes.get(name)
        if node is None:
            continue
        if len(node.free_gpus) - started_on.get(name, 0) < gpus:
            errors.append(f"node {name} has no room for the {gpus} GPUs of jobs moved there")


__all__ = [
    "Consolidation",
    "MoveIndex",
    "MoveRequest",
    "Moves",
    "check_migrations",
    "dominates",
    "enabled",
    "find_moves",
    "leaving_reason",
    "movable",
    "moving",
]
