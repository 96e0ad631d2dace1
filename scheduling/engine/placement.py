"""Where a job can run: free-capacity index and the placement rules (P1-P5).

Rules, applied identically by the indexed (fast) and the generic (array) paths:

- A job's *class* is what filters nodes: GPU memory, RDMA, inference
  co-location, pool and GPU model. Only ``ready`` nodes not held exclusively
  take work.
- A job's *shape* is ``k`` nodes with ``c`` GPUs each (see
  ``policy.shape_counts``); an ``exclusive_node`` job needs each node wholly free.
- One node (k == 1), fragmentation-aware best fit: the qualifying node with the
  fewest free GPUs (so partly used nodes fill before a whole node is broken);
  among those, the one whose rack keeps the most whole-rack capacity: a rack
  that is not wholly free before one that is, then the rack with the fewest
  wholly free nodes, then the fewest free GPUs (the most used rack), then the
  lowest rack; inside that rack a node that recently ran the same model, then
  the lowest index. Small jobs thus pack onto used nodes and used racks first,
  leaving whole nodes and whole racks for gangs.
- Several nodes: one rack if any rack has ``k`` qualifying nodes (preferring a
  rack that recently ran the model, then the rack with the fewest qualifying
  nodes, so emptier racks stay whole); otherwise the fewest racks inside one
  block (then the lowest block); never across blocks. Inside the chosen racks,
  nodes are taken best fit first.

The live ``Cluster`` keeps per-free-count buckets of usable nodes and, per class,
per-rack histograms, so the common questions ("is there any node with >= c free
GPUs of this class?", "which racks have k such nodes?") cost O(racks), not
O(nodes).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from itertools import compress

from .types import READY, NodeView, RunningJob

ClassKey = tuple[int, bool, bool, str | None, str | None]


def class_key(
    gpu_memory_gb: int | None,
    rdma: bool,
    inference_allowed: bool,
    pool: str | None,
    gpu_model: str | None,
) -> ClassKey:
    return (int(gpu_memory_gb or 0), bool(rdma), bool(inference_allowed), pool, gpu_model)


def without_inference(key: ClassKey) -> ClassKey:
    """The same class of nodes, less the ones shared with online inference."""
    return (key[0], key[1], False, key[3], key[4])


def node_matches(node: NodeView, key: ClassKey) -> bool:
    """Static fit of a node for a class, whatever the node's state."""
    mem, rdma, infer_ok, pool, model = key
    if node.gpu_memory_gb < mem:
        return False
    if rdma and not node.rdma:
        return False
    if node.inference and not infer_ok:
        return False
    if pool is not None and node.pool != pool:
        return False
    return not (model is not None and node.gpu_model != model)


class NodeClass:
    """Eligibility of every node for one class, plus live per-rack histograms."""

    __slots__ = (
        "key",
        "elig",
        "rack_nodes",
        "hist",
        "whole",
        "tot_hist",
        "tot_whole",
        "rack_whole",
        "rack_free",
    )

    def __init__(self, key: ClassKey) -> None:
        self.key = key
        self.elig = bytearray()
        self.rack_nodes: dict[int, list[int]] = {}
        self.hist: dict[int, list[int]] = {}
        self.whole: dict[int, list[int]] = {}
        self.tot_hist: list[int] = []
        self.tot_whole: list[int] = []
        # per rack: usable nodes of the class wholly free, and their free GPUs
        self.rack_whole: dict[int, int] = {}
        self.rack_free: dict[int, int] = {}


