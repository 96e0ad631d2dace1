"""Could a job ever run here, even on an empty cluster with every node healthy? (NEVER_FITS)

One rule, used by the submit service (a request that can never run is refused with a 400
naming the constraint) and by the planner (a job already waiting when the cluster changed
under it reads ``NEVER_FITS``, and never gets an estimated start):

- A node *matches* a job when it has the GPU memory per GPU, RDMA when asked, the GPU model
  and pool when asked, and is not an online-inference node unless the job may share one
  (preemptible and not ``avoid_inference``); it *qualifies* when it also has at least ``c``
  GPUs. Exclusivity costs nothing on an empty node.
- The job's shape is ``k`` nodes of ``c`` GPUs (``policy.shape_counts``), and a gang never
  spans network blocks (``placement``: one rack if one has ``k``, else the fewest racks of
  one block). So the job can run iff some block holds ``k`` qualifying nodes.

The cluster's shape is what this needs of the nodes, and nothing else: per rack, how many
nodes of each kind (GPUs per node, GPU memory, model, RDMA, inference, pool). It is a frozen
value, so a caller can read it once (one grouped query) and check many requests against it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from .policy import shape_counts

# Nodes of 8 GPUs when the cluster has none to say (as ``placement.Topology`` assumes).
DEFAULT_NODE_GPUS = 8


@dataclass(frozen=True, slots=True)
class NodeKind:
    """``count`` identical nodes in one rack."""

    block: str
    rack: str
    gpus: int
    gpu_memory_gb: int
    gpu_model: str
    rdma: bool
    inference: bool
    pool: str | None
    count: int


def _kind_order(kind: NodeKind) -> tuple[Any, ...]:
    return (kind.block, kind.rack, kind.gpus, kind.gpu_memory_gb, kind.gpu_model, kind.rdma,
            kind.inference, kind.pool or "")  # fmt: skip


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """Every node of the cluster, whatever its state, grouped by rack and kind."""

    kinds: tuple[NodeKind, ...]
    largest_node: int = field(init=False, compare=False)
    total_gpus: int = field(init=False, compare=False)
    _hash: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        kinds = tuple(sorted(self.kinds, key=_kind_order))
        object.__setattr__(self, "kinds", kinds)
        object.__setattr__(self, "largest_node", max((k.gpus for k in kinds), default=0))
        object.__setattr__(self, "total_gpus", sum(k.gpus * k.count for k in kinds))
        object.__setattr__(self, "_hash", hash(kinds))

    def __hash__(self) -> int:  # computed once: a shape is a cache key for many checks
        return self._hash

    @classmethod
    def of_nodes(cls, nodes: Iterable[Any]) -> ClusterShape:
        """From engine ``NodeView``s (or anything with their hardware fields)."""
        counts = Counter(
            (
                n.block,
                n.rack,
                int(n.gpus_total),
                int(n.gpu_memory_gb),
                n.gpu_model,
                bool(getattr(n, "rdma", True)),
                bool(getattr(n, "inference", False)),
                getattr(n, "pool", None),
            )  # fmt: skip
            for n in nodes
        )
        return cls(tuple(NodeKind(*key, count) for key, count in counts.items()))

    @property
    def nodes(self) -> int:
        return sum(k.count for k in self.kinds)


@dataclass(frozen=True, slots=True)
class Ask:
    """What a job asks of the nodes. ``inference_ok``: it may share an inference node."""

    gpus: int
    gpus_per_node: int | None = None
    gpu_memory_gb: int | None = None
    rdma: bool = False
    inference_ok: bool = False
    gpu_model: str | None = None
    pool: str | None = None

    def qualifier(self) -> str:
        """``" (80 GB, H100, RDMA)"``: the kind of node it needs, in words."""
        parts = []
        if self.gpu_memory_gb:
            parts.append(f"{self.gpu_memory_gb} GB")
        if self.gpu_model:
            parts.append(self.gpu_model)
        if self.rdma:
            parts.append("RDMA")
        if self.pool:
            parts.append(f"pool {self.pool}")
        return f" ({', '.join(parts)})" if parts else ""


@dataclass(frozen=True, slots=True)
class Fit:
    """How the job's shape meets the cluster's: ``k`` nodes of ``c`` GPUs; how many nodes
    match its kind, how many of those also have ``c`` GPUs (qualify), and the most
    qualifying nodes in one rack and in one block."""

    nodes_needed: int
    gpus_per_node: int
    matching: int
    qualifying: int
    max_rack: int
    max_block: int
    max_block_name: str

    @property
    def fits(self) -> bool:
        return self.max_block >= self.nodes_needed


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a job can never run here. ``field``: the request field to change (the key of a
    400); ``constraint``: a stable name for the rule it breaks; ``why``: a clause for people
    ("it needs 128 ... but ..."); ``details``: the numbers, for the API."""

    constraint: str
    field: str
    why: str
    details: tuple[tuple[str, int | str], ...]

    def details_dict(self) -> dict[str, int | str]:
        return dict(self.details)

    @property
    def message(self) -> str:
        """The whole sentence for a 400."""
        return f"This job could never run on this cluster, even empty: {self.why}."


def _matches(kind: NodeKind, ask: Ask) -> bool:
    return (
        kind.gpu_memory_gb >= (ask.gpu_memory_gb or 0)
        and (kind.rdma or not ask.rdma)
        and (ask.inference_ok or not kind.inference)
        and (ask.pool is None or kind.pool == ask.pool)
        and (ask.gpu_model is None or kind.gpu_model == ask.gpu_model)
    )


