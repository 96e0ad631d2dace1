"""Writers of alerts and node isolation from health observations.

Every time an alert carries (raised, last seen, resolved) is cluster time (``core.clock``),
the clock of the jobs and events it is about.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Concat

from core import clock, events
from core.realtime import publish_on_commit
from monitoring import notify
from monitoring.models import Alert


def raise_alert(kind: str, severity: str, subject: str, message: str) -> Alert:
    """Open an alert, or bump the count of the open one with the same kind and subject."""
    key = f"{kind}:{subject}"[:250]
    with transaction.atomic():
        updated = (
            Alert.objects.filter(dedupe_key=key)
            .exclude(status=Alert.Status.RESOLVED)
            .update(count=F("count") + 1, message=message, updated_at=clock.now())
        )
        if updated:
            alert = Alert.objects.filter(dedupe_key=key).exclude(status="resolved").get()
            notify.enqueue(alert.pk, notify.REPEATED)
            return alert
        try:
            with transaction.atomic():
                alert = Alert.objects.create(
                    kind=kind, severity=severity, subject=subject, message=message, dedupe_key=key
                )
        except IntegrityError:  # raced with another writer: bump theirs
            return raise_alert(kind, severity, subject, message)
    publish_on_commit(*events.alert_raised(alert.pk, kind, severity, subject, message))
    notify.enqueue(alert.pk, notify.RAISED)
    return alert


def keep_scheduling_alert(
    sender: object, *, kind: str, severity: str, subject: str, message: str, **_: object
) -> Alert:
    """Receiver of ``scheduling.alerts.alert_raised``: keep the alert the loop raised."""
    return raise_alert(kind, severity, subject, message)


def resolve_cleared(kind: str, firing: Iterable[str], why: str) -> int:
    """Resolve the unresolved ``kind`` alerts whose subject is no longer ``firing``.

    For alerts about a condition (eviction ratio, long waits, quota use): once it no
    longer holds, the alert closes by itself, as Alertmanager's do. Returns how many.
    """
    stale = Alert.objects.filter(kind=kind).exclude(status=Alert.Status.RESOLVED)
    return _resolve_automatically(stale.exclude(subject__in=list(firing)), why)


def resolve_quiet(kind: str, quiet_for: timedelta, why: str) -> int:
    """Resolve the unresolved ``kind`` alerts that did not fire again for ``quiet_for``
    (cluster time, like the alerts' own times).

    For alerts about something already handled (a residual process the loop killed): one
    that keeps coming back stays open, with its count; a one-off closes by itself.
    """
    stale = Alert.objects.filter(kind=kind, updated_at__lt=clock.now() - quiet_for)
    return _resolve_automatically(stale.exclude(status=Alert.Status.RESOLVED), why)


def _resolve_automatically(alerts, why: str) -> int:
    with transaction.atomic():
        ids = list(alerts.select_for_update(skip_locked=True).values_list("pk", flat=True))
        if not ids:
            return 0
        now = clock.now()
        Alert.objects.filter(pk__in=ids).update(
            status=Alert.Status.RESOLVED, resolved_at=now, resolved_by=None,
            updated_at=now, message=Concat("message", Value(f" [resolved: {why}]")),
        )  # fmt: skip
        for pk in ids:
            publish_on_commit(*events.alert_updated(pk, Alert.Status.RESOLVED))
            notify.enqueue(pk, notify.RESOLVED)
    return len(ids)


def _transition(
    user, alert_id: int, to: str, allowed_from: tuple[str, ...], source_ip: str | None
) -> Alert:
    from django.core.exceptions import PermissionDenied, ValidationError

    from core import audit
    from monitoring.permissions import ONCALL_ONLY, may_use_oncall_console

    if not may_use_oncall_console(user):
        raise PermissionDenied(ONCALL_ONLY)
    with transaction.atomic():
        alert = Alert.objects.select_for_update().get(pk=alert_id)
        if alert.status not in allowed_from:
            raise ValidationError({"status": [f"alert is already {alert.status}"]})
        before = {"status": alert.status}
        alert.status = to
        if to == Alert.Status.ACKNOWLEDGED:
            alert.acknowledged_by = user
        else:
            alert.resolved_by = user
            alert.resolved_at = clock.now()
        alert.save()
        audit.record(user, f"alert.{'ack' if to == 'acknowledged' else 'resolve'}", alert,
                     before=before, after={"status": to}, source_ip=source_ip)  # fmt: skip
        publish_on_commit(*events.alert_updated(alert.pk, to))
        notify.enqueue(
            alert.pk, notify.RESOLVED if to == Alert.Status.RESOLVED else notify.ACKNOWLEDGED
        )
    return alert


def acknowledge_alert(user, alert_id: int, source_ip: str | None = None) -> Alert:
    """Someone is on it: the alert stays visible but stops paging."""
    return _transition(user, alert_id, Alert.Status.ACKNOWLEDGED, (Alert.Status.OPEN,), source_ip)


def resolve_alert(user, alert_id: int, source_ip: str | None = None) -> Alert:
    """Close the alert; the same symptom later opens a new one."""
    return _transition(
        user, alert_id, Alert.Status.RESOLVED, (Alert.Status.OPEN, Alert.Status.ACKNOWLEDGED),
        source_ip,
    )  # fmt: skip
