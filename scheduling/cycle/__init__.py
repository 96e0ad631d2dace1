"""The scheduling loop as a package: one module per concern, ``run_cycle`` orders them.

- ``context``: the ``Cycle`` every step shares (backend, observation, report, timeline);
- ``reconcile``: nodes and runs against the backend's truth, adoption of lost launches;
- ``finished``: what an ended run means for its job (requeue, retry, fail, evictions);
- ``isolation``: sick nodes leave the pool (R7), residual processes are killed (R6);
- ``stops``: moves off leaving nodes, inference yields and the plan's preemptions;
- ``launch`` and ``backoff``: the plan's starts, with backoff after transient errors;
- ``verdicts``: why each waiting job waits;
- ``run``: ``run_cycle``, the orchestrator, and the iteration's summary.
"""

from scheduling.cycle.backoff import LAUNCH_RETRY, LAUNCH_RETRY_CODE, launch_backoff_s
from scheduling.cycle.context import Cycle, CycleReport, production_policy
from scheduling.cycle.run import cycle_payload, run_cycle

__all__ = [
    "LAUNCH_RETRY",
    "LAUNCH_RETRY_CODE",
    "Cycle",
    "CycleReport",
    "cycle_payload",
    "launch_backoff_s",
    "production_policy",
    "run_cycle",
]
