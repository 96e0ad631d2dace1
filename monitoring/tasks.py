"""Celery tasks of the monitoring side of the loop."""

from __future__ import annotations

from celery import shared_task

from scheduling.tasks import run_locked


@shared_task(name="monitoring.tasks.health_sweep", ignore_result=True)
def health_sweep() -> dict:
    """Observe and reconcile without planning: isolate sick nodes, clean residual processes (R6, R7)."""
    return run_locked("sweep")


@shared_task(name="monitoring.tasks.metrics_rollup", ignore_result=True)
def metrics_rollup() -> dict:
    """One metrics sample and the windowed alerts when a cluster minute has passed since
    the last sample (asked every few seconds; see ``monitoring.rollup.sample_due``)."""
    from monitoring.rollup import rollup_if_due

    sample = rollup_if_due()
    if sample is None:
        return {"id": None, "skipped": "not due"}
    return {"id": sample.pk, "utilization": sample.utilization}
