"""Celery tasks of the monitoring side of the loop."""

from __future__ import annotations

import logging

from celery import shared_task

from scheduling.tasks import run_locked

log = logging.getLogger(__name__)


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


@shared_task(name="monitoring.tasks.push_alert", bind=True, ignore_result=True, acks_late=True,
             soft_time_limit=60, time_limit=90)  # fmt: skip
def push_alert(self, alert_id: int, event: str, targets: list[str] | None = None) -> dict:
    """Send one portal alert's current state to Alertmanager and/or the webhooks
    (``monitoring.notify``). Targets that fail are retried alone, with exponential
    backoff (2 s, 4 s, 8 s ... capped at 10 min, jittered) up to ALERT_NOTIFY_MAX_RETRIES."""
    import random

    from monitoring import notify

    config = notify.load_config()
    try:
        reached = notify.deliver(alert_id, event, targets, config)
    except notify.DeliveryError as err:
        if self.request.retries >= config.max_retries:
            log.error("alert %s (%s) not delivered, giving up: %s", alert_id, event, err)
            return {"alert": alert_id, "failed": list(err.failed)}
        delay = min(600.0, 2.0 * 2**self.request.retries) * random.uniform(0.8, 1.2)
        log.warning("alert %s (%s) not delivered, retry in %.0f s: %s", alert_id, event,
                    delay, err)  # fmt: skip
        raise self.retry(args=(alert_id, event, list(err.failed)), countdown=delay) from err
    return {"alert": alert_id, "reached": reached}


@shared_task(name="monitoring.tasks.resend_alerts", ignore_result=True)
def resend_alerts() -> dict:
    """Re-send unresolved alerts to Alertmanager (beat entry ``alerts-resend``): firing
    alerts there end unless re-sent (``monitoring.notify.FIRING_FOR``)."""
    from monitoring import notify

    try:
        return {"sent": notify.resend_unresolved()}
    except Exception as exc:  # noqa: BLE001 - the next run re-sends anyway
        log.warning("alerts not re-sent: %s", exc)
        return {"sent": 0, "error": str(exc)[:300]}
