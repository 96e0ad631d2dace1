"""Beat tasks of the portal shell (the schedule is portal/celery.py)."""

from __future__ import annotations

from celery import shared_task

from portal import retention


@shared_task(name="portal.tasks.prune_history")
def prune_history() -> dict[str, int]:
    """Delete history older than its retention period (portal/retention.py); the counts."""
    return {finding.name: finding.count for finding in retention.prune()}
