"""Idle GPUs by cause in the live portal: the loop's plans, integrated over cluster time.

``record_plan`` receives ``scheduling.observers.plan_applied`` (connected in
``MonitoringConfig.ready``): after every applied plan, inside the cycle's transaction, it
adds the idle GPU-seconds since the previous plan (``monitoring.idle.interval_gpu_seconds``:
the previous plan's causes over the interval, GPUs freed in between as ``awaiting_cycle``
for half of it) to the running totals of the one ``IdleAccount`` row, and keeps this
plan's causes (``monitoring.idle.plan_idle``, the rule the replay uses too) for the next
interval. ``idle_totals()`` is what ``/metrics`` exports as
``gpuportal_idle_gpu_seconds_total{cause}`` and what each rollup sample stores: the totals
up to the latest committed plan (a step per cycle, never back).

Kept in the database, not in a process's memory: the cycle runs in a worker and
``/metrics`` in the web server (``make run`` has no shared multiprocess directory), and
the totals survive restarts (a Prometheus counter resets only if the row is deleted).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from monitoring import idle
from monitoring.models import IdleAccount
from scheduling.clock import to_datetime
from scheduling.engine import Plan, Snapshot

log = logging.getLogger(__name__)
ROW = 1


def _previous(row: IdleAccount | None) -> idle.PlanIdle | None:
    if row is None or row.at is None:
        return None
    return idle.PlanIdle(row.free_before, row.free_after, row.waiting, dict(row.claims))


def account(snapshot: Snapshot, plan: Plan, not_launched: Iterable[int] = ()) -> IdleAccount:
    """Integrate the interval since the previous plan and keep this plan's idle causes."""
    now = to_datetime(plan.now)
    current = idle.plan_idle(snapshot, plan, not_launched)
    row = IdleAccount.objects.select_for_update().filter(pk=ROW).first()
    totals = dict(row.totals) if row is not None else {}
    previous = _previous(row)
    if previous is not None and now is not None and row.at is not None:
        seconds = (now - row.at).total_seconds()
        totals = idle.add(totals, idle.interval_gpu_seconds(previous, current.free_before,
                                                            seconds))  # fmt: skip
    values = {
        "at": now,
        "claims": current.claims,
        "free_before": current.free_before,
        "free_after": current.free_after,
        "waiting": current.waiting,
        "totals": idle.add(totals, {}),
    }
    if row is None:
        return IdleAccount.objects.create(pk=ROW, **values)
    IdleAccount.objects.filter(pk=ROW).update(**values)
    return IdleAccount(pk=ROW, **values)


def record_plan(
    sender: object, *, snapshot: Snapshot, plan: Plan, not_launched: Iterable[int] = (),
    **_: object,
) -> None:  # fmt: skip
    """Receiver of ``plan_applied``. A failure here is logged and rolled back alone (a
    savepoint): the count of idle GPUs never stops a cycle."""
    try:
        with transaction.atomic():
            account(snapshot, plan, not_launched)
    except Exception:  # noqa: BLE001 - the cycle goes on; the next plan counts again
        log.exception("idle GPUs by cause not recorded for the plan at %s", plan.now)


def idle_totals() -> tuple[datetime | None, dict[str, float]]:
    """GPU-seconds per cause idle while jobs waited, up to the latest plan, and that plan's
    cluster time (None before the first): every cause present, 0 before the first plan.

    Only what committed plans added: a reading taken while a cycle runs must never exceed
    what that cycle then commits (a Prometheus counter that goes back reads as a reset).
    """
    row = IdleAccount.objects.filter(pk=ROW).values_list("at", "totals").first()
    if row is None:
        return None, idle.add({}, {})
    return row[0], idle.add(row[1] or {}, {})


def idle_now() -> dict[str, int]:
    """Idle GPUs per cause the latest plan left (every cause present; 0 while no job waits)."""
    row = IdleAccount.objects.filter(pk=ROW).values_list("claims", flat=True).first()
    return {c: int((row or {}).get(c, 0)) for c in idle.CAUSES}
