"""A busy simulated cluster for the tests that race or kill the loop's processes.

``start_busy_cluster`` submits a rotating mix of jobs through the service, runs one cycle
here (so the first jobs start), then lets the simulated clock run fast, so that jobs start,
finish, fail and get preempted while the test's workers and beats run cycles.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

from scheduling.cycle import run_cycle
from scheduling.models import Job, SimulatorState
from scheduling.services import JobRequest, submit_job


def start_busy_cluster(
    user: Any,
    shapes: Sequence[tuple[str, int]],
    *,
    count: int,
    prefix: str,
    rng: random.Random,
    max_minutes: int,
    speed: float,
) -> int:
    """Submit ``count`` jobs named ``<prefix>-<i>``, cycling through ``shapes`` (queue, GPUs),
    each really running 5 to ``max_minutes`` simulated minutes (drawn from ``rng``) and
    checkpointing every 10; run one cycle; then run the simulated clock ``speed`` times
    faster than real time. Returns how many jobs the database holds (to compare at the end).
    """
    for i in range(count):
        queue, gpus = shapes[i % len(shapes)]
        submit_job(user, JobRequest(name=f"{prefix}-{i}", queue=queue, gpus=gpus,
                   sim_duration_minutes=rng.randint(5, max_minutes), checkpoint_interval_minutes=10))  # fmt: skip
    jobs = Job.objects.count()
    run_cycle()
    SimulatorState.objects.update(speed=speed, saved_wall=time.time())
    return jobs
