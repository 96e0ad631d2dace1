"""Victim selection (R1-R3, Q5, Q7).

A victim must be running (not already preempting), preemptible, not demoted,
and allowed either by the tier rule (its tier is in the preemptor queue's
``preempts_tiers`` and strictly lower) or by reclaiming (it runs on borrowed
capacity and the preemptor would start within its own quota). Victims from a
queue or line may total at most its active use above its guarantee.

The search is greedy and cheap rather than globally optimal:

1. per node, the cheapest victims (least lost progress in GPU-hours since the
   last checkpoint, then bigger first so fewer jobs) that bring it to ``c`` free
   GPUs (or wholly free for exclusive jobs);
   Borrowed work always goes before entitled work (reclaimed first, Q7);
2. one node: the cheapest such node; several: the cheapest ``k`` nodes of one
   rack, else of one block;
3. extra victims from the preemptor's own queue/line when the preemptor also
   needs quota room;
4. pruning: any victim whose removal still leaves the chosen nodes and the quota
   room sufficient is dropped, so the set is minimal for that placement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .policy import loss_gpu_hours
from .types import PendingJob, RunningJob, Tier

if TYPE_CHECKING:
    from .planner import Planner, ShapeT


ENTITLED = 1e12


class VictimIndex:
    """Statically eligible victims of one plan, indexed once (cost, tier, node)."""

    __slots__ = ("cost", "by_tier", "borrowed", "on_node", "ordered", "by_id", "_base")

    def __init__(
        self, pool: list[RunningJob], borrowed: frozenset[int], index: dict[str, int], now: float
    ) -> None:
        # Borrowed work is reclaimed first (Q7): any entitled victim weighs more
        # than every borrowed one; then lost GPU-hours decide.
        self.cost = {
            v.id: loss_gpu_hours(v, now) + (0.0 if v.id in borrowed else ENTITLED) for v in pool
        }
        self.by_tier: dict[Tier, list[RunningJob]] = {}
        self.borrowed = [v for v in pool if v.id in borrowed]
        self.on_node: dict[int, list[tuple[float, int, int, int]]] = {}
        for v in pool:
            self.by_tier.setdefault(v.tier, []).append(v)
            for slot in v.placement:
                n = index.get(slot.node)
                if n is None:
                    continue
                g = len(slot.gpus)
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


def select_victims(
    p: Planner,
    job: PendingJob,
    sh: ShapeT,
    allowed: frozenset[Tier],
    within_quota: bool,
    short_q: int,
    short_l: int,
    leaving: tuple[RunningJob, ...],
) -> tuple[list[RunningJob], list[int]] | None:
    key, k, c, _last, excl = sh
    topo = p.topo
    live = p.live
    borrowed = p.usage.borrowed_ids
    bq, bl = p.budget_q, p.budget_l
    chosen = p.victim_ids

    vi = p.victim_index()
    base = vi.base(allowed, within_quota)
    if not base and not leaving:
        return None
    memo: dict[int, bool] = {}

    def is_cand(vid: int) -> bool:
        """Allowed for this preemptor and still within every guarantee budget."""
        got = memo.get(vid)
        if got is None:
            v = by_id.get(vid)
            got = (
                v is not None
                and vid not in chosen
                and (v.tier in allowed or (within_quota and vid in borrowed))
                and v.gpus <= bq.get(v.queue, 0)
                and v.gpus <= bl.get(v.line, 0)
            )
            memo[vid] = got
        return got

    cost = vi.cost
    by_id = vi.by_id
    leaving_ids = {v.id for v in leaving}

    index = topo.index
    leaving_on: dict[int, int] = {}
    for v in leaving:
        for slot in v.placement:
            n = index.get(slot.node)
            if n is not None:
                leaving_on[n] = leaving_on.get(n, 0) + len(slot.gpus)

    elig = p.elig_ready(key)
    reserved = p.reserved
    excl_held = p.excl_held
    total = topo.total
    nfree = live.nfree
    on_node = p.on_node
    # node -> (cost, njobs, victim ids, GPUs free after)
    options: dict[int, tuple[float, int, tuple[int, ...], int]] = {}
    started_on = p.started_on
    vi_on_node = vi.on_node

    def evaluate(n: int) -> None:
        if not elig[n] or n in reserved:
            return
        tot = total[n]
        if n in excl_held or excl:
            # The node must end up wholly free: every job on it must go.
            holders = on_node[n]
            if started_on[n]:
                return
            if any(not is_cand(r.id) and r.id not in leaving_ids for r, _ in holders):
                return
            if not holders and nfree[n] != tot:
                return
            if tot < c:
                return
            vids = tuple(sorted({r.id for r, _ in holders if is_cand(r.id)}))
            options[n] = (sum(cost[i] for i in vids), len(vids), vids, tot)
            return
        base = nfree[n] + leaving_on.get(n, 0)
        if base > tot:
            base = tot
        need = c - base
        if need <= 0:
            options[n] = (0.0, 0, (), base)
            return
        picked: list[tuple[float, int, int, int]] = []
        freed = 0
        for item in vi_on_node.get(n, ()):
            if not is_cand(item[2]):
                continue
            picked.append(item)
            freed += item[3]
            if freed >= need:
                break
        if freed < need:
            return
        if len(picked) > 1:
            for item in sorted(picked, reverse=True):
                if freed - item[3] >= need:
                    picked.remove(item)
                    freed -= item[3]
        vids = tuple(sorted(i[2] for i in picked))
        options[n] = (sum(i[0] for i in picked), len(picked), vids, min(tot, base + freed))

    if k == 1:
        # A node costs at least its cheapest candidate: visit candidates from the
        # cheapest up and stop once they cost more than the best node found.
        for n in sorted(leaving_on):
            evaluate(n)
        best = min((o[0] for o in options.values()), default=None)
        done: set[int] = set(leaving_on)
        for v in vi.ordered:
            if not is_cand(v.id):
                continue
            if best is not None and cost[v.id] > best:
                break
            for slot in v.placement:
                n = index.get(slot.node)
                if n is None or n in done:
                    continue
                done.add(n)
                evaluate(n)
                o = options.get(n)
                if o is not None and (best is None or o[0] < best):
                    best = o[0]
    else:
        # Nodes worth looking at: already free enough, or holding candidates/leavers.
        potential: dict[int, int] = dict(leaving_on)
        for v in base:
            for slot in v.placement:
                n = index.get(slot.node)
                if n is not None:
                    potential[n] = potential.get(n, 0) + len(slot.gpus)
        look = {n for n, g in potential.items() if nfree[n] + g >= c or n in excl_held}
        for f in range(min(c, len(live.buckets)), len(live.buckets)):
            look.update(live.buckets[f])
        for n in sorted(look):
            evaluate(n)

    if not options:
        return None
    if k == 1:
        n = min(options, key=lambda m: (options[m][0], options[m][1], options[m][3] - c, m))
        nodes = [n]
    else:
        rack_of = topo.rack_of
        per_rack: dict[int, list[tuple[float, int, int]]] = {}
        for n, (cst, nj, _v, _a) in options.items():
            per_rack.setdefault(rack_of[n], []).append((cst, nj, n))
        best: tuple[float, int, int, list[int]] | None = None
        for r, lst in per_rack.items():
            if len(lst) >= k:
                lst.sort()
                top = lst[:k]
                cand = (sum(x[0] for x in top), sum(x[1] for x in top), r, [x[2] for x in top])
                if best is None or cand[:3] < best[:3]:
                    best = cand
        if best is None:
            for b, racks in enumerate(topo.block_racks):
                lst = [x for r in racks for x in per_rack.get(r, ())]
                if len(lst) >= k:
                    lst.sort()
                    top = lst[:k]
                    cand = (
                        sum(x[0] for x in top),
                        sum(x[1] for x in top),
                        b,
                        [x[2] for x in top],
                    )
                    if best is None or cand[:3] < best[:3]:
                        best = cand
        if best is None:
            return None
        nodes = best[3]

    victims: set[int] = set()
    for n in nodes:
        victims.update(options[n][2])

    # Quota room inside the preemptor's own queue / line.
    def nb_freed(scope: str) -> int:
        if scope == "queue":
            return sum(
                by_id[i].gpus for i in victims if by_id[i].queue == job.queue and i not in borrowed
            )
        return sum(
            by_id[i].gpus for i in victims if by_id[i].line == job.line and i not in borrowed
        )

    for scope, short in (("queue", short_q), ("line", short_l)):
        if short <= 0:
            continue
        rem = short - nb_freed(scope)
        if rem <= 0:
            continue
        extra = sorted(
            (
                v
                for v in base
                if is_cand(v.id)
                and v.id not in victims
                and v.tier in allowed
                and v.id not in borrowed
                and (v.queue == job.queue if scope == "queue" else v.line == job.line)
            ),
            key=lambda v: (cost[v.id], -v.gpus, v.id),
        )
        for v in extra:
            if rem <= 0:
                break
            victims.add(v.id)
            rem -= v.gpus
        if rem > 0:
            return None

    # Drop victims that are not needed for the chosen nodes or the quota room.
    node_set = set(nodes)
    freed_on: dict[int, int] = {}
    for i in victims:
        for slot in by_id[i].placement:
            n = index.get(slot.node)
            if n in node_set:
                freed_on[n] = freed_on.get(n, 0) + len(slot.gpus)

    def node_ok(n: int, freed: int) -> bool:
        if n in excl_held or excl:
            return all(r.id in victims or r.id in leaving_ids for r, _ in on_node[n])
        base = min(total[n], nfree[n] + leaving_on.get(n, 0) + freed)
        return base >= c

    for i in sorted(victims, key=lambda i: (-cost[i], -by_id[i].gpus, i)):
        v = by_id[i]
        victims.discard(i)
        ok = True
        delta: dict[int, int] = {}
        for slot in v.placement:
            n = index.get(slot.node)
            if n in node_set:
                delta[n] = delta.get(n, 0) + len(slot.gpus)
        for n, g in delta.items():
            if not node_ok(n, freed_on.get(n, 0) - g):
                ok = False
                break
        if ok and short_q > 0 and nb_freed("queue") < short_q:
            ok = False
        if ok and short_l > 0 and nb_freed("line") < short_l:
            ok = False
        if ok:
            for n, g in delta.items():
                freed_on[n] = freed_on.get(n, 0) - g
        else:
            victims.add(i)

    # Guarantees: victims of one queue/line may not eat into its guarantee.
    per_q: dict[str, int] = {}
    per_l: dict[str, int] = {}
    for i in victims:
        v = by_id[i]
        per_q[v.queue] = per_q.get(v.queue, 0) + v.gpus
        per_l[v.line] = per_l.get(v.line, 0) + v.gpus
    if any(g > bq.get(q, 0) for q, g in per_q.items()):
        return None
    if any(g > bl.get(line, 0) for line, g in per_l.items()):
        return None
    if not victims and not leaving:
        return None
    return [by_id[i] for i in sorted(victims)], nodes
