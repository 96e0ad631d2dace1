"""Cluster time: the portal's one clock (``core.clock.now`` reads it; see docs/operations.md).

On real backends it is the wall clock. On the simulator it is the virtual
clock, which runs ``SIMULATOR_SPEED`` times faster than the wall clock (and
jumps on ``simulator/advance``), so timelines, estimates and waits stay
coherent with what the simulated cluster does. ``SchedulingConfig.ready`` registers
``cluster_now`` as ``core.clock``'s provider, so model defaults, audit records, alerts and
quota decisions all stamp with it; ``reading()`` is what the portal header shows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from core.prepared import Prepared

# The simulator's catch-up rule lives with its store; cluster time reads it the same way.
from scheduling.backends.sim_store import MAX_CATCH_UP_S, catch_up  # noqa: F401 - re-exported


def to_datetime(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)


def to_epoch(dt: datetime | None) -> float | None:
    return None if dt is None else dt.timestamp()


def _simulator_clock_query():
    from scheduling.models import SimulatorState

    return SimulatorState.objects.only("virtual_now", "saved_wall", "speed").order_by("pk")[:1]


# Read by every request that stamps a time and every page header: compiled once (#16).
_SIMULATOR_CLOCK = Prepared(_simulator_clock_query)


def _simulator_clock() -> dict[str, float] | None:
    """The simulator's clock row (``virtual_now``, ``saved_wall``, ``speed``), or None."""
    state = _SIMULATOR_CLOCK.first()
    if state is None:
        return None
    return {"virtual_now": state.virtual_now, "saved_wall": state.saved_wall, "speed": state.speed}


def cluster_now_ts() -> float:
    """Cluster time as epoch seconds (on the simulator: what its next load will read)."""
    if settings.SCHEDULING_BACKEND != "simulator":
        return time.time()
    row = _simulator_clock()
    if row is None:
        return time.time()
    return row["virtual_now"] + catch_up(time.time() - row["saved_wall"], row["speed"])


def cluster_now() -> datetime:
    """Cluster time as an aware datetime (UTC)."""
    return to_datetime(cluster_now_ts())  # type: ignore[return-value]


@dataclass(frozen=True)
class ClockReading:
    """The cluster clock as the portal header shows it (``reading()``).

    ``state``: ``wall`` (a real backend: the wall clock), ``running`` (the simulator's
    clock moves ``speed`` times faster than the wall), ``paused`` (speed 0: it moves only
    on ``simulator/advance``), ``stopped`` (no cycle has run for so long that the
    simulator's catch-up is used up: it stands still until the loop runs again) or
    ``starting`` (the simulator has not run its first cycle: the wall clock until then).
    ``until`` is the latest time the clock reaches without another cycle (simulator).
    """

    now: datetime
    state: str
    speed: float
    until: datetime | None = None
    idle_s: float = 0.0

    @property
    def simulated(self) -> bool:
        return self.state != "wall"

    @property
    def now_ms(self) -> int:
        """``now`` in epoch milliseconds (what the page's script extrapolates from)."""
        return round(self.now.timestamp() * 1000)

    @property
    def catch_up_s(self) -> float:
        """How far the simulator's clock runs on after a cycle without another one."""
        return MAX_CATCH_UP_S

    @property
    def until_ms(self) -> int | None:
        return None if self.until is None else round(self.until.timestamp() * 1000)

    @property
    def ticking(self) -> float:
        """Cluster seconds per wall second as of now (0 while paused or stopped)."""
        if self.state == "running":
            return self.speed
        return 1.0 if self.state in ("wall", "starting") else 0.0

    @property
    def badge(self) -> str:
        """The header's words: said once on every page of a simulated cluster."""
        if self.state == "wall":
            return ""
        speed = f"{self.speed:g}×"
        if self.state == "starting":
            return "simulated cluster · starting (no cycle yet)"
        if self.state == "paused":
            return "simulated cluster · clock paused"
        if self.state == "stopped":
            return f"simulated cluster · {speed} · stopped: no cycle for {self.idle_s / 60:.0f} min"
        return f"simulated cluster · {speed}"


def reading() -> ClockReading:
    """The cluster clock now, with its speed and state (one query on the simulator)."""
    wall = time.time()
    if settings.SCHEDULING_BACKEND != "simulator":
        return ClockReading(now=to_datetime(wall), state="wall", speed=1.0)  # type: ignore[arg-type]
    row = _simulator_clock()
    if row is None:  # before the first cycle, which starts the simulator at the wall clock
        return ClockReading(now=to_datetime(wall), state="starting", speed=1.0)  # type: ignore[arg-type]
    speed, idle = row["speed"], max(0.0, wall - row["saved_wall"])
    now = row["virtual_now"] + catch_up(idle, speed)
    if speed <= 0:
        state = "paused"
    elif idle * speed >= MAX_CATCH_UP_S:
        state = "stopped"
    else:
        state = "running"
    return ClockReading(
        now=to_datetime(now), state=state, speed=speed, idle_s=idle,  # type: ignore[arg-type]
        until=to_datetime(row["virtual_now"] + MAX_CATCH_UP_S),
    )  # fmt: skip
