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


# Mail is sent by ``core.tasks.send_mail`` (``core.mail``). This name stays registered only
# for the messages an older release queued (and their retries) before an upgrade.
@shared_task(name="quotas.tasks.send_quota_mail", bind=True, ignore_result=True,
             acks_late=True, max_retries=6, soft_time_limit=120, time_limit=150)  # fmt: skip
def send_quota_mail(self, subject: str, body: str, recipients: list[str]) -> int:
    """A quota mail queued under the old name: sent as ``core.tasks.send_mail`` sends."""
    from core.tasks import deliver

    return deliver(self, subject, body, recipients)
