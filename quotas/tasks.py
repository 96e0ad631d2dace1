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