class Topology:
    """Static facts about the nodes, shared by every cluster view of one plan."""

    def __init__(self, nodes: Sequence[NodeView]) -> None:
        self.nodes = tuple(nodes)
        n = len(self.nodes)
        self.n = n
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        self.total = [max(0, int(node.gpus_total)) for node in self.nodes]
        self.max_gpus = max(self.total, default=0) or 8
        rack_names = sorted({(node.block, node.rack) for node in self.nodes})
        rack_id = {rb: i for i, rb in enumerate(rack_names)}
        block_names = sorted({node.block for node in self.nodes})
        block_id = {b: i for i, b in enumerate(block_names)}
        self.rack_label = [f"{rb[1]}" for rb in rack_names]
        self.block_label = block_names
        self.rack_of = [rack_id[(node.block, node.rack)] for node in self.nodes]
        self.rack_block = [block_id[rb[0]] for rb in rack_names]
        self.block_of = [self.rack_block[r] for r in self.rack_of]
        self.block_racks: list[list[int]] = [[] for _ in block_names]
        for r, b in enumerate(self.rack_block):
            self.block_racks[b].append(r)
        self.ready = bytearray(1 if node.state == READY else 0 for node in self.nodes)
        self.node_models = [frozenset(node.recent_models) for node in self.nodes]
        self.model_nodes: dict[str, list[int]] = {}
        self.model_racks: dict[str, dict[int, int]] = {}
        for i in range(n):
            for m in self.node_models[i]:
                self.model_nodes.setdefault(m, []).append(i)
                racks = self.model_racks.setdefault(m, {})
                racks[self.rack_of[i]] = racks.get(self.rack_of[i], 0) + 1
        self._static: dict[ClassKey, bytearray] = {}
        self._class_nodes: dict[ClassKey, tuple[bytearray, dict[int, list[int]]]] = {}
        self._attrs = [
            (nd.gpu_memory_gb, nd.rdma, nd.inference, nd.pool, nd.gpu_model) for nd in self.nodes
        ]

    def static_elig(self, key: ClassKey) -> bytearray:
        """Nodes matching a class regardless of state (for NEVER_FITS checks)."""
        elig = self._static.get(key)
        if elig is None:
            mem, rdma, infer_ok, pool, model = key
            elig = bytearray(
                1
                if (
                    m >= mem
                    and (rd or not rdma)
                    and (infer_ok or not inf)
                    and (pool is None or pl == pool)
                    and (model is None or gm == model)
                )
                else 0
                for m, rd, inf, pl, gm in self._attrs
            )
            self._static[key] = elig
        return elig

    def class_nodes(self, key: ClassKey) -> tuple[bytearray, dict[int, list[int]]]:
        """Ready, not exclusively held nodes of a class, and their racks (shared, read-only)."""
        got = self._class_nodes.get(key)
        if got is None:
            static = self.static_elig(key)
            elig = bytearray(a & b for a, b in zip(static, self.ready, strict=True))
            rack_nodes: dict[int, list[int]] = {}
            rack_of = self.rack_of
            nodes = self.nodes
            for n in compress(range(self.n), elig):
                if nodes[n].exclusive:
                    elig[n] = 0
                    continue
                rack_nodes.setdefault(rack_of[n], []).append(n)
            got = (elig, rack_nodes)
            self._class_nodes[key] = got
        return got

    def slots_of(self, job: RunningJob) -> list[tuple[int, int]]:
        """``(node index, GPUs)`` of each of a job's slots on a known node."""
        index = self.index
        return [(index[s.node], len(s.gpus)) for s in job.placement if s.node in index]

    def gpus_by_node(
        self, jobs: Iterable[RunningJob], only: AbstractSet[int] | None = None
    ) -> dict[int, int]:
        """GPUs the jobs hold per node index (nodes not in the cluster skipped;
        with ``only``, just those nodes)."""
        index = self.index
        out: dict[int, int] = {}
        for job in jobs:
            for slot in job.placement:
                n = index.get(slot.node)
                if n is not None:
                    out[n] = out.get(n, 0) + len(slot.gpus)
        if only is not None:
            return {n: g for n, g in out.items() if n in only}
        return out

    def rack_affinity(self, model: str | None) -> dict[int, int]:
        if not model:
            return {}
        return self.model_racks.get(model, {})


def choose_racks(
    topo: Topology, k: int, counts: dict[int, int], affinity: dict[int, int]
) -> list[int] | None:
    """Racks to use for k nodes given qualifying-node counts per rack."""
    best: tuple[int, int, int] | None = None
    for r, cnt in counts.items():
        if cnt >= k:
            key = (0 if affinity.get(r) else 1, cnt, r)
            if best is None or key < best:
                best = key
    if best is not None:
        return [best[2]]
    best_block: tuple[int, int, list[int]] | None = None
    for b, racks in enumerate(topo.block_racks):
        ranked = sorted((r for r in racks if counts.get(r)), key=lambda r: (-counts[r], r))
        cum = 0
        for i, r in enumerate(ranked):
            cum += counts[r]
            if cum >= k:
                cand = (i + 1, b, ranked[: i + 1])
                if best_block is None or cand[:2] < best_block[:2]:
                    best_block = cand
                break
    return None if best_block is None else best_block[2]


