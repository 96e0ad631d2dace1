"""The directory sweep's beat task (entry ``directory-sweep`` in portal/celery.py)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from portal.auth import sweep


@shared_task(name="portal.auth.tasks.directory_sweep", ignore_result=True)
def directory_sweep() -> dict[str, Any]:
    """Follow the directory (``portal.auth.sweep``): a no-op unless LDAP is configured. A
    directory that cannot be asked changes nothing; the next run tries again. Idempotent:
    each person is written under their row lock, so two runs at once offboard once."""
    return sweep.sweep().as_dict()
