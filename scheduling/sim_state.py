"""The simulator's state store in the database: the one ``SimulatorState`` row.

Implements ``scheduling.backends.sim_store.SimulatorStore`` for the simulator backend
(which imports no Django). ``load`` locks the row (``select_for_update``) until the
caller's transaction ends, so one cycle at a time advances the simulated cluster, and
``save`` writes in that same transaction. The inventory is the portal's ``Node``
table; the seed is ``ClusterSettings.seed``.
"""

from __future__ import annotations

from scheduling.backends.sim_store import SavedSimulator
from scheduling.models import ClusterSettings, Node, SimulatorState
from scheduling.simcore.cluster import SimNode

# What the simulator builds a node from: the inventory, not its health or cordon state.
INVENTORY_FIELDS = ("name", "rack", "block", "gpu_model", "gpu_memory_gb", "gpus_total", "rdma",
                    "inference")  # fmt: skip


class DatabaseSimulatorStore:
    """The simulator saved in ``SimulatorState``; ``row`` is the row after ``load``/``save``
    (the target of the simulator drills' audit records)."""

    def __init__(self) -> None:
        self.row: SimulatorState | None = None

    def load(self) -> SavedSimulator | None:
        self.row = SimulatorState.objects.select_for_update().filter(singleton=True).first()
        if self.row is None:
            return None
        return SavedSimulator(state=self.row.state, virtual_now=self.row.virtual_now,
                              saved_wall=self.row.saved_wall, speed=self.row.speed)  # fmt: skip

    def save(self, saved: SavedSimulator) -> None:
        row = self.row or SimulatorState(singleton=True)
        row.state = saved.state
        row.virtual_now = saved.virtual_now
        row.saved_wall = saved.saved_wall
        row.speed = saved.speed
        row.save()
        self.row = row

    def nodes(self) -> list[SimNode]:
        rows = Node.objects.order_by("name").values(*INVENTORY_FIELDS)
        return [SimNode(**row) for row in rows]

    def seed(self) -> int:
        return ClusterSettings.load().seed
