"""The sweeps' beat tasks: ``directory-sweep`` and ``provider-sweep`` in portal/celery.py."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from celery import shared_task

from portal.auth import sweep
from portal.auth.provider_sweep import sweep as sweep_provider


@shared_task(name="portal.auth.tasks.directory_sweep", ignore_result=True)
def directory_sweep() -> dict[str, Any]:
    """Follow the directory (``portal.auth.sweep``): a no-op unless LDAP is configured. A
    directory that cannot be asked changes nothing; the next run tries again. Idempotent:
    each person is written under their row lock, so two runs at once offboard once."""
    return asdict(sweep.sweep())


@shared_task(name="portal.auth.tasks.provider_sweep", ignore_result=True)
def provider_sweep() -> dict[str, Any]:
    """Ask the OpenID Connect provider about each account whose refresh token the portal
    holds (``portal.auth.provider_sweep``), applying their groups: a no-op unless OpenID
    Connect and ``OIDC_SWEEP`` are on. A provider that does not answer changes nothing; the
    next run asks again. Two runs at once ask about each person once (each account is asked
    under its row lock)."""
    return asdict(sweep_provider())
