"""The simulator's state store in the database: the one ``SimulatorState`` row.

Implements ``scheduling.backends.sim_store.SimulatorStore`` for the simulator backend
(which imports no Django). ``load`` locks the row (``select_for_update``) until the
caller's transaction ends, so one cycle at a time advances the simulated cluster, and
``save`` writes in that same transaction. The inventory is the portal's ``Node``
table; the seed is ``ClusterSettings.seed``.

The live simulator is kept between cycles of one thread: a save remembers the object
it wrote with the identity of the row version it wrote, ``(xmin, ctid)`` (the writing
(sub)transaction and the version's place in the table; PostgreSQL gives every write of
the row, by any writer, a new version, and a rolled-back write's version is never the
row's again). The next ``load`` that finds the row at that very version hands the
object back instead of decoding the 0.7 MB state and rebuilding 100,000 objects from it
(at 10,000 GPUs); any other version (another process or thread saved, a direct write,
the save was rolled back) is read from the row as before. The remembered object is
handed out once: a load takes it, and only a save puts one back.
"""

from __future__ import annotations

import threading

from django.db import connection
from django.db.models.expressions import RawSQL

from scheduling.backends.sim_store import SavedSimulator
from scheduling.models import ClusterSettings, Node, SimulatorState
from scheduling.simcore.cluster import SimNode
from scheduling.simcore.simulator import Simulator

# What the simulator builds a node from: the inventory, not its health or cordon state.
INVENTORY_FIELDS = ("name", "rack", "block", "gpu_model", "gpu_memory_gb", "gpus_total", "rdma",
                    "inference")  # fmt: skip
# The identity of the row version read or written (see the module docstring).
ROW_VERSION = RawSQL("xmin::text || ' ' || ctid::text", ())

# This thread's last save: (database, row version, the simulator object saved).
_last_save = threading.local()


def _database() -> tuple[str, str, str]:
    """Which database the versions are of (a process may use more than one)."""
    db = connection.settings_dict
    return (str(db.get("HOST")), str(db.get("PORT")), str(db.get("NAME")))


def _take_live(version: str) -> Simulator | None:
    """The simulator this thread saved last if the row is still at that save's version;
    forgets it either way."""
    saved = getattr(_last_save, "entry", None)
    _last_save.entry = None
    if saved is not None and saved[:2] == (_database(), version):
        return saved[2]
    return None


class DatabaseSimulatorStore:
    """The simulator saved in ``SimulatorState``; ``row`` is the row after ``load``/``save``
    (the target of the simulator drills' audit records)."""

    def __init__(self) -> None:
        self.row: SimulatorState | None = None

    def load(self) -> SavedSimulator | None:
        self.row = (
            SimulatorState.objects.select_for_update()
            .filter(singleton=True)
            .defer("state")
            .annotate(row_version=ROW_VERSION)
            .first()
        )
        if self.row is None:
            _last_save.entry = None
            return None
        live = _take_live(self.row.row_version)
        return SavedSimulator(
            state=None if live is not None else self.row.state,  # read now (deferred)
            virtual_now=self.row.virtual_now, saved_wall=self.row.saved_wall,
            speed=self.row.speed, live=live,
        )  # fmt: skip

    def save(self, saved: SavedSimulator) -> None:
        row = self.row or SimulatorState(singleton=True)
        row.state = saved.state if saved.state is not None else saved.simulator().to_dict()
        row.virtual_now = saved.virtual_now
        row.saved_wall = saved.saved_wall
        row.speed = saved.speed
        row.save()
        self.row = row
        _last_save.entry = None
        if saved.live is not None:
            version = SimulatorState.objects.filter(pk=row.pk).values_list(ROW_VERSION).get()[0]
            _last_save.entry = (_database(), version, saved.live)

    def nodes(self) -> list[SimNode]:
        rows = Node.objects.order_by("name").values(*INVENTORY_FIELDS)
        return [SimNode(**row) for row in rows]

    def seed(self) -> int:
        return ClusterSettings.load().seed


class ReadOnlySimulatorStore(DatabaseSimulatorStore):
    """The simulator as its last save left it, read without locking its row (a cycle may
    hold that lock: a plain read does not wait for it); never saved (the what-if, a job's
    output: ``scheduling.backend_factory.read_only_backend``)."""

    def load(self) -> SavedSimulator | None:
        self.row = SimulatorState.objects.filter(singleton=True).first()
        if self.row is None:
            return None
        return SavedSimulator(state=self.row.state, virtual_now=self.row.virtual_now,
                              saved_wall=self.row.saved_wall, speed=self.row.speed)  # fmt: skip

    def save(self, saved: SavedSimulator) -> None:
        raise RuntimeError("a read-only simulator store never saves (a what-if, a job's output)")
