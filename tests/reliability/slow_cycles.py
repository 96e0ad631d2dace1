"""Test instrumentation for a Celery worker: every loop iteration lasts longer, and says
when it held the cluster lock.

Imported before the worker starts (``python -c "import tests.reliability.slow_cycles; ..."``),
it makes each iteration sleep ``SLOW_CYCLE_S`` inside its transaction, holding the
cluster lock, as the cycles of a big cluster do (2-3 s against a 5 s period). A cycle
longer than half the beat period makes two beats' iterations meet whatever their phase.

With ``HELD_LOG`` set, each iteration appends ``<pid> <from> <to>`` (wall-clock seconds)
to that file: from just after it took the lock to just after its sleep, an interval
inside the time it held the lock. Two iterations side by side give intersecting
intervals; one after the other never do, however loaded the machine (the cycle's own
``started_at - duration_ms`` begins before it asks for the lock, and its ``started_at``
is written before its commit: a descheduled process makes those meet without any overlap).
"""

from __future__ import annotations

import os
import time

from celery.signals import worker_process_init


@worker_process_init.connect
def _slow_down(**_: object) -> None:
    from scheduling.cycle import Cycle, run

    delay = float(os.environ.get("SLOW_CYCLE_S", "0"))
    held_log = os.environ.get("HELD_LOG", "")
    flush_events = Cycle.flush_events
    try_cluster_lock = run.try_cluster_lock
    taken: list[float] = []

    def timed_try_cluster_lock() -> bool:
        got = try_cluster_lock()
        if got:
            taken[:] = [time.time()]
        return got

    def slow_flush_events(self: Cycle) -> None:
        time.sleep(delay)
        if held_log and taken:
            with open(held_log, "a") as out:
                out.write(f"{os.getpid()} {taken[0]:.6f} {time.time():.6f}\n")
        flush_events(self)

    run.try_cluster_lock = timed_try_cluster_lock
    Cycle.flush_events = slow_flush_events
