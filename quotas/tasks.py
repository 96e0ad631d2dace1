"""Celery task of quota governance (beat entry ``quota-activation`` in ``portal.celery``)."""

from __future__ import annotations

import logging

from celery import shared_task

from scheduling.clock import cluster_now

log = logging.getLogger(__name__)


@shared_task(name="quotas.tasks.quota_activation", ignore_result=True)
def quota_activation() -> dict:
    """Start and end contracts whose time has come, then sample each line's and queue's use.

    Idempotent: the contract lock serialises concurrent runs and each request is applied
    or ended once; a duplicate run only adds one more usage sample.
    """
    from quotas.services import apply_due_changes, record_usage_sample

    now = cluster_now()
    report = apply_due_changes(now)
    samples = record_usage_sample(now)
    if report.applied or report.expired or report.waiting:
        log.info(
            "quota activation: applied %s, ended %s, waiting %s",
            report.applied, report.expired, report.waiting,
        )  # fmt: skip
    return {
        "applied": report.applied,
        "expired": report.expired,
        "waiting": report.waiting,
        "samples": samples,
    }


@shared_task(name="quotas.tasks.send_quota_mail", bind=True, ignore_result=True,
             acks_late=True, max_retries=6, soft_time_limit=120, time_limit=150)  # fmt: skip
def send_quota_mail(self, subject: str, body: str, recipients: list[str]) -> int:
    """Send a quota mail (``quotas.mail``); a refused or unreachable server is retried with
    exponential backoff (30 s, 60 s, 120 s ... up to 6 times)."""
    import smtplib

    from quotas.mail import send_now

    try:
        return send_now(subject, body, recipients)
    except (smtplib.SMTPException, OSError) as exc:  # timeouts are OSErrors
        if self.request.retries >= self.max_retries:
            log.error("quota mail %r not sent, giving up: %s", subject, exc)
            return 0
        raise self.retry(exc=exc, countdown=30 * 2**self.request.retries) from exc
