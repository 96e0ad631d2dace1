"""The one list of node fault kinds a drill can inject, with the words the pages show.

Pure (no Django): the simulator core validates and applies these kinds; the portal
(``scheduling.nodes.faults``) re-exports them for the fault API, the node page's drill
form and its messages. Adding a kind here offers it everywhere at once; the simulator's
``inject_fault`` must then know what it does (``tests/scheduling/nodes`` checks both).
"""

from __future__ import annotations

FAULT_RESIDUAL = "residual_process"
FAULT_GPU = "gpu_failure"
FAULT_RDMA = "rdma_degraded"
FAULT_DOWN = "node_down"

# Kind -> what an on-call engineer reads (drill form choices, the "injected" message).
FAULT_LABELS: dict[str, str] = {
    FAULT_RESIDUAL: "Residual process (a finished job's process keeps a GPU)",
    FAULT_GPU: "GPU failure (uncorrectable ECC / Xid errors)",
    FAULT_RDMA: "RDMA degraded (packet loss on the fabric)",
    FAULT_DOWN: "Node down (no heartbeat)",
}
FAULT_KINDS: tuple[str, ...] = tuple(FAULT_LABELS)

__all__ = [
    "FAULT_DOWN",
    "FAULT_GPU",
    "FAULT_KINDS",
    "FAULT_LABELS",
    "FAULT_RDMA",
    "FAULT_RESIDUAL",
]
