"""Test instrumentation for a Celery worker: every loop iteration lasts longer.

Imported before the worker starts (``python -c "import tests.reliability.slow_cycles; ..."``),
it makes each iteration sleep ``SLOW_CYCLE_S`` inside its transaction, holding the
cluster lock, as the cycles of a big cluster do (2-3 s against a 5 s period). A cycle
longer than half the beat period makes two beats' iterations meet whatever their phase.
"""

from __future__ import annotations

import os
import time

from celery.signals import worker_process_init


@worker_process_init.connect
def _slow_down(**_: object) -> None:
    from scheduling.cycle import Cycle

    delay = float(os.environ.get("SLOW_CYCLE_S", "0"))
    flush_events = Cycle.flush_events

    def slow_flush_events(self: Cycle) -> None:
        time.sleep(delay)
        flush_events(self)

    Cycle.flush_events = slow_flush_events
