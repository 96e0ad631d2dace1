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


def to_datetime(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)


def to_epoch(dt: datetime | None) -> float | None:
    return None if dt is None else dt.timestamp()


def cluster_now_ts() -> float:
    """Cluster time as epoch seconds."""
    if settings.SCHEDULING_BACKEND != "simulator":
        return time.time()
    from scheduling.models import SimulatorState

    row = SimulatorState.objects.values("virtual_now", "saved_wall", "speed").first()
    if row is None:
        return time.time()
    return row["virtual_now"] + max(0.0, time.time() - row["saved_wall"]) * row["speed"]


def cluster_now() -> datetime:
    return to_datetime(cluster_now_ts())  # type: ignore[return-value]
