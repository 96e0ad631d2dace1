"""Victim selection piece by piece, on small hand-built views (no planner).

The cluster of most tests: block b0 holds racks r0 (n0, n1) and r1 (n2); block
b1 holds rack r2 (n3). Every node has 8 GPUs. Costs are lost GPU-hours since
the last checkpoint; borrowed work costs less than any entitled work.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from scheduling.engine.placement import Cluster, Topology
from scheduling.engine.planner import Planner
from scheduling.engine.preemption import (
    ENTITLED,
    CapacityView,
    QuotaView,
    Search,
    Selection,
    VictimIndex,
    VictimRequest,
    add_quota_victims,
    candidate_filter,
    node_fits,
    prune,
    quota_freed,
    select_victims,
    within_budgets,
)
from scheduling.engine.types import RunningJob, Tier
from scheduling.engine.victim_nodes import (
    cheapest_group,
    choose_nodes,
    multi_node_options,
    node_prober,
    shared_node_option,
    single_node_options,
    whole_node_option,
)

from .helpers import HOUR, NOW, node, occupy, pjob, rjob, snap

LOWER = frozenset({Tier.EXPERIMENT, Tier.FINETUNE, Tier.CORE})
BIG = 1000


def cluster() -> list:
    return [
        node("n0", rack="r0", block="b0"),
        node("n1", rack="r0", block="b0"),
        node("n2", rack="r1", block="b0"),
        node("n3", rack="r2", block="b1"),
    ]


def ckpt(hours_ago: float) -> dict:
    """A run that checkpointed ``hours_ago`` (and started no later: rjob's default start
    is an hour ago)."""
    return {
        "last_checkpoint_at": NOW - hours_ago * HOUR,
        "started_at": NOW - max(1.0, hours_ago) * HOUR,
    }


class World:
    """Views of one cluster and its running work, as the planner would build them."""

    def __init__(
        self,
        running: Sequence[RunningJob],
        *,
        nodes: list | None = None,
        borrowed: Sequence[int] = (),
        budget: int = BIG,
        budget_q: dict[str, int] | None = None,
        budget_l: dict[str, int] | None = None,
        chosen: Sequence[int] = (),
        reserved: dict[int, float] | None = None,
        started_on: Sequence[int] | None = None,
        pool: Sequence[RunningJob] | None = None,
    ) -> None:
        self.topo = Topology(occupy(nodes or cluster(), running))
        live = Cluster(self.topo)
        holders: list[list[tuple[RunningJob, int]]] = [[] for _ in range(self.topo.n)]
        for r in running:
            for n, g in self.topo.slots_of(r):
                holders[n].append((r, g))
        excl = {i for i, nd in enumerate(self.topo.nodes) if nd.exclusive}
        self.capacity = CapacityView(
            self.topo,
            live.nfree,
            live.buckets,
            holders,
            excl,
            reserved or {},
            list(started_on or [0] * self.topo.n),
        )
        queues = {r.queue for r in running}
        lines = {r.line for r in running}
        self.quota = QuotaView(
            frozenset(borrowed),
            budget_q if budget_q is not None else dict.fromkeys(queues, budget),
            budget_l if budget_l is not None else dict.fromkeys(lines, budget),
            set(chosen),
        )
        victims = sorted(pool if pool is not None else running, key=lambda r: r.id)
        self.index = VictimIndex(victims, frozenset(borrowed), self.topo, NOW)

    def request(self, gpus: int, k: int = 1, c: int | None = None, **kw) -> VictimRequest:
        kw.setdefault("exclusive", False)
        kw.setdefault("allowed", LOWER)
        kw.setdefault("within_quota", True)
        kw.setdefault("elig", bytearray([1] * self.topo.n))
        job = kw.pop("job", None) or pjob(99, gpus, tier="urgent")
        return VictimRequest(job, k, gpus if c is None else c, **kw)

    def search(self, request: VictimRequest) -> Search:
        return Search(request, self.capacity, self.quota, self.index)

    def select(self, request: VictimRequest) -> Selection | None:
        return select_victims(request, self.capacity, self.quota, self.index)


def ids(selection: Selection | None) -> tuple[list[int], list[str]] | None:
    if selection is None:
        return None
    names = [f"n{n}" for n in selection.nodes]
    return [v.id for v in selection.victims], names


# -- VictimIndex ----------------------------------------------------------------------


def test_index_costs_lost_gpu_hours_and_entitled_work_weighs_more_than_borrowed():
    running = [
        rjob(1, {"n0": range(4)}, **ckpt(2)),  # 4 GPUs x 2 h
        rjob(2, {"n1": range(8)}, **ckpt(0.5)),  # 8 x 0.5 h
    ]
    index = World(running, borrowed=[1]).index
    assert index.cost == {1: 8.0, 2: 4.0 + ENTITLED}
    assert [v.id for v in index.ordered] == [1, 2]
    assert [v.id for v in index.borrowed] == [1]


def test_index_ranks_victims_per_node_cheapest_then_biggest():
    running = [
        rjob(1, {"n0": [0]}, **ckpt(1)),  # cost 1
        rjob(2, {"n0": [1, 2]}, **ckpt(0.5)),  # cost 1, bigger
        rjob(3, {"n0": [3], "n1": [0]}, **ckpt(0.25)),  # cost 0.5 on two nodes
    ]
    index = World(running).index
    assert index.on_node[0] == [
        (0.5 + ENTITLED, -1, 3, 1),
        (1.0 + ENTITLED, -2, 2, 2),
        (1.0 + ENTITLED, -1, 1, 1),
    ]
    assert index.on_node[1] == [(0.5 + ENTITLED, -1, 3, 1)]


def test_index_base_takes_allowed_tiers_and_borrowed_work_only_within_quota():
    running = [
        rjob(1, {"n0": range(8)}, tier="experiment"),
        rjob(2, {"n1": range(8)}, tier="finetune"),
        rjob(3, {"n2": range(8)}, tier="core", preemptible=True),
    ]
    index = World(running, borrowed=[3]).index
    only_experiments = frozenset({Tier.EXPERIMENT})
    assert [v.id for v in index.base(only_experiments, False)] == [1]
    assert [v.id for v in index.base(only_experiments, True)] == [1, 3]
    assert [v.id for v in index.base(frozenset(), True)] == [3]
    assert [v.id for v in index.base(LOWER, True)] == [1, 2, 3]  # once each, by id


# -- candidate_filter ------------------------------------------------------------------


@pytest.mark.parametrize(
    "world_kw, request_kw, expected",
    [
        ({}, {}, True),
        ({"chosen": [1]}, {}, False),  # already a victim of another preemptor
        ({}, {"allowed": frozenset({Tier.FINETUNE})}, False),
        ({"borrowed": [1]}, {"allowed": frozenset()}, True),  # reclaiming
        ({"borrowed": [1]}, {"allowed": frozenset(), "within_quota": False}, False),
        ({"budget_q": {"llm-experiment": 7}}, {}, False),  # 8 GPUs above the guarantee
        ({"budget_l": {"llm": 7}}, {}, False),
        ({"budget_q": {"llm-experiment": 8}, "budget_l": {"llm": 8}}, {}, True),
    ],
)
def test_candidate_filter(world_kw, request_kw, expected):
    world = World([rjob(1, {"n0": range(8)})], **world_kw)
    is_candidate = candidate_filter(world.request(8, **request_kw), world.quota, world.index)
    assert is_candidate(1) is expected
    assert is_candidate(12345) is False  # not an eligible victim at all


# -- one node's option -----------------------------------------------------------------


def test_whole_node_option_takes_every_candidate_on_the_node():
    a, b = rjob(1, {"n0": range(4)}), rjob(2, {"n0": range(4, 8)})
    holders = [(a, 4), (b, 4)]
    cost = {1: 3.0, 2: 5.0}
    got = whole_node_option(holders, 0, 8, 8, lambda i: True, frozenset(), cost)
    assert got == (8.0, 2, (1, 2), 8)


def test_whole_node_option_counts_leaving_jobs_but_not_as_victims():
    a, b = rjob(1, {"n0": range(4)}), rjob(2, {"n0": range(4, 8)})
    cost = {1: 3.0, 2: 5.0}
    got = whole_node_option([(a, 4), (b, 4)], 0, 8, 4, lambda i: i == 1, {2}, cost)
    assert got == (3.0, 1, (1,), 8)


@pytest.mark.parametrize(
    "holders_ok, nfree, total, c",
    [
        (False, 0, 8, 8),  # a holder that may not go
        (True, 4, 8, 4),  # no holders yet not whole: something outside the index holds GPUs
        (True, 4, 4, 8),  # the node is too small
    ],
)
def test_whole_node_option_refuses(holders_ok, nfree, total, c):
    holders = [(rjob(1, {"n0": range(8)}), 8)] if not holders_ok else []
    assert whole_node_option(holders, nfree, total, c, lambda i: False, set(), {}) is None


def test_shared_node_option_is_free_when_enough_is_free():
    assert shared_node_option(6, 8, 4, [], lambda i: True) == (0.0, 0, (), 6)


def test_shared_node_option_takes_the_cheapest_then_drops_what_is_not_needed():
    ranked = [(1.0, -2, 11, 2), (2.0, -4, 12, 4), (3.0, -4, 13, 4)]
    # 2 free, 6 wanted: 11 and 12 free 6 >= 4 needed; 11 alone is then not needed.
    assert shared_node_option(2, 8, 6, ranked, lambda i: True) == (2.0, 1, (12,), 6)


def test_shared_node_option_skips_non_candidates_and_can_fail():
    ranked = [(1.0, -2, 11, 2), (2.0, -4, 12, 4), (3.0, -4, 13, 4)]
    assert shared_node_option(0, 8, 6, ranked, lambda i: i != 12) == (4.0, 2, (11, 13), 6)
    assert shared_node_option(0, 8, 8, ranked, lambda i: i != 12) is None


def test_prober_refuses_ineligible_reserved_and_already_started_exclusive_nodes():
    running = [rjob(1, {"n0": range(8)}), rjob(2, {"n1": range(8)}), rjob(3, {"n2": range(8)})]
    world = World(running, reserved={1: NOW}, started_on=[0, 0, 1, 0])
    request = world.request(8, exclusive=True, elig=bytearray([0, 1, 1, 1]))
    probe = node_prober(world.search(request))
    assert [probe(n) for n in range(4)] == [None, None, None, (0.0, 0, (), 8)]


# -- options over the cluster ----------------------------------------------------------


def test_single_node_options_stop_once_candidates_cost_more_than_the_best_node():
    running = [
        rjob(1, {"n0": range(8)}, **ckpt(0.5)),  # 4
        rjob(2, {"n1": range(8)}, **ckpt(1)),  # 8
        rjob(3, {"n2": range(8)}, **ckpt(2)),  # 16
    ]
    world = World(running)
    options = single_node_options(world.search(world.request(8)))
    # n0 answers with cost 4; job 2 alone costs 8 > 4, so n1 and n2 are never probed.
    assert options == {0: (4.0 + ENTITLED, 1, (1,), 8)}


def test_single_node_options_start_from_the_nodes_of_leaving_victims():
    leaving = rjob(5, {"n2": range(4)}, state="preempting", preempted_for=99)
    running = [rjob(1, {"n0": range(8)}, **ckpt(0.5)), leaving]
    world = World(running, pool=running[:1])
    options = single_node_options(world.search(world.request(8, leaving=(leaving,))))
    # 4 free + 4 leaving suffice at no cost: no candidate is worth probing after that.
    assert options == {2: (0.0, 0, (), 8)}


def test_multi_node_options_look_at_free_nodes_and_nodes_of_possible_victims():
    running = [
        rjob(1, {"n0": range(8)}, **ckpt(1)),
        rjob(2, {"n1": range(6)}, tier="core", preemptible=False),
    ]
    world = World(running, pool=running[:1])
    options = multi_node_options(world.search(world.request(16, k=2, c=8)), [running[0]])
    # n1 keeps 6 GPUs of non-preemptible work: not worth a look.
    assert options == {
        0: (8.0 + ENTITLED, 1, (1,), 8),
        2: (0.0, 0, (), 8),
        3: (0.0, 0, (), 8),
    }


# -- choosing nodes --------------------------------------------------------------------


def test_cheapest_group_compares_the_k_cheapest_of_each_group():
    # one victim per node (victim id = 10 + node), costs as the options say
    options = {n: (c, 1, (10 + n,), 8) for n, c in enumerate([5.0, 1.0, 2.0, 2.0, 9.0])}
    cost = {10 + n: o[0] for n, o in options.items()}
    groups = [(0, [0, 1]), (1, [2, 3, 4])]
    assert cheapest_group(groups, 2, options, cost) == [2, 3]
    assert cheapest_group(groups, 3, options, cost) == [2, 3, 4]
    assert cheapest_group(groups, 4, options, cost) is None


def test_cheapest_group_breaks_ties_by_fewer_victims_then_lower_group():
    options = {0: (1.0, 2, (1, 2), 8), 5: (1.0, 1, (3,), 8)}
    cost = {1: 0.5, 2: 0.5, 3: 1.0}
    assert cheapest_group([(0, [0]), (1, [5])], 1, options, cost) == [5]
    options[0] = (1.0, 1, (1,), 8)
    cost[1] = 1.0
    assert cheapest_group([(1, [5]), (0, [0])], 1, options, cost) == [0]


def test_a_victim_on_several_of_the_nodes_costs_once():
    # Rack g0: one 16-GPU gang (victim 1, cost 10) on nodes 0 and 1. Rack g1: nodes 2
    # and 3, a job of cost 6 on each. Counted per node the gang would cost 20 and the
    # two jobs 12 would go; the gang costs 10 and makes room on the same whole nodes.
    options = {0: (10.0, 1, (1,), 8), 1: (10.0, 1, (1,), 8),
               2: (6.0, 1, (2,), 8), 3: (6.0, 1, (3,), 8)}  # fmt: skip
    cost = {1: 10.0, 2: 6.0, 3: 6.0}
    assert cheapest_group([(0, [0, 1]), (1, [2, 3])], 2, options, cost) == [0, 1]


def test_within_a_group_a_gang_s_nodes_are_taken_together_when_cheaper():
    # One rack: a gang (victim 1, cost 10) on nodes 0-2, single jobs of cost 4 on nodes
    # 3-5. Taking 3 nodes: the gang's three cost 10 together, three single nodes 12.
    options = {n: (10.0, 1, (1,), 8) for n in range(3)}
    options.update({n: (4.0, 1, (n,), 8) for n in range(3, 6)})
    cost = {1: 10.0, 3: 4.0, 4: 4.0, 5: 4.0}
    assert cheapest_group([(0, list(range(6)))], 3, options, cost) == [0, 1, 2]
    # Taking 1 node the gang is dear (all of it goes for one node's room): a single job.
    assert cheapest_group([(0, list(range(6)))], 1, options, cost) == [3]


def test_choose_nodes_for_one_node_prefers_cheap_then_few_victims_then_tight_fit():
    topo = Topology(cluster())
    options = {
        0: (2.0, 1, (1,), 8),
        1: (1.0, 2, (2, 3), 8),
        2: (1.0, 1, (4,), 8),
        3: (1.0, 1, (5,), 6),
    }
    cost = {1: 2.0, 2: 0.5, 3: 0.5, 4: 1.0, 5: 1.0}
    assert choose_nodes(options, 1, 6, topo, cost) == [3]
    assert choose_nodes({}, 1, 6, topo, cost) is None


def test_choose_nodes_for_several_takes_one_rack_else_one_block_never_across():
    topo = Topology(cluster())
    cost = {1: 1.0, 2: 1.0}
    one_rack = {0: (1.0, 1, (1,), 8), 1: (1.0, 1, (2,), 8), 2: (0.0, 0, (), 8)}
    assert choose_nodes(one_rack, 2, 8, topo, cost) == [0, 1]
    two_racks = {0: (1.0, 1, (1,), 8), 2: (0.0, 0, (), 8), 3: (0.0, 0, (), 8)}
    assert choose_nodes(two_racks, 2, 8, topo, cost) == [2, 0]  # block b0, cheapest first
    across = {1: (1.0, 1, (1,), 8), 3: (0.0, 0, (), 8)}
    assert choose_nodes(across, 2, 8, topo, cost) is None


def test_a_gang_preemptor_takes_one_gang_victim_s_nodes_rather_than_two_jobs():
    # One rack of four nodes: a 16-GPU gang on n0+n1 that has lost 0.5 h (8 GPU-hours,
    # once), a job on each of n2 and n3 that has lost 0.6 h (4.8 each, 9.6 together).
    # Counted per node the gang looked like 16 and the two jobs went instead.
    nodes = [node(f"n{i}", rack="r0", block="b0") for i in range(4)]
    gang = rjob(1, {"n0": range(8), "n1": range(8)}, **ckpt(0.5))
    jobs = [rjob(2 + i, {f"n{2 + i}": range(8)}, **ckpt(0.6)) for i in range(2)]
    w = World([gang, *jobs], nodes=nodes, borrowed=[1, 2, 3])  # borrowed: costs as they are
    assert ids(w.select(w.request(16, k=2, c=8))) == ([1], ["n0", "n1"])
    # The jobs lose less than the gang once (0.4 h each: 6.4 together): they go.
    jobs = [rjob(2 + i, {f"n{2 + i}": range(8)}, **ckpt(0.4)) for i in range(2)]
    w = World([gang, *jobs], nodes=nodes, borrowed=[1, 2, 3])
    assert ids(w.select(w.request(16, k=2, c=8))) == ([2, 3], ["n2", "n3"])


# -- quota room, pruning, budgets ------------------------------------------------------


def test_quota_freed_counts_entitled_victims_of_the_job_s_own_queue_or_line():
    running = [
        rjob(1, {"n0": range(4)}, tier="experiment"),
        rjob(2, {"n1": range(2)}, tier="experiment", line="search"),
        rjob(3, {"n2": range(8)}, tier="finetune"),
    ]
    by_id = {r.id: r for r in running}
    job = pjob(99, 8, tier="experiment")
    assert quota_freed({1, 2, 3}, by_id, job, "queue", frozenset()) == 4
    assert quota_freed({1, 2, 3}, by_id, job, "line", frozenset()) == 12
    assert quota_freed({1, 2, 3}, by_id, job, "line", frozenset({3})) == 4


def test_add_quota_victims_takes_the_cheapest_of_the_own_line():
    running = [
        rjob(1, {"n0": range(8)}, **ckpt(2)),
        rjob(2, {"n1": range(4)}, **ckpt(1)),
        rjob(3, {"n2": range(4)}, line="search", **ckpt(0.1)),
    ]
    world = World(running)
    s = world.search(world.request(8, short_l=4))
    victims: set[int] = set()
    assert add_quota_victims(s, running, victims) is True
    assert victims == {2}  # llm's cheapest; search's work frees no llm quota


def test_add_quota_victims_fails_when_the_line_cannot_free_enough():
    world = World([rjob(1, {"n0": range(4)})])
    victims: set[int] = set()
    assert add_quota_victims(world.search(world.request(8, short_l=6)), [], victims) is False


def test_node_fits_counts_free_leaving_and_freed_gpus():
    leaving = rjob(5, {"n0": range(2)}, state="preempting", preempted_for=99)
    world = World([leaving, rjob(1, {"n0": range(2, 8)})], pool=[])
    s = world.search(world.request(6, leaving=(leaving,)))
    assert node_fits(s, 0, 4, set()) is True  # 0 free + 2 leaving + 4 freed
    assert node_fits(s, 0, 3, set()) is False


def test_node_fits_an_exclusive_preemptor_only_when_every_holder_goes():
    world = World([rjob(1, {"n0": range(4)}), rjob(2, {"n0": range(4, 8)})])
    s = world.search(world.request(4, exclusive=True))
    assert node_fits(s, 0, 0, {1, 2}) is True
    assert node_fits(s, 0, 8, {1}) is False


def test_prune_drops_the_dearest_victims_that_are_not_needed():
    running = [
        rjob(1, {"n0": range(4)}, **ckpt(3)),
        rjob(2, {"n0": range(4, 6)}, **ckpt(1)),
        rjob(3, {"n0": range(6, 8)}, **ckpt(1)),
    ]
    world = World(running)
    victims = {1, 2, 3}
    prune(world.search(world.request(4)), victims, [0])
    assert victims == {2, 3}  # job 1 (12 GPU-h) goes back; 2 + 3 free the 4 GPUs


def test_prune_keeps_victims_the_quota_room_needs():
    running = [rjob(1, {"n0": range(4)}, **ckpt(3)), rjob(2, {"n1": range(4)}, **ckpt(1))]
    world = World(running)
    victims = {1, 2}
    prune(world.search(world.request(4, short_l=8)), victims, [1])
    assert victims == {1, 2}


@pytest.mark.parametrize(
    "budget_q, budget_l, ok",
    [(12, 12, True), (11, 12, False), (12, 11, False)],
)
def test_within_budgets_sums_victims_per_queue_and_line(budget_q, budget_l, ok):
    running = [rjob(1, {"n0": range(8)}), rjob(2, {"n1": range(4)})]
    quota = QuotaView(frozenset(), {"llm-experiment": budget_q}, {"llm": budget_l}, frozenset())
    assert within_budgets({1, 2}, {r.id: r for r in running}, quota) is ok
    assert within_budgets(set(), {}, quota) is True


# -- select_victims end to end ---------------------------------------------------------


def test_select_the_cheapest_node_for_a_one_node_preemptor():
    running = [
        rjob(1, {"n0": range(8)}, **ckpt(2)),
        rjob(2, {"n1": range(4)}, **ckpt(1)),
        rjob(3, {"n1": range(4, 8)}, **ckpt(0.25)),
        rjob(4, {"n2": range(8)}, **ckpt(3)),
        rjob(5, {"n3": range(8)}, **ckpt(4)),
    ]
    world = World(running)
    # Every entitled victim weighs ENTITLED: one victim (16 GPU-h) beats two (5 GPU-h).
    assert ids(world.select(world.request(8))) == ([1], ["n0"])
    assert ids(world.select(world.request(4))) == ([3], ["n1"])


def test_select_reclaims_borrowed_work_first():
    running = [rjob(1, {"n0": range(8)}, **ckpt(0.1)), rjob(2, {"n1": range(8)}, **ckpt(9))]
    world = World(running + [rjob(3, {"n2": range(8)}), rjob(4, {"n3": range(8)})], borrowed=[2])
    assert ids(world.select(world.request(8))) == ([2], ["n1"])


def test_select_whole_nodes_of_one_rack_for_a_gang():
    running = [rjob(i + 1, {f"n{i}": range(8)}, **ckpt(1 + i)) for i in range(4)]
    world = World(running)
    assert ids(world.select(world.request(16, k=2, c=8))) == ([1, 2], ["n0", "n1"])


def test_select_none_when_nothing_may_go():
    world = World([rjob(1, {"n0": range(8)}, tier="core", preemptible=True)])
    assert world.select(world.request(8, allowed=frozenset({Tier.EXPERIMENT}))) is None
    world = World([rjob(1, {"n0": range(8)})], budget=4)
    assert world.select(world.request(8)) is None  # the guarantee protects it


def test_select_makes_room_inside_the_own_line_as_well():
    running = [
        rjob(1, {"n0": range(8)}, line="search", **ckpt(0.1)),
        rjob(2, {"n1": range(8)}, **ckpt(5)),
    ]
    world = World(
        running
        + [rjob(3, {"n2": range(8)}, line="search"), rjob(4, {"n3": range(8)}, line="search")]
    )
    got = world.select(world.request(8, short_l=8, within_quota=False))
    assert ids(got) == ([1, 2], ["n0"])


def test_select_with_victims_already_leaving_holds_their_node():
    leaving = rjob(5, {"n0": range(8)}, state="preempting", preempted_for=99)
    running = [
        leaving,
        rjob(1, {"n1": range(8)}),
        rjob(2, {"n2": range(8)}),
        rjob(3, {"n3": range(8)}),
    ]
    world = World(running, pool=running[1:])
    got = world.select(world.request(8, leaving=(leaving,)))
    assert got == Selection((), (0,))


# -- the planner's side of the interface ------------------------------------------------


def test_planner_views_follow_the_plan_as_it_is_made():
    s = snap([node("a"), node("b")], [pjob(1, 8)], [rjob(5, {"b": range(4)})])
    planner = Planner(s, NOW)
    cap = planner.capacity_view()
    assert list(cap.nfree) == [8, 4] and [len(h) for h in cap.holders] == [0, 1]
    assert planner.quota_view() == QuotaView(frozenset(), {"llm-experiment": 4}, {"llm": 4}, set())
    planner.run()
    cap = planner.capacity_view()
    assert list(cap.nfree) == [0, 4] and list(cap.started_on) == [1, 0]
