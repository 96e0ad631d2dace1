"""Where a preemptor could run if some victims went: node options and the choice.

An *option* is what one node offers a preemptor: ``(cost, victims, victim ids,
GPUs free after)``, where cost is the victims' lost GPU-hours (entitled work
weighing more than any borrowed work, see ``preemption.VictimIndex``). A node
qualifies once its cheapest candidates free ``c`` GPUs (a node held
exclusively, or wanted exclusively, must lose every job on it); the cheapest
qualifying node wins for one node, and for several the ``k`` nodes of one rack
(else of one block) where making room costs least, a victim on several of them
counted once. Ties go to fewer victims (then, for one node, the tightest fit),
then to the lower node, rack or block, so the choice is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from .placement import Topology
from .types import RunningJob

if TYPE_CHECKING:
    from .preemption import Search

NodeOption = tuple[float, int, tuple[int, ...], int]
# (cost, -GPUs, victim id, GPUs): a victim's entry in ``VictimIndex.on_node``
Ranked = tuple[float, int, int, int]


def whole_node_option(
    holders: Sequence[tuple[RunningJob, int]],
    nfree: int,
    total: int,
    c: int,
    is_candidate: Callable[[int], bool],
    leaving_ids: AbstractSet[int],
    cost: Mapping[int, float],
) -> NodeOption | None:
    """A node that must end up wholly free: every job on it is a candidate or
    already leaving (the candidates are the victims)."""
    if any(not is_candidate(r.id) and r.id not in leaving_ids for r, _ in holders):
        return None
    if not holders and nfree != total:
        return None
    if total < c:
        return None
    vids = tuple(sorted({r.id for r, _ in holders if is_candidate(r.id)}))
    return (sum(cost[i] for i in vids), len(vids), vids, total)


def shared_node_option(
    free: int,
    total: int,
    c: int,
    ranked: Iterable[Ranked],
    is_candidate: Callable[[int], bool],
) -> NodeOption | None:
    """A node with ``free`` GPUs (counting leaving work): its cheapest candidates
    (``ranked``, cheapest first) until ``c`` are free, then without any that turn
    out unneeded (dearest first), so few and cheap jobs go."""
    need = c - free
    if need <= 0:
        return (0.0, 0, (), free)
    picked: list[Ranked] = []
    freed = 0
    for item in ranked:
        if not is_candidate(item[2]):
            continue
        picked.append(item)
        freed += item[3]
        if freed >= need:
            break
    if freed < need:
        return None
    if len(picked) > 1:
        for item in sorted(picked, reverse=True):
            if freed - item[3] >= need:
                picked.remove(item)
                freed -= item[3]
    vids = tuple(sorted(i[2] for i in picked))
    return (sum(i[0] for i in picked), len(picked), vids, min(total, free + freed))


def node_prober(s: Search) -> Callable[[int], NodeOption | None]:
    """``probe(n)``: what node ``n`` offers the search's preemptor, or None if it
    cannot serve (not eligible, reserved, or not enough candidates there).

    Built once per search with its inputs bound, since it runs for every node
    worth looking at.
    """
    req, cap = s.request, s.capacity
    elig, c, exclusive = req.elig, req.c, req.exclusive
    reserved, excl_held, started_on = cap.reserved, cap.excl_held, cap.started_on
    total, nfree, holders = cap.topo.total, cap.nfree, cap.holders
    leaving_on, leaving_ids, is_candidate = s.leaving_on, s.leaving_ids, s.is_candidate
    cost, ranked = s.index.cost, s.index.on_node

    def probe(n: int) -> NodeOption | None:
        if not elig[n] or n in reserved:
            return None
        if n in excl_held or exclusive:
            if started_on[n]:
                return None
            return whole_node_option(
                holders[n], nfree[n], total[n], c, is_candidate, leaving_ids, cost
            )
        free = min(total[n], nfree[n] + leaving_on.get(n, 0))
        return shared_node_option(free, total[n], c, ranked.get(n, ()), is_candidate)

    return probe


def single_node_options(s: Search) -> dict[int, NodeOption]:
    """Options for a one-node preemptor: the nodes of leaving victims, then the
    nodes of candidates from the cheapest up, stopping once a candidate alone
    costs more than the best node found (a node costs at least its cheapest)."""
    probe = node_prober(s)
    options: dict[int, NodeOption] = {}
    for n in sorted(s.leaving_on):
        got = probe(n)
        if got is not None:
            options[n] = got
    best = min((o[0] for o in options.values()), default=None)
    done: set[int] = set(s.leaving_on)
    cost = s.index.cost
    index = s.capacity.topo.index
    for v in s.index.ordered:
        if not s.is_candidate(v.id):
            continue
        if best is not None and cost[v.id] > best:
            break
        for slot in v.placement:
            n = index.get(slot.node)
            if n is None or n in done:
                continue
            done.add(n)
            got = probe(n)
            if got is not None:
                options[n] = got
                if best is None or got[0] < best:
                    best = got[0]
    return options


def multi_node_options(s: Search, base: Sequence[RunningJob]) -> dict[int, NodeOption]:
    """Options for a several-node preemptor, on the nodes worth looking at:
    already free enough, or free enough once its possible victims (``base``)
    and leaving victims go, or held exclusively."""
    cap = s.capacity
    c = s.request.c
    potential = dict(s.leaving_on)
    for n, g in cap.topo.gpus_by_node(base).items():
        potential[n] = potential.get(n, 0) + g
    look = {n for n, g in potential.items() if cap.nfree[n] + g >= c or n in cap.excl_held}
    buckets = cap.buckets
    for f in range(min(c, len(buckets)), len(buckets)):
        look.update(buckets[f])
    probe = node_prober(s)
    options: dict[int, NodeOption] = {}
    for n in sorted(look):
        got = probe(n)
        if got is not None:
            options[n] = got
    return options


def union_value(
    nodes: Sequence[int], options: Mapping[int, NodeOption], cost: Mapping[int, float]
) -> tuple[float, int]:
    """What making room on ``nodes`` costs: every victim once (a victim on several of the
    nodes goes once), and how many victims go."""
    vids = {i for n in nodes for i in options[n][2]}
    return sum(cost[i] for i in vids), len(vids)


def group_choice(
    members: Sequence[int], k: int, options: Mapping[int, NodeOption], cost: Mapping[int, float]
) -> tuple[float, int, list[int]] | None:
    """The ``k`` nodes of one group (a rack or block) to make room on, with their cost and
    victim count; None if the group has fewer than ``k`` options.

    Two candidates, each valued with every victim counted once (``union_value``): the
    ``k`` nodes cheapest on their own, and the ``k`` cheapest when a victim's cost is
    shared among the group's nodes it runs on. A gang that runs on ``k`` nodes then
    costs what it costs once, not ``k`` times, so a gang may make room for a gang on the
    same whole nodes rather than many small jobs going from scattered ones."""
    if len(members) < k:
        return None
    own = sorted(members, key=lambda n: (options[n][0], options[n][1], n))[:k]
    spread: dict[int, int] = {}
    for n in members:
        for i in options[n][2]:
            spread[i] = spread.get(i, 0) + 1
    if all(count == 1 for count in spread.values()):  # no victim on two nodes: as they are
        return sum(options[n][0] for n in own), sum(options[n][1] for n in own), own
    shared = sorted(
        members,
        key=lambda n: (sum(cost[i] / spread[i] for i in options[n][2]), options[n][1], n),
    )[:k]
    best: tuple[float, int, list[int]] | None = None
    for nodes in (own, shared):
        total, victims = union_value(nodes, options, cost)
        if best is None or (total, victims) < best[:2]:
            best = (total, victims, nodes)
    return best


def cheapest_group(
    groups: Iterable[tuple[int, Sequence[int]]],
    k: int,
    options: Mapping[int, NodeOption],
    cost: Mapping[int, float],
) -> list[int] | None:
    """Of groups of option nodes, the ``k`` nodes of the group where making room costs
    least (every victim counted once; then fewest victims, then the lowest group)."""
    best: tuple[float, int, int, list[int]] | None = None
    for g, members in groups:
        got = group_choice(members, k, options, cost)
        if got is not None and (best is None or (got[0], got[1], g) < best[:3]):
            best = (got[0], got[1], g, got[2])
    return None if best is None else best[3]


def choose_nodes(
    options: Mapping[int, NodeOption], k: int, c: int, topo: Topology, cost: Mapping[int, float]
) -> list[int] | None:
    """The nodes to make room on: the cheapest option for one node (then fewest
    victims, tightest fit, lowest node); for ``k`` nodes those of one rack, else of one
    block, where it costs least (``cheapest_group``); None if no rack or block has ``k``
    options. ``cost``: each victim's cost (the options' costs are their sums)."""
    if not options:
        return None
    if k == 1:
        return [min(options, key=lambda m: (options[m][0], options[m][1], options[m][3] - c, m))]
    per_rack: dict[int, list[int]] = {}
    for n in options:
        per_rack.setdefault(topo.rack_of[n], []).append(n)
    nodes = cheapest_group(sorted(per_rack.items()), k, options, cost)
    if nodes is None:
        nodes = cheapest_group(
            (
                (b, [n for r in racks for n in per_rack.get(r, ())])
                for b, racks in enumerate(topo.block_racks)
            ),
            k,
            options,
            cost,
        )
    return nodes
