"""Mail to people (quota requests and decisions, job digests), sent by Celery after commit.

The one way the portal sends mail: a service calls ``mail_on_commit`` inside its
transaction; once it commits, the Celery task ``core.tasks.send_mail`` sends it through
``send_now`` and retries a refused or unreachable server with backoff. A rolled-back
transaction sends nothing; a broker outage is logged and never undoes the write.

The SMTP server comes from the environment, read when a mail is sent (``core.env``
parsing; a bad value fails the task loudly, naming the variable): ``EMAIL_BACKEND``
(default: Django's setting, SMTP in production), ``EMAIL_HOST``, ``EMAIL_PORT``,
``EMAIL_HOST_USER``, ``EMAIL_HOST_PASSWORD``, ``EMAIL_USE_TLS``, ``EMAIL_USE_SSL``,
``EMAIL_TIMEOUT`` (seconds, default 10: a silent server costs the worker that long, never
a request) and ``DEFAULT_FROM_EMAIL``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import transaction

from core.env import env_bool, env_float, env_int, env_str


def mail_settings(environ: Mapping[str, str] | None = None) -> dict:
    """The connection's keyword arguments and the sender, from the environment."""
    return {
        "backend": env_str("EMAIL_BACKEND", settings.EMAIL_BACKEND, environ),
        "host": env_str("EMAIL_HOST", settings.EMAIL_HOST, environ),
        "port": env_int("EMAIL_PORT", settings.EMAIL_PORT, environ, minimum=1, maximum=65535),
        "username": env_str("EMAIL_HOST_USER", settings.EMAIL_HOST_USER, environ),
        "password": env_str("EMAIL_HOST_PASSWORD", settings.EMAIL_HOST_PASSWORD, environ),
        "use_tls": env_bool("EMAIL_USE_TLS", settings.EMAIL_USE_TLS, environ),
        "use_ssl": env_bool("EMAIL_USE_SSL", settings.EMAIL_USE_SSL, environ),
        "timeout": env_float("EMAIL_TIMEOUT", 10.0, environ, minimum=0.1, maximum=300.0),
        "from_email": env_str("DEFAULT_FROM_EMAIL", settings.DEFAULT_FROM_EMAIL, environ),
    }


def send_now(subject: str, body: str, recipients: list[str]) -> int:
    """Send one mail through the configured server (in the Celery task)."""
    options = mail_settings()
    from_email = options.pop("from_email")
    backend = options.pop("backend")
    connection = get_connection(backend, fail_silently=False, **options)
    return EmailMessage(subject, body, from_email, recipients, connection=connection).send()


def mail_on_commit(subject: str, body: str, recipients: list[str]) -> None:
    """Queue the mail for the Celery task ``core.tasks.send_mail`` once the current
    transaction commits (now, outside one); a broker outage is logged, never undoes the
    write. Empty addresses are dropped; no address, no mail."""
    recipients = sorted({r for r in recipients if r})
    if recipients:
        transaction.on_commit(partial(_queue, subject, body, recipients))


def _queue(subject: str, body: str, recipients: list[str]) -> None:
    from core.tasks import enqueue, send_mail

    enqueue(send_mail, (subject, body, recipients), f"mail {subject!r}")
