"""Celery tasks of the scheduling loop (entries in ``portal.celery.beat_schedule``)."""

from __future__ import annotations

import logging

from celery import shared_task

from scheduling.cycle import run_cycle

log = logging.getLogger(__name__)


def run_locked(kind: str) -> dict:
    """Run one iteration if the cluster lock is free (see ``scheduling.cluster_lock``)."""
    record = run_cycle(kind=kind)
    if record is None:
        log.info("%s skipped: another loop iteration holds the cluster", kind)
        return {"skipped": True}
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


@shared_task(
    name="scheduling.tasks.job_mail", ignore_result=True, soft_time_limit=50, time_limit=55
)
def job_mail() -> dict:
    """Mail each opted-in person the new events of their jobs, one digest each
    (``scheduling.job_mail.send_job_digests``). Two runs at once mail every event once."""
    from scheduling.job_mail import send_job_digests

    report = send_job_digests()
    if report.mailed:
        log.info("job mail: %d digest(s), %d event(s)", report.mailed, report.events)
    return {"horizon": report.horizon, "mailed": report.mailed, "events": report.events}
