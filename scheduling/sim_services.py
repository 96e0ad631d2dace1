"""The simulated clock and one-shot loop runs (API.md: simulator/advance, scheduler/cycle).

Fault drills (simulator/faults) are node writers: ``scheduling.nodes.services``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core import audit
from scheduling.backend_factory import open_simulator
from scheduling.clock import to_datetime
from scheduling.cluster_lock import wait_cluster_lock
from scheduling.cycle import run_cycle
from scheduling.models import SchedulingCycle
from scheduling.permissions import may_drive_simulator
from scheduling.sim_state import DatabaseSimulatorStore

MAX_ADVANCE_S = 7 * 86400
LOCK_WAIT_S = 20.0


def _with_cluster_lock(fn):
    with transaction.atomic():
        wait_cluster_lock(LOCK_WAIT_S)
        return fn()


def _require_simulator() -> None:
    if settings.SCHEDULING_BACKEND != "simulator":
        raise ValidationError({"backend": ["only available with the simulator backend"]})


def advance_clock(user: Any, seconds: Any, source_ip: str | None = None) -> dict:
    """Move the simulated cluster's clock forward (admins; drills and demos)."""
    if not may_drive_simulator(user):
        raise PermissionDenied("cluster admins only")
    _require_simulator()
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not (0 < seconds <= MAX_ADVANCE_S)
    ):
        raise ValidationError({"seconds": [f"a number of seconds from 1 to {MAX_ADVANCE_S}"]})

    def act() -> dict:
        with transaction.atomic():
            store = DatabaseSimulatorStore()
            backend = open_simulator(store)
            backend.advance(float(seconds))
            backend.close()
            audit.record(user, "simulator.advance", store.row, after={"seconds": seconds},
                         source_ip=source_ip)  # fmt: skip
        # ISO 8601 like every time of the API (API.md), not the simulator's epoch seconds
        return {"cluster_time": to_datetime(backend.now()), "advanced_s": float(seconds)}

    return _with_cluster_lock(act)


def run_cycle_now(user: Any, source_ip: str | None = None) -> SchedulingCycle:
    """One full loop iteration now (admins)."""
    if not may_drive_simulator(user):
        raise PermissionDenied("cluster admins only")
    record = run_cycle(kind="cycle", wait_s=LOCK_WAIT_S)
    audit.record(user, "scheduler.cycle", record, source_ip=source_ip)
    return record
