"""An in-memory ``SimulatorStore`` for tests of the simulator backend without a database.

It keeps a save the way the database does (a JSON round trip of the state), so a
backend reopened from it is what the portal would reopen from ``SimulatorState``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence

from scheduling.backends.sim_store import SavedSimulator
from scheduling.simcore import build_demo_cluster
from scheduling.simcore.cluster import SimNode


class MemorySimulatorStore:
    """The simulator's save in memory; ``saves`` counts the writes."""

    def __init__(self, nodes: Sequence[SimNode] | None = None, seed: int = 0) -> None:
        self.inventory = list(nodes) if nodes is not None else demo_nodes()
        self.saved: SavedSimulator | None = None
        self.saves = 0
        self._seed = seed

    def load(self) -> SavedSimulator | None:
        return self.saved

    def save(self, saved: SavedSimulator) -> None:
        self.saved = SavedSimulator(
            state=json.loads(json.dumps(saved.state)),
            virtual_now=saved.virtual_now,
            saved_wall=saved.saved_wall,
            speed=saved.speed,
        )
        self.saves += 1

    def nodes(self) -> list[SimNode]:
        return copy.deepcopy(self.inventory)

    def seed(self) -> int:
        return self._seed


def demo_nodes(nodes: int = 4, nodes_per_rack: int = 2) -> list[SimNode]:
    """The contract's cluster: uniform nodes (8 H100 each), two racks of two."""
    return build_demo_cluster(nodes=nodes, nodes_per_rack=nodes_per_rack, uniform=True)
