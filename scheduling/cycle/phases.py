"""Where a loop iteration spends its time: wall-clock and CPU milliseconds per phase.

``run_cycle`` times each of its steps (lock, observe, reconcile, stops, snapshot, plan,
check, preempt, starts, verdicts, observers, dependencies, events, close, record) with a
``PhaseTimer``; the summary row keeps the three coarse figures (``observe_ms``, ``plan_ms``, ``apply_ms``)
and a caller that passes a ``CycleTrace`` (the ``bench_cycle`` command) gets every phase,
and the snapshot the engine planned on, to time ``plan()`` alone on the same input.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from scheduling.engine import types as et

# The phases of one iteration, in the order they run (a sweep plans nothing); ``collect``,
# the garbage collection after the commit (``run.PausedGc``), is not in ``duration_ms``.
PHASES = ("lock", "observe", "reconcile", "stops", "snapshot", "plan", "check", "preempt",
          "starts", "verdicts", "observers", "dependencies", "events", "close", "record",
          "collect")  # fmt: skip


class PhaseTimer:
    """Wall-clock and process CPU time per named phase (a phase timed twice adds up)."""

    def __init__(self) -> None:
        self.wall_ms: dict[str, float] = {}
        self.cpu_ms: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall_ms[name] = self.wall_ms.get(name, 0.0) + (time.perf_counter() - w0) * 1000
            self.cpu_ms[name] = self.cpu_ms.get(name, 0.0) + (time.process_time() - c0) * 1000

    def total(self, *names: str) -> float:
        """Wall-clock milliseconds of the named phases together."""
        return sum(self.wall_ms.get(n, 0.0) for n in names)


@dataclass
class CycleTrace:
    """What a traced iteration reports besides its summary row (benchmarks, diagnostics).

    ``phases`` and ``cpu`` map each phase to milliseconds (wall clock, process CPU);
    ``snapshot`` and ``now`` are the engine's input, None for a sweep or a skipped cycle.
    """

    phases: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    snapshot: et.Snapshot | None = None
    now: float | None = None
