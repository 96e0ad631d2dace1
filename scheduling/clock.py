"""Cluster time: the clock every loop write and every estimate uses.

On real backends it is the wall clock. On the simulator it is the virtual
clock, which runs ``SIMULATOR_SPEED`` times faster than the wall clock (and
jumps on ``simulator/advance``), so timelines, estimates and waits stay
coherent with what the simulated cluster does.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.conf import settings

# The simulator's catch-up rule lives with its store; cluster time reads it the same way.
from scheduling.backends.sim_store import MAX_CATCH_UP_S, catch_up  # noqa: F401 - re-exported


def to_datetime(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)


def to_epoch(dt: datetime | None) -> float | None:
    return None if dt is None else dt.timestamp()


def cluster_now_ts() -> float:
    """Cluster time as epoch seconds (on the simulator: what its next load will read)."""
    if settings.SCHEDULING_BACKEND != "simulator":
        return time.time()
    from scheduling.models import SimulatorState

    row = SimulatorState.objects.values("virtual_now", "saved_wall", "speed").first()
    if row is None:
        return time.time()
    return row["virtual_now"] + catch_up(time.time() - row["saved_wall"], row["speed"])


def wall_seconds(cluster_seconds: float) -> float:
    """How long ``cluster_seconds`` of cluster time last on the wall clock: the same on
    real backends; on the simulator, shorter by its speed (a stopped clock counts as 1)."""
    if settings.SCHEDULING_BACKEND != "simulator":
        return cluster_seconds
    from scheduling.models import SimulatorState

    speed = SimulatorState.objects.values_list("speed", flat=True).first() or 0.0
    return cluster_seconds / max(1.0, speed)


def cluster_now() -> datetime:
    return to_datetime(cluster_now_ts())  # type: ignore[return-value]
