"""Which training jobs yield a node to online inference (S4, R2: fewest victims).

When online inference wants GPUs back on a shared node, only as many GPUs as it lacks
are freed: the cheapest set of the node's preemptible jobs that frees at least the
shortfall, where a job costs what it costs as a victim (``policy.victim_cost_gpu_h``:
the work it would lose plus the weighted GPU time its run was given, the caller's
``cost_gpu_h``) plus ``PolicyConfig.eviction_cost_gpu_h`` per eviction. GPUs of jobs already leaving the node count first.

A node holds at most eight GPUs, so the few jobs on it are searched exhaustively: the
answer is the cheapest cover, then the fewest jobs, then the lowest ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

# More jobs than this on one node are not searched exhaustively (greedy instead).
EXHAUSTIVE_MAX = 12


@dataclass(frozen=True, slots=True)
class NodeTenant:
    """A training job holding GPUs on the pressured node.

    ``gpus_here``: its GPUs on this node; ``cost_gpu_h``: what stopping it costs (the
    whole job's GPUs since its last checkpoint, plus the weight of its run's given GPU
    time, as a victim's); ``leaving``: already asked to
    stop (its GPUs free without a new victim); ``preemptible``: may be asked at all.
    """

    job_id: int
    gpus_here: int
    cost_gpu_h: float
    leaving: bool = False
    preemptible: bool = True


def yielders(tenants: Sequence[NodeTenant], shortfall: int, per_eviction: float) -> list[int]:
    """The job ids to stop so inference gets ``shortfall`` more GPUs on the node.

    A ``shortfall`` of 0 or less asks for nothing. When the preemptible jobs cannot
    cover it, all of them yield (inference outranks training on its own nodes).
    """
    need = shortfall - sum(t.gpus_here for t in tenants if t.leaving)
    if need <= 0:
        return []
    pool = sorted(
        (t for t in tenants if t.preemptible and not t.leaving),
        key=lambda t: (t.cost_gpu_h + per_eviction, -t.gpus_here, t.job_id),
    )
    if sum(t.gpus_here for t in pool) <= need:
        return sorted(t.job_id for t in pool)
    if len(pool) > EXHAUSTIVE_MAX:
        chosen, freed = [], 0
        for t in pool:
            if freed >= need:
                break
            chosen.append(t.job_id)
            freed += t.gpus_here
        return sorted(chosen)
    best: tuple[float, int, list[int]] | None = None
    for size in range(1, len(pool) + 1):
        for combo in combinations(pool, size):
            if sum(t.gpus_here for t in combo) < need:
                continue
            cost = sum(t.cost_gpu_h + per_eviction for t in combo)
            ids = sorted(t.job_id for t in combo)
            key = (round(cost, 9), size, ids)
            if best is None or key < best:
                best = key
    assert best is not None  # the whole pool covers ``need``
    return best[2]
