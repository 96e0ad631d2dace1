"""Where the simulated cluster lives between cycles: the store interface and its clock rule.

The simulator backend (``scheduling/backends/simulator.py``) is Django-free: it loads
and saves its state through a :class:`SimulatorStore` the factory hands it. The
portal's store keeps it in the one ``SimulatorState`` row (``scheduling/sim_state.py``);
tests keep it in memory.

The clock: at wall time ``saved_wall`` the virtual clock read ``virtual_now`` and runs
``speed`` times faster than the wall clock. After downtime it catches up at most
:data:`MAX_CATCH_UP_S` (a long stop is not replayed); ``scheduling.clock`` reads cluster
time with the same rule, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from scheduling.simcore.cluster import SimNode
from scheduling.simcore.simulator import Simulator

# After downtime the simulator's clock catches up by at most this much (a long stop is
# not replayed): the simulator backend advances by ``catch_up`` when it loads.
MAX_CATCH_UP_S = 3600.0


def catch_up(wall_gap_s: float, speed: float) -> float:
    """Virtual seconds the simulator moves for ``wall_gap_s`` real seconds since its save."""
    return min(max(0.0, wall_gap_s) * speed, MAX_CATCH_UP_S)


@dataclass(frozen=True)
class SavedSimulator:
    """One save: ``Simulator.to_dict()`` and the clock (see the module docstring).

    ``live`` is the simulator object itself. ``close`` passes it with every save; a
    store may hand it back from ``load`` (with ``state`` None) when it can prove the save
    is still the current one, so the next cycle of the same thread need not rebuild
    the simulator from its state (the portal's store: ``scheduling/sim_state.py``).
    """

    state: dict[str, Any] | None
    virtual_now: float
    saved_wall: float
    speed: float
    live: Simulator | None = None

    def node_names(self) -> list[str]:
        """The nodes the saved simulator was built with, sorted."""
        if self.live is not None:
            return sorted(self.live.nodes)
        return sorted(row[0] for row in (self.state or {}).get("nodes", []))

    def simulator(self) -> Simulator:
        """The saved simulator: the live object when there is one, else rebuilt."""
        if self.live is not None:
            return self.live
        assert self.state is not None, "a save has its state or its live simulator"
        return Simulator.from_dict(self.state)


class SimulatorStore(Protocol):
    """The simulator's persistence and inventory, implemented outside the backends package.

    ``load`` locks what it reads until the caller's transaction ends (one cycle
    advances the simulator at a time); ``save`` writes in that same transaction, so a
    worker dying mid-cycle rolls the cluster back together with the cycle's own writes.
    """

    def load(self) -> SavedSimulator | None:
        """The last save (locked), or None before the first one."""
        ...

    def save(self, saved: SavedSimulator) -> None:
        """Replace the save with ``saved``."""
        ...

    def nodes(self) -> Sequence[SimNode]:
        """The nodes the portal's inventory lists, fresh objects sorted by name.

        The simulator is rebuilt from them when they no longer match its save."""
        ...

    def seed(self) -> int:
        """The seed a rebuilt simulator starts from (reproducible demo clusters)."""
        ...
