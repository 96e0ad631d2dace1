"""The demo's beat task (entry ``demo-workload`` in ``portal.celery``)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings


@shared_task(name="demo.tasks.demo_workload", ignore_result=True)
def demo_workload() -> dict:
    """Submit the simulator demo's new arrivals (no-op unless the simulator demo is on)."""
    if settings.SCHEDULING_BACKEND != "simulator":
        return {"skipped": True}
    from demo.workload import offer

    done = offer()
    return {"submitted": done.submitted, "dropped": done.dropped, "minutes": done.minutes}
