"""Celery tasks of the base layer: sending mail (``core.mail``); ``enqueue``, how every
writer hands a task to the broker after its commit."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task

log = logging.getLogger(__name__)

# A broker that does not answer is tried a little (about 1 s in all), never for long: the
# caller is a request or a cycle that has already committed.
QUEUE_RETRY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}


def enqueue(task: Task, args: tuple[Any, ...], what: str) -> None:
    """Queue ``task(*args)``; a broker outage is a warning naming ``what`` ("mail 'x'"),
    never an error for the caller: what it committed (a decision, an alert) stands."""
    try:
        task.apply_async(args, retry=True, retry_policy=QUEUE_RETRY)
    except Exception:  # noqa: BLE001 - a broker outage never undoes the caller's work
        log.warning("%s not queued", what, exc_info=True)


@shared_task(name="core.tasks.send_mail", bind=True, ignore_result=True,
             acks_late=True, max_retries=6, soft_time_limit=120, time_limit=150)  # fmt: skip
def send_mail(self: Task, subject: str, body: str, recipients: list[str]) -> int:
    """Send a mail (``core.mail``); a refused or unreachable server is retried with
    exponential backoff (30 s, 60 s, 120 s ... up to 6 times), then given up on and logged
    (what the mail told of stands)."""
    return deliver(self, subject, body, recipients)


def deliver(task: Task, subject: str, body: str, recipients: list[str]) -> int:
    """``send_mail``'s body: send now, or retry ``task`` with backoff."""
    import smtplib

    from core.mail import send_now

    try:
        return send_now(subject, body, recipients)
    except (smtplib.SMTPException, OSError) as exc:  # timeouts are OSErrors
        if task.request.retries >= task.max_retries:
            log.error("mail %r not sent, giving up: %s", subject, exc)
            return 0
        raise task.retry(exc=exc, countdown=30 * 2**task.request.retries) from exc
