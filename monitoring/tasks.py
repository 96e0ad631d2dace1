"""Celery tasks of the monitoring side of the loop."""

from __future__ import annotations

import logging

from celery import shared_task

from monitoring.health import run_health_sweep
from portal.locks import single_flight

log = logging.getLogger(__name__)


@shared_task(name="monitoring.tasks.health_sweep", ignore_result=True)
def health_sweep() -> dict:
    """Isolate sick nodes and alert on residual processes (single-flight)."""
    with single_flight("health-sweep", ttl_seconds=25) as held:
        if not held:
            log.info("health sweep skipped: another sweep is running")
            return {"skipped": True}
        result = run_health_sweep()
    log.info(
        "health sweep: %d isolated, %d nodes with residual processes",
        len(result.isolated), len(result.residual_nodes),
    )  # fmt: skip
    return {"isolated": result.isolated, "residual": result.residual_nodes}
