"""Celery tasks of the scheduling loop (entries in ``portal.celery.beat_schedule``)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from portal.locks import single_flight
from scheduling.loop import run_cycle

log = logging.getLogger(__name__)

# Every task that touches the backend shares one lock: one writer of the cluster at a time.
CLUSTER_LOCK = "cluster"


def lock_ttl() -> float:
    """Shorter than a few periods so a dead worker blocks the loop only briefly."""
    return max(10.0, settings.SCHEDULER_CYCLE_SECONDS * 6)


def run_locked(kind: str) -> dict:
    with single_flight(CLUSTER_LOCK, ttl_seconds=lock_ttl()) as held:
        if not held:
            log.info("%s skipped: another loop iteration holds the cluster", kind)
            return {"skipped": True}
        record = run_cycle(kind=kind)
    log.info(
        "%s %s: %.0f ms, %d starts, %d preemptions, %d finished, %d pending, %d errors",
        kind, record.pk, record.duration_ms, record.starts, record.preemptions, record.finished,
        record.pending, len(record.errors),
    )  # fmt: skip
    return {"id": record.pk, "duration_ms": record.duration_ms}


@shared_task(name="scheduling.tasks.scheduling_cycle", ignore_result=True)
def scheduling_cycle() -> dict:
    """Observe, reconcile, plan and apply (single-flight; a slow cycle is skipped, not stacked)."""
    return run_locked("cycle")


@shared_task(name="scheduling.tasks.demo_workload", ignore_result=True)
def demo_workload() -> dict:
    """Submit the simulator demo's new arrivals (no-op unless the simulator demo is on)."""
    if settings.SCHEDULING_BACKEND != "simulator":
        return {"skipped": True}
    from scheduling.demo_workload import generate

    return {"submitted": generate()}