def pick_nodes(
    k: int,
    racks: list[int],
    qual_by_rack: dict[int, list[int]],
    counts: Sequence[int],
    node_models: list[frozenset[str]],
    model: str | None,
) -> list[int]:
    """Take k nodes from the chosen racks, best fit first (fuller racks first)."""
    chosen: list[int] = []
    for r in racks:
        need = k - len(chosen)
        if need <= 0:
            break
        nodes = qual_by_rack[r]
        if len(nodes) > need:
            nodes = sorted(
                nodes,
                key=lambda n: (counts[n], 0 if model and model in node_models[n] else 1, n),
            )[:need]
        chosen.extend(nodes)
    return chosen


def rack_capacity(
    topo: Topology, elig: Sequence[int], counts: Sequence[int]
) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Per rack: eligible nodes wholly free, eligible free GPUs, and eligible nodes
    (a rack is *whole* when every eligible node of it is wholly free)."""
    whole: dict[int, int] = {}
    free: dict[int, int] = {}
    size: dict[int, int] = {}
    total = topo.total
    rack_of = topo.rack_of
    for n in range(topo.n):
        if elig[n]:
            r = rack_of[n]
            size[r] = size.get(r, 0) + 1
            f = counts[n]
            if f:
                free[r] = free.get(r, 0) + f
                if f == total[n]:
                    whole[r] = whole.get(r, 0) + 1
    return whole, free, size


def aligned(
    nodes: Sequence[int],
    ends: Sequence[float],
    end: float,
    models: Sequence[frozenset[str]],
    model: str | None,
) -> int:
    """Runtime-aware packing (#19): among equally good nodes, the one whose busy time a job
    ending at ``end`` extends least: a node whose work ends after the job (the earliest
    such), else the one whose work ends latest; so work that ends together shares nodes
    and nodes fall wholly free together. Then model affinity, then the lowest index."""
    return min(
        nodes,
        key=lambda n: (
            max(0.0, end - ends[n]),
            ends[n],
            0 if model and model in models[n] else 1,
            n,
        ),
    )


def place_on_counts(
    topo: Topology,
    elig: Sequence[int],
    counts: Sequence[int],
    k: int,
    c: int,
    exclusive: bool,
    model: str | None,
) -> list[int] | None:
    """Generic placement over an array of free-GPU counts (0 = unusable node).

    O(nodes); used for static checks, reservations and preemption, where the
    counts are hypothetical.
    """
    total = topo.total
    qualifying = [
        n
        for n in range(topo.n)
        if elig[n] and counts[n] >= c and (not exclusive or counts[n] == total[n])
    ]
    if k == 1:
        if not qualifying:
            return None
        rack_whole, rack_free, rack_size = rack_capacity(topo, elig, counts)
        rack_of = topo.rack_of
        models = topo.node_models
        best: tuple[int, bool, int, int, int, int, int] | None = None
        for n in qualifying:
            r = rack_of[n]
            w = rack_whole.get(r, 0)
            key = (
                counts[n],
                w == rack_size[r],
                w,
                rack_free.get(r, 0),
                r,
                0 if model and model in models[n] else 1,
                n,
            )
            if best is None or key < best:
                best = key
        return None if best is None else [best[6]]
    if len(qualifying) < k:
        return None
    qual_by_rack: dict[int, list[int]] = {}
    rack_of = topo.rack_of
    for n in qualifying:
        qual_by_rack.setdefault(rack_of[n], []).append(n)
    rack_counts = {r: len(v) for r, v in qual_by_rack.items()}
    racks = choose_racks(topo, k, rack_counts, topo.rack_affinity(model))
    if racks is None:
        return None
    return pick_nodes(k, racks, qual_by_rack, counts, topo.node_models, model)


class Cluster:
    """Mutable free-capacity index for one plan (or an immutable initial view)."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        nodes = topo.nodes
        self.free: list[list[int]] = []
        for i, node in enumerate(nodes):
            tot = topo.total[i]
            self.free.append(sorted({g for g in node.free_gpus if 0 <= g < tot}))
        self.nfree = [len(f) for f in self.free]
        self.usable = bytearray(
            1 if topo.ready[i] and not nodes[i].exclusive else 0 for i in range(topo.n)
        )
        self.buckets: list[list[int]] = [[] for _ in range(topo.max_gpus + 1)]
        for i in range(topo.n):
            if self.usable[i]:
                self.buckets[self.nfree[i]].append(i)
        self.classes: dict[ClassKey, NodeClass] = {}
        self.node_classes: list[list[NodeClass]] = [[] for _ in range(topo.n)]
        # per node, when its running work is predicted to end (``align_ends``); None: unused
        self.ends: list[float] | None = None

    def copy(self) -> Cluster:
        """A read-only view of the current capacity (``take`` is not available on it;
        classes are rebuilt lazily)."""
        other = Cluster.__new__(Cluster)
        other.topo = self.topo
        other.free = []
        other.nfree = self.nfree[:]
        other.usable = bytearray(self.usable)
        other.buckets = [b[:] for b in self.buckets]
        other.classes = {}
        other.node_classes = [[] for _ in range(self.topo.n)]
        other.ends = None if self.ends is None else self.ends[:]
        return other

    # -- classes -----------------------------------------------------------------
    def node_class(self, key: ClassKey) -> NodeClass:
        cls = self.classes.get(key)
        if cls is not None:
            return cls
        topo = self.topo
        cls = NodeClass(key)
        cls.elig, cls.rack_nodes = topo.class_nodes(key)
        m = topo.max_gpus
        tot_hist = [0] * (m + 1)
        tot_whole = [0] * (m + 1)
        total = topo.total
        usable = self.usable
        nfree = self.nfree
        node_classes = self.node_classes
        for r, nodes in cls.rack_nodes.items():
            h = [0] * (m + 1)
            w = [0] * (m + 1)
            rfree = 0
            for n in nodes:
                node_classes[n].append(cls)
                if usable[n]:
                    f = nfree[n]
                    h[f] += 1
                    rfree += f
                    if f == total[n]:
                        w[f] += 1
            cls.hist[r] = h
            cls.whole[r] = w
            cls.rack_whole[r] = sum(w[1:])
            cls.rack_free[r] = rfree
            for f in range(m + 1):
                tot_hist[f] += h[f]
                tot_whole[f] += w[f]
        cls.tot_hist = tot_hist
        cls.tot_whole = tot_whole
        self.classes[key] = cls
        return cls

    # -- mutation ----------------------------------------------------------------
    def _unindex(self, n: int) -> None:
        f = self.nfree[n]
        bucket = self.buckets[f]
        del bucket[bisect_left(bucket, n)]
        whole = f == self.topo.total[n]
        r = self.topo.rack_of[n]
        for cls in self.node_classes[n]:
            cls.hist[r][f] -= 1
            cls.tot_hist[f] -= 1
            cls.rack_free[r] -= f
            if whole:
                cls.whole[r][f] -= 1
                cls.tot_whole[f] -= 1
                if f:
                    cls.rack_whole[r] -= 1

    def _index(self, n: int) -> None:
        f = self.nfree[n]
        insort(self.buckets[f], n)
        whole = f == self.topo.total[n]
        r = self.topo.rack_of[n]
        for cls in self.node_classes[n]:
            cls.hist[r][f] += 1
            cls.tot_hist[f] += 1
            cls.rack_free[r] += f
            if whole:
                cls.whole[r][f] += 1
                cls.tot_whole[f] += 1
                if f:
                    cls.rack_whole[r] += 1

    def take(self, n: int, count: int, exclusive: bool) -> tuple[int, ...]:
        """Allocate ``count`` GPUs on node ``n`` (lowest indices first)."""
        gpus = tuple(self.free[n][:count])
        if len(gpus) != count:
            raise ValueError(f"node {self.topo.nodes[n].name} has fewer than {count} free GPUs")
        indexed = self.usable[n]
        if indexed:
            self._unindex(n)
        del self.free[n][:count]
        self.nfree[n] -= count
        if exclusive:
            self.usable[n] = 0
        elif indexed:
            self._index(n)
        return gpus

    def block(self, n: int) -> None:
        """Make a node unusable for the rest of the plan (held or reserved)."""
        if self.usable[n]:
            self._unindex(n)
            self.usable[n] = 0

    # -- queries -----------------------------------------------------------------
    def free_gpus_of(self, cls: NodeClass) -> int:
        return sum(f * cnt for f, cnt in enumerate(cls.tot_hist))

    def find(
        self,
        cls: NodeClass,
        k: int,
        c: int,
        exclusive: bool,
        model: str | None,
        end: float | None = None,
    ) -> list[int] | None:
        if k == 1:
            n = self._find_single(cls, c, exclusive, model, end)
            return None if n is None else [n]
        return self._find_multi(cls, k, c, exclusive, model)

    def _find_single(
        self, cls: NodeClass, c: int, exclusive: bool, model: str | None, end: float | None
    ) -> int | None:
        """Best fit (fewest free GPUs), then the rack keeping most whole-rack
        capacity (``rack_score``), then, given the job's predicted ``end`` and the nodes'
        ``ends``, the node whose busy time it extends least (``aligned``), then model
        affinity, then the lowest index."""
        topo = self.topo
        m = topo.max_gpus
        if c > m:
            return None
        per_rack = cls.whole if exclusive else cls.hist
        tot = cls.tot_whole if exclusive else cls.tot_hist
        rack_whole = cls.rack_whole
        rack_free = cls.rack_free
        rack_nodes = cls.rack_nodes
        for f in range(c, m + 1):
            if not tot[f]:
                continue
            best: tuple[bool, int, int, int] | None = None
            for r, h in per_rack.items():
                if h[f]:
                    w = rack_whole[r]
                    key = (w == len(rack_nodes[r]), w, rack_free[r], r)
                    if best is None or key < best:
                        best = key
            if best is None:
                continue
            r = best[3]
            rack_of = topo.rack_of
            elig = cls.elig
            total = topo.total
            if end is not None and self.ends is not None:
                usable, nfree = self.usable, self.nfree
                fits = [
                    n
                    for n in rack_nodes[r]
                    if usable[n] and nfree[n] == f and (not exclusive or total[n] == f)
                ]
                if fits:
                    return aligned(fits, self.ends, end, topo.node_models, model)
                continue
            first = -1
            models = topo.node_models
            for n in self.buckets[f]:
                if rack_of[n] != r or not elig[n] or (exclusive and total[n] != f):
                    continue
                if not model or model in models[n]:
                    return n
                if first < 0:
                    first = n
            if first >= 0:
                return first
        return None

    def _find_multi(
        self, cls: NodeClass, k: int, c: int, exclusive: bool, model: str | None
    ) -> list[int] | None:
        topo = self.topo
        if c > topo.max_gpus:
            return None
        per_rack = cls.whole if exclusive else cls.hist
        if sum((cls.tot_whole if exclusive else cls.tot_hist)[c:]) < k:
            return None
        counts = {}
        for r, h in per_rack.items():
            cnt = sum(h[c:])
            if cnt:
                counts[r] = cnt
        racks = choose_racks(topo, k, counts, topo.rack_affinity(model))
        if racks is None:
            return None
        usable = self.usable
        nfree = self.nfree
        total = topo.total
        qual_by_rack: dict[int, list[int]] = {}
        for r in racks:
            qual_by_rack[r] = [
                n
                for n in cls.rack_nodes[r]
                if usable[n] and nfree[n] >= c and (not exclusive or nfree[n] == total[n])
            ]
        return pick_nodes(k, racks, qual_by_rack, nfree, topo.node_models, model)

    def usable_counts(self) -> list[int]:
        """Free GPUs per node, 0 where the node is not usable now."""
        usable = self.usable
        return [f if usable[i] else 0 for i, f in enumerate(self.nfree)]