def node_gpus(shape: ClusterShape) -> int:
    """GPUs of the largest node (the size a multi-node job fills per node by default)."""
    return shape.largest_node or DEFAULT_NODE_GPUS


@lru_cache(maxsize=4096)
def fit(shape: ClusterShape, ask: Ask) -> Fit:
    """The numbers of the rule for one job on one cluster (cached: both are frozen)."""
    k, c, _last = shape_counts(ask.gpus, ask.gpus_per_node, node_gpus(shape))
    matching = qualifying = 0
    per_rack: Counter[tuple[str, str]] = Counter()
    per_block: Counter[str] = Counter()
    for kind in shape.kinds:
        if not _matches(kind, ask):
            continue
        matching += kind.count
        if kind.gpus >= c:
            qualifying += kind.count
            per_rack[(kind.block, kind.rack)] += kind.count
            per_block[kind.block] += kind.count
    best_block = min(per_block, key=lambda b: (-per_block[b], b), default="")
    return Fit(
        nodes_needed=k, gpus_per_node=c, matching=matching, qualifying=qualifying,
        max_rack=max(per_rack.values(), default=0), max_block=per_block.get(best_block, 0),
        max_block_name=best_block,
    )  # fmt: skip


def check(shape: ClusterShape, ask: Ask) -> Refusal | None:
    """None when the job could run on the empty, healthy cluster; else why not."""
    if ask.gpus < 1:
        return Refusal("gpus", "gpus", "it asks for no GPUs", (("requested_gpus", ask.gpus),))
    f = fit(shape, ask)
    if f.fits:
        return None
    return _refusal(shape, ask, f)


@lru_cache(maxsize=1024)
def _refusal(shape: ClusterShape, ask: Ask, f: Fit) -> Refusal:
    k, c = f.nodes_needed, f.gpus_per_node
    largest = shape.largest_node
    max_mem = max((kind.gpu_memory_gb for kind in shape.kinds), default=0)
    details: dict[str, int | str] = {
        "nodes_needed": k,
        "gpus_per_node": c,
        "largest_node_gpus": largest,
        "max_gpu_memory_gb": max_mem,
        "matching_nodes": f.matching,
        "qualifying_nodes": f.qualifying,
        "max_rack_nodes": f.max_rack,
        "max_block_nodes": f.max_block,
    }
    kinds = shape.kinds
    what = ask.qualifier()
    if not kinds:
        constraint, fld, why = "no_nodes", "gpus", "the cluster has no nodes"
    elif c > largest:
        constraint, fld = "gpus_per_node", "gpus_per_node" if ask.gpus_per_node else "gpus"
        why = f"it asks for {c:,} GPUs on one node but the largest node has {largest:,}"
    elif ask.gpu_memory_gb and max_mem < ask.gpu_memory_gb:
        constraint, fld = "gpu_memory", "gpu_memory_gb"
        why = f"it asks for {ask.gpu_memory_gb} GB per GPU but the largest GPUs have {max_mem} GB"
    elif ask.rdma and not any(kind.rdma for kind in kinds):
        constraint, fld, why = "rdma", "rdma", "it needs RDMA but no node has RDMA"
    elif ask.gpu_model is not None and not any(kd.gpu_model == ask.gpu_model for kd in kinds):
        constraint, fld, why = "gpu_model", "gpu_model", f"no node has {ask.gpu_model} GPUs"
    elif ask.pool is not None and not any(kind.pool == ask.pool for kind in kinds):
        constraint, fld, why = "pool", "pool", f"no node belongs to pool {ask.pool}"
    elif not f.matching:
        constraint, fld = "combination", _blamed_field(ask)
        needs = _and(_requirements(ask))
        if not ask.inference_ok and fit(shape, replace(ask, inference_ok=True)).matching:
            constraint = "inference"
            why = (
                f"the only nodes with {needs or 'its GPUs'} serve online inference, which it "
                "may not share (it is not preemptible, or avoids inference nodes)"
            )
        else:
            why = f"no node has {needs} together"
    elif f.qualifying < k:
        constraint, fld = "node_count", "gpus"
        why = (
            f"it needs {k:,} nodes{what} with {c} GPUs each but the cluster has "
            f"{f.qualifying:,} such nodes"
        )
    else:
        constraint, fld = "block_size", "gpus"
        why = (
            f"it needs {k:,} nodes{what} with {c} GPUs each inside one network block (a job "
            f"never spans blocks) but the largest block has {f.max_block:,} such nodes"
        )
    details["constraint"] = constraint
    return Refusal(constraint, fld, why, tuple(details.items()))


def _blamed_field(ask: Ask) -> str:
    if ask.gpu_memory_gb:
        return "gpu_memory_gb"
    if ask.rdma:
        return "rdma"
    if ask.gpu_model:
        return "gpu_model"
    return "gpus"


def _requirements(ask: Ask) -> list[str]:
    parts = []
    if ask.gpu_memory_gb:
        parts.append(f"GPUs of {ask.gpu_memory_gb} GB or more")
    if ask.gpu_model:
        parts.append(f"{ask.gpu_model} GPUs")
    if ask.rdma:
        parts.append("RDMA")
    if ask.pool:
        parts.append(f"pool {ask.pool}")
    return parts


def _and(parts: list[str]) -> str:
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)
