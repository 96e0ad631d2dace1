"""Simulated nodes and the demo cluster layout.

Pure standard library: the trace replay and the Django backend both build on it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

HEALTH_OK = "ok"
HEALTH_GPU_FAILURE = "gpu_failure"
HEALTH_RDMA_DEGRADED = "rdma_degraded"
HEALTH_DOWN = "down"
HEALTH_STATES = (HEALTH_OK, HEALTH_RDMA_DEGRADED, HEALTH_GPU_FAILURE, HEALTH_DOWN)
# Worst wins when faults pile up on one node (index = severity).
HEALTH_SEVERITY = {h: i for i, h in enumerate(HEALTH_STATES)}

# (model, memory per GPU in GB, share of the nodes) for a non-uniform cluster.
DEMO_GPU_MIX: tuple[tuple[str, int, float], ...] = (
    ("H100", 80, 0.60),
    ("A100", 80, 0.20),
    ("A100", 40, 0.10),
    ("L40S", 48, 0.10),
)
DEMO_NO_RDMA_SHARE = 0.15
DEMO_INFERENCE_SHARE = 0.05
GPUS_PER_NODE = 8


@dataclass(slots=True)
class SimNode:
    """One simulated machine.

    ``residual`` maps a GPU index to the id of the (ended) job whose stale
    process still holds that GPU's memory; such GPUs are not free until
    ``Simulator.clean_residual`` (or a repair/reboot) clears them.
    ``cordoned`` nodes refuse new launches but keep their running jobs.
    """

    name: str
    rack: str
    block: str
    gpu_model: str
    gpu_memory_gb: int
    gpus_total: int = GPUS_PER_NODE
    rdma: bool = True
    inference: bool = False
    health: str = HEALTH_OK
    residual: dict[int, str] = field(default_factory=dict)
    cordoned: bool = False

    def to_row(self) -> list:
        """Compact JSON-ready form (see ``from_row``)."""
        return [
            self.name,
            self.rack,
            self.block,
            self.gpu_model,
            self.gpu_memory_gb,
            self.gpus_total,
            self.rdma,
            self.inference,
            self.health,
            [[g, j] for g, j in sorted(self.residual.items())],
            self.cordoned,
        ]

    @classmethod
    def from_row(cls, row: list) -> SimNode:
        # to_row lists the fields in their declared order (as SimJob's row does).
        *head, residual, cordoned = row
        return cls(*head, residual={int(g): j for g, j in residual}, cordoned=cordoned)


def _allocate_by_deficit(sizes: list[int], shares: list[float], order: list[int]) -> dict[int, int]:
    """Give each rack (by index, visited in ``order``) the category furthest below its share."""
    total = sum(sizes)
    assigned = [0] * len(shares)
    out: dict[int, int] = {}
    for r in order:
        deficits = [shares[c] * total - assigned[c] for c in range(len(shares))]
        c = max(range(len(shares)), key=lambda i: (deficits[i], -i))
        out[r] = c
        assigned[c] += sizes[r]
    return out


def build_demo_cluster(
    nodes: int = 1250,
    nodes_per_rack: int = 32,
    racks_per_block: int = 8,
    uniform: bool = False,
    seed: int = 0,
) -> list[SimNode]:
    """Build the demo cluster: ``nodes`` machines of 8 GPUs, named ``r003-n07``.

    Racks (``r003``) hold ``nodes_per_rack`` nodes and blocks (``b0``) hold
    ``racks_per_block`` racks. Racks are homogeneous, as bought. Unless
    ``uniform``: about 60% H100 80GB, 20% A100 80GB, 10% A100 40GB, 10% L40S 48GB;
    about 15% of the nodes without RDMA (the L40S racks and some A100 40GB racks);
    and about 5% of the nodes serve online inference (L40S first). ``uniform``
    gives identical H100 80GB nodes, all with RDMA, and no inference pool.
    The layout is a pure function of the arguments.
    """
    if nodes < 1 or nodes_per_rack < 1 or racks_per_block < 1:
        raise ValueError("nodes, nodes_per_rack and racks_per_block must be >= 1")
    n_racks = math.ceil(nodes / nodes_per_rack)
    sizes = [min(nodes_per_rack, nodes - r * nodes_per_rack) for r in range(n_racks)]

    if uniform:
        rack_model = {r: 0 for r in range(n_racks)}
        no_rdma: set[int] = set()
    else:
        order = list(range(n_racks))
        random.Random(seed).shuffle(order)
        rack_model = _allocate_by_deficit(sizes, [m[2] for m in DEMO_GPU_MIX], order)
        # Racks without RDMA: every L40S rack, then A100 40GB racks until ~15%.
        target = DEMO_NO_RDMA_SHARE * nodes
        no_rdma = {r for r in range(n_racks) if rack_model[r] == 3}
        count = sum(sizes[r] for r in no_rdma)
        for r in range(n_racks):
            if rack_model[r] == 2 and count + sizes[r] / 2 <= target:
                no_rdma.add(r)
                count += sizes[r]

    inference_names: set[str] = set()
    if not uniform:
        n_inf = round(DEMO_INFERENCE_SHARE * nodes)
        if n_inf == 0 and nodes >= 10:
            n_inf = 1
        # L40S racks first (inference cards), then H100 racks.
        preferred = [r for r in range(n_racks) if rack_model[r] == 3]
        preferred += [r for r in range(n_racks) if rack_model[r] == 0]
        preferred += [r for r in range(n_racks) if rack_model[r] not in (0, 3)]
        for r in preferred:
            for i in range(sizes[r]):
                if len(inference_names) >= n_inf:
                    break
                inference_names.add(f"r{r:03d}-n{i:02d}")

    out: list[SimNode] = []
    for r in range(n_racks):
        model, mem, _ = DEMO_GPU_MIX[rack_model[r]]
        for i in range(sizes[r]):
            name = f"r{r:03d}-n{i:02d}"
            out.append(
                SimNode(
                    name=name,
                    rack=f"r{r:03d}",
                    block=f"b{r // racks_per_block}",
                    gpu_model=model,
                    gpu_memory_gb=mem,
                    gpus_total=GPUS_PER_NODE,
                    rdma=r not in no_rdma,
                    inference=name in inference_names,
                )
            )
    return out
