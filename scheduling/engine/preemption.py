"""Victim selection (R1-R3, Q5, Q7).

A victim must be running (not already preempting), preemptible, not demoted,
and allowed either by the tier rule (its tier is in the preemptor queue's
``preempts_tiers`` and strictly lower) or by reclaiming (it runs on borrowed
capacity and the preemptor would start within its own quota). Victims from a
queue or line may total at most its active use above its guarantee.

The search is greedy and cheap rather than globally optimal:

1. per node, the cheapest victims (least lost progress in GPU-hours since the
   last checkpoint, plus ``victim_given_weight`` per GPU-hour the run has been given,
   which R4's eviction ratio counts, plus ``eviction_cost_gpu_h`` a victim; then
   bigger first so fewer jobs) that bring it to ``c`` free GPUs (or wholly free for
   exclusive jobs);
   Borrowed work always goes before entitled work (reclaimed first, Q7);
2. one node: the cheapest such node; several: the cheapest ``k`` nodes of one
   rack, else of one block (``victim_nodes``);
3. extra victims from the preemptor's own queue/line when the preemptor also
   needs quota room;
4. pruning: any victim whose removal still leaves the chosen nodes and the quota
   room sufficient is dropped, so the set is minimal for that placement.

The planner asks through values, never by handing over itself: a
``VictimRequest`` (what the preemptor needs and may do), a ``CapacityView``
(free capacity and who holds it), a ``QuotaView`` (borrowed work and guarantee
budgets) and the plan's ``VictimIndex``. Nothing here mutates them; the planner
applies the returned ``Selection``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from .placement import Topology
from .policy import victim_cost_gpu_h
from .types import PendingJob, RunningJob, Tier
from .victim_nodes import choose_nodes, multi_node_options, single_node_options

ENTITLED = 1e12


@dataclass(frozen=True, slots=True)
class VictimRequest:
    """What a preemptor needs and may do.

    ``k`` nodes with ``c`` GPUs each (wholly free ones if ``exclusive``) among
    ``elig`` (ready nodes of its class, 1/0 per node index); ``allowed``: tiers
    it may preempt; ``within_quota``: it would start within its quota, so it may
    reclaim borrowed work; ``short_q``/``short_l``: GPUs it lacks in its queue /
    line quota (its own entitled victims must free them); ``leaving``: its
    victims already checkpointing.
    """

    job: PendingJob
    k: int
    c: int
    exclusive: bool
    elig: Sequence[int]
    allowed: frozenset[Tier]
    within_quota: bool
    short_q: int = 0
    short_l: int = 0
    leaving: tuple[RunningJob, ...] = ()


@dataclass(frozen=True, slots=True)
class CapacityView:
    """The cluster as the planner holds it at this point of the plan (read-only).

    Per node index: ``nfree`` free GPUs, ``holders`` the running jobs there with
    their GPU counts, ``started_on`` how many jobs this plan started there;
    ``buckets[f]``: usable nodes with ``f`` free GPUs; ``excl_held``: nodes held
    exclusively; ``reserved``: nodes held for other jobs (node -> start).
    """

    topo: Topology
    nfree: Sequence[int]
    buckets: Sequence[Sequence[int]]
    holders: Sequence[Sequence[tuple[RunningJob, int]]]
    excl_held: AbstractSet[int]
    reserved: Mapping[int, float]
    started_on: Sequence[int]


@dataclass(frozen=True, slots=True)
class QuotaView:
    """Quota accounting for victim selection (read-only).

    ``borrowed``: running jobs on borrowed capacity; ``budget_q``/``budget_l``:
    GPUs each queue / line may still lose in this plan (active use above its
    guarantee, less the victims already picked); ``chosen``: those victims.
    """

    borrowed: frozenset[int]
    budget_q: Mapping[str, int]
    budget_l: Mapping[str, int]
    chosen: AbstractSet[int]


@dataclass(frozen=True, slots=True)
class Selection:
    """Victims to preempt (by id) and the nodes to hold for the preemptor."""

    victims: tuple[RunningJob, ...]
    nodes: tuple[int, ...]


class VictimIndex:
    """Statically eligible victims of one plan, indexed once (cost, tier, node)."""

    __slots__ = ("cost", "by_tier", "borrowed", "on_node", "ordered", "by_id", "_base")

    def __init__(
        self,
        pool: list[RunningJob],
        borrowed: frozenset[int],
        topo: Topology,
        now: float,
        per_eviction: float = 0.0,
        given_weight: float = 0.0,
    ) -> None:
        # Borrowed work is reclaimed first (Q7): any entitled victim weighs more
        # than every borrowed one; then lost GPU-hours plus ``per_eviction`` a job
        # (``PolicyConfig.eviction_cost_gpu_h``: fewer victims, R2) plus ``given_weight``
        # per GPU-hour the run was given (``victim_given_weight``: R4's eviction ratio) decide.
        self.cost = {
            v.id: victim_cost_gpu_h(v.gpus, v.started_at, v.last_checkpoint_at, now, given_weight)
            + per_eviction
            + (0.0 if v.id in borrowed else ENTITLED)
            for v in pool
        }
        self.by_tier: dict[Tier, list[RunningJob]] = {}
        self.borrowed = [v for v in pool if v.id in borrowed]
        # node -> (cost, -GPUs, id, GPUs) of the victims there, cheapest first
        self.on_node: dict[int, list[tuple[float, int, int, int]]] = {}
        for v in pool:
            self.by_tier.setdefault(v.tier, []).append(v)
            for n, g in topo.slots_of(v):
                self.on_node.setdefault(n, []).append((self.cost[v.id], -g, v.id, g))
        for lst in self.on_node.values():
            lst.sort()
        self.ordered = sorted(pool, key=lambda v: (self.cost[v.id], -v.gpus, v.id))
        self.by_id = {v.id: v for v in pool}
        self._base: dict[tuple[frozenset[Tier], bool], list[RunningJob]] = {}

    def base(self, allowed: frozenset[Tier], within_quota: bool) -> list[RunningJob]:
        """Victims a preemptor of this kind may ever pick (before budgets), by id."""
        key = (allowed, within_quota)
        got = self._base.get(key)
        if got is None:
            ids: set[int] = set()
            got = []
            groups = [self.by_tier.get(t, []) for t in sorted(allowed)]
            if within_quota:
                groups.append(self.borrowed)
            for group in groups:
                for v in group:
                    if v.id not in ids:
                        ids.add(v.id)
                        got.append(v)
            got.sort(key=lambda v: v.id)
            self._base[key] = got
        return got


class Search:
    """One victim search: the request and the views, plus what is derived from
    them once (the candidate test, and where the leaving victims free GPUs)."""

    __slots__ = (
        "request",
        "capacity",
        "quota",
        "index",
        "is_candidate",
        "leaving_on",
        "leaving_ids",
    )

    def __init__(
        self, request: VictimRequest, capacity: CapacityView, quota: QuotaView, index: VictimIndex
    ) -> None:
        self.request = request
        self.capacity = capacity
        self.quota = quota
        self.index = index
        self.is_candidate = candidate_filter(request, quota, index)
        self.leaving_on = capacity.topo.gpus_by_node(request.leaving)
        self.leaving_ids = frozenset(v.id for v in request.leaving)


def select_victims(
    request: VictimRequest, capacity: CapacityView, quota: QuotaView, index: VictimIndex
) -> Selection | None:
    """The cheapest minimal victims that make room for the request, or None.

    None also when nothing needs to go and nothing is leaving (the preemptor
    then simply has to wait or be placed).
    """
    base = index.base(request.allowed, request.within_quota)
    if not base and not request.leaving:
        return None
    s = Search(request, capacity, quota, index)
    options = single_node_options(s) if request.k == 1 else multi_node_options(s, base)
    nodes = choose_nodes(options, request.k, request.c, capacity.topo, index.cost)
    if nodes is None:
        return None
    victims: set[int] = set()
    for n in nodes:
        victims.update(options[n][2])
    if not add_quota_victims(s, base, victims):
        return None
    prune(s, victims, nodes)
    if not within_budgets(victims, index.by_id, quota):
        return None
    if not victims and not request.leaving:
        return None
    return Selection(tuple(index.by_id[i] for i in sorted(victims)), tuple(nodes))


def candidate_filter(
    request: VictimRequest, quota: QuotaView, index: VictimIndex
) -> Callable[[int], bool]:
    """``is_candidate(id)``: an indexed victim this preemptor may pick, not picked
    yet, that alone fits its queue's and line's budgets (memoised: the answer
    does not change during one search)."""
    memo: dict[int, bool] = {}
    by_id, allowed, within = index.by_id, request.allowed, request.within_quota
    chosen, borrowed, bq, bl = quota.chosen, quota.borrowed, quota.budget_q, quota.budget_l

    def is_candidate(vid: int) -> bool:
        got = memo.get(vid)
        if got is None:
            v = by_id.get(vid)
            got = (
                v is not None
                and vid not in chosen
                and (v.tier in allowed or (within and vid in borrowed))
                and v.gpus <= bq.get(v.queue, 0)
                and v.gpus <= bl.get(v.line, 0)
            )
            memo[vid] = got
        return got

    return is_candidate


def quota_freed(
    victims: Iterable[int],
    by_id: Mapping[int, RunningJob],
    job: PendingJob,
    scope: str,
    borrowed: AbstractSet[int],
) -> int:
    """Quota room the victims free for ``job`` in its own queue or line
    (``scope``): GPUs of its entitled (not borrowed) work there."""
    name = job.queue if scope == "queue" else job.line
    return sum(
        by_id[i].gpus
        for i in victims
        if i not in borrowed and (by_id[i].queue if scope == "queue" else by_id[i].line) == name
    )


def add_quota_victims(s: Search, base: Sequence[RunningJob], victims: set[int]) -> bool:
    """Add the cheapest entitled victims of the preemptor's own queue, then line,
    until it fits its quota there; False if they cannot free enough."""
    req = s.request
    job = req.job
    borrowed = s.quota.borrowed
    cost = s.index.cost
    for scope, short in (("queue", req.short_q), ("line", req.short_l)):
        if short <= 0:
            continue
        rem = short - quota_freed(victims, s.index.by_id, job, scope, borrowed)
        if rem <= 0:
            continue
        extra = sorted(
            (
                v
                for v in base
                if s.is_candidate(v.id)
                and v.id not in victims
                and v.tier in req.allowed
                and v.id not in borrowed
                and (v.queue == job.queue if scope == "queue" else v.line == job.line)
            ),
            key=lambda v: (cost[v.id], -v.gpus, v.id),
        )
        greedy: list[RunningJob] = []
        got = 0
        for v in extra:
            if got >= rem:
                break
            greedy.append(v)
            got += v.gpus
        if got < rem:
            return False
        # R2, fewest victims: one job that frees the room alone (the smallest such,
        # then the cheapest) when it costs no more than the cheapest-first set.
        single = min(
            (v for v in extra if v.gpus >= rem), key=lambda v: (v.gpus, cost[v.id]), default=None
        )
        # (quota victims are entitled: compare without the ENTITLED weight each carries)
        if single is not None and cost[single.id] - ENTITLED <= sum(
            cost[v.id] - ENTITLED for v in greedy
        ):
            greedy = [single]
        victims.update(v.id for v in greedy)
    return True


def node_fits(s: Search, n: int, freed: int, victims: AbstractSet[int]) -> bool:
    """Would chosen node ``n`` still give the preemptor its GPUs with ``freed``
    GPUs released there by ``victims`` (plus what is leaving anyway)?"""
    cap = s.capacity
    if n in cap.excl_held or s.request.exclusive:
        return all(r.id in victims or r.id in s.leaving_ids for r, _ in cap.holders[n])
    free = min(cap.topo.total[n], cap.nfree[n] + s.leaving_on.get(n, 0) + freed)
    return free >= s.request.c


def prune(s: Search, victims: set[int], nodes: Sequence[int]) -> None:
    """Drop every victim, dearest first, whose removal still leaves the chosen
    nodes and the quota room sufficient (in place)."""
    req = s.request
    by_id = s.index.by_id
    cost = s.index.cost
    borrowed = s.quota.borrowed
    topo = s.capacity.topo
    node_set = set(nodes)
    freed_on = topo.gpus_by_node((by_id[i] for i in victims), node_set)
    for i in sorted(victims, key=lambda i: (-cost[i], -by_id[i].gpus, i)):
        victims.discard(i)
        delta = topo.gpus_by_node((by_id[i],), node_set)
        ok = (
            all(node_fits(s, n, freed_on.get(n, 0) - g, victims) for n, g in delta.items())
            and not (
                req.short_q > 0
                and quota_freed(victims, by_id, req.job, "queue", borrowed) < req.short_q
            )
            and not (
                req.short_l > 0
                and quota_freed(victims, by_id, req.job, "line", borrowed) < req.short_l
            )
        )
        if ok:
            for n, g in delta.items():
                freed_on[n] = freed_on.get(n, 0) - g
        else:
            victims.add(i)


def within_budgets(
    victims: Iterable[int], by_id: Mapping[int, RunningJob], quota: QuotaView
) -> bool:
    """Guarantees: the victims of each queue and line together stay within its budget."""
    per_q: dict[str, int] = {}
    per_l: dict[str, int] = {}
    for i in victims:
        v = by_id[i]
        per_q[v.queue] = per_q.get(v.queue, 0) + v.gpus
        per_l[v.line] = per_l.get(v.line, 0) + v.gpus
    return all(g <= quota.budget_q.get(q, 0) for q, g in per_q.items()) and all(
        g <= quota.budget_l.get(line, 0) for line, g in per_l.items()
    )
