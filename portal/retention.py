"""Retention: the history tables that grow without end are pruned by a beat task.

What is kept, and for how long (settings ``RETENTION_*_DAYS``; 0 keeps rows forever):

| rows | kept | measured on |
| --- | --- | --- |
| scheduling cycles and health sweeps (``SchedulingCycle``) | 14 days | ``started_at``, wall clock |
| resolved alerts | 90 days after they were resolved | ``resolved_at``, cluster time |
| audit records | 365 days | ``at``, cluster time |
| job events | as long as their job | (jobs are never pruned: job history is kept) |
| job dependencies (``Job.after``, ``Job.after_arrays``) | as long as their jobs | (so a pending job never loses, nor waits for ever on, the jobs it waits for) |

Open and acknowledged alerts are never pruned, whatever their age. Each period is
measured on the clock its rows are stamped with: cycles carry the wall clock (they are
the loop's heartbeat), alerts and audit records cluster time (``core.clock``: the wall
clock on real backends, the simulator's faster clock on the simulator).

Rows go in batches of ``batch_size`` primary keys, each batch its own short transaction,
so a first prune of a year of cycles never holds a long lock. A prune that deleted
anything writes one audit record (``retention.prune``) with the counts. Metric and
usage samples have their own retention where they are written (``monitoring/rollup.py``,
``quotas/services.py``). ``manage.py prune [--dry-run]`` runs this by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from core import audit, clock
from core.models import AuditRecord
from monitoring.models import Alert
from scheduling.models import SchedulingCycle

logger = logging.getLogger(__name__)

BATCH_SIZE = 5000


@dataclass(frozen=True)
class Rule:
    """One kind of row that expires: ``select(cutoff)`` is the rows older than ``cutoff``."""

    name: str
    label: str
    setting: str
    now: Callable[[], datetime]
    select: Callable[[datetime], QuerySet]

    @property
    def days(self) -> int:
        return int(getattr(settings, self.setting))


@dataclass(frozen=True)
class Finding:
    """What a rule found: ``count`` rows older than ``cutoff`` (deleted, or would be)."""

    name: str
    label: str
    days: int
    cutoff: datetime | None
    count: int

    def describe(self, verb: str) -> str:
        if self.cutoff is None:
            return f"{self.label}: kept forever ({self.name} retention is 0 days)"
        return (
            f"{self.label} older than {self.days} days (before {self.cutoff:%Y-%m-%d %H:%M} UTC):"
            f" {self.count} {verb}"
        )


def _cycles(cutoff: datetime) -> QuerySet:
    return SchedulingCycle.objects.filter(started_at__lt=cutoff)


def _resolved_alerts(cutoff: datetime) -> QuerySet:
    return Alert.objects.filter(status=Alert.Status.RESOLVED).filter(
        Q(resolved_at__lt=cutoff) | Q(resolved_at__isnull=True, updated_at__lt=cutoff)
    )


def _audit(cutoff: datetime) -> QuerySet:
    return AuditRecord.objects.filter(at__lt=cutoff)


RULES: tuple[Rule, ...] = (
    Rule("cycles", "scheduling cycles and sweeps", "RETENTION_CYCLE_DAYS", timezone.now, _cycles),
    Rule("alerts", "resolved alerts", "RETENTION_RESOLVED_ALERT_DAYS", clock.now, _resolved_alerts),
    Rule("audit", "audit records", "RETENTION_AUDIT_DAYS", clock.now, _audit),
)

KEPT_WITH_THEIR_JOB = "job events: kept as long as their job (jobs are kept: job history)"


def _cutoff(rule: Rule) -> datetime | None:
    return None if rule.days <= 0 else rule.now() - timedelta(days=rule.days)


def plan() -> list[Finding]:
    """What a prune would delete now, per rule (counts only; nothing is written)."""
    findings = []
    for rule in RULES:
        cutoff = _cutoff(rule)
        count = 0 if cutoff is None else rule.select(cutoff).count()
        findings.append(Finding(rule.name, rule.label, rule.days, cutoff, count))
    return findings


def _delete_in_batches(rows: QuerySet, batch_size: int) -> int:
    """Delete ``rows`` ``batch_size`` primary keys at a time; the number deleted."""
    model = rows.model
    deleted = 0
    while True:
        ids = list(rows.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return deleted
        deleted += model.objects.filter(pk__in=ids).delete()[0]


class _History:
    """The audit record's target: the portal's history tables."""

    pk = "history"


def prune(batch_size: int = BATCH_SIZE) -> list[Finding]:
    """Delete what has outlived its retention period; one audit record when anything went."""
    findings = []
    for rule in RULES:
        cutoff = _cutoff(rule)
        count = 0 if cutoff is None else _delete_in_batches(rule.select(cutoff), batch_size)
        findings.append(Finding(rule.name, rule.label, rule.days, cutoff, count))
    deleted = {f.name: f.count for f in findings if f.count}
    if deleted:
        logger.info("retention: deleted %s", ", ".join(f"{n} {k}" for k, n in deleted.items()))
        audit.record(
            None,
            "retention.prune",
            _History(),
            reason="; ".join(f.describe("deleted") for f in findings if f.count),
            before=deleted,
        )
    return findings
