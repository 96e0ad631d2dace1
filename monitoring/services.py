"""Writers of alerts and node isolation from health observations."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import F

from monitoring.models import Alert
from portal.realtime import publish_on_commit


def raise_alert(kind: str, severity: str, subject: str, message: str) -> Alert:
    """Open an alert, or bump the count of the open one with the same kind and subject."""
    key = f"{kind}:{subject}"[:250]
    with transaction.atomic():
        updated = (
            Alert.objects.filter(dedupe_key=key)
            .exclude(status=Alert.Status.RESOLVED)
            .update(count=F("count") + 1, message=message)
        )
        if updated:
            alert = Alert.objects.filter(dedupe_key=key).exclude(status="resolved").get()
            return alert
        try:
            with transaction.atomic():
                alert = Alert.objects.create(
                    kind=kind, severity=severity, subject=subject, message=message, dedupe_key=key
                )
        except IntegrityError:  # raced with another writer: bump theirs
            return raise_alert(kind, severity, subject, message)
    publish_on_commit(
        "alerts",
        "alert.raised",
        {
            "id": alert.pk,
            "kind": kind,
            "severity": severity,
            "subject": subject,
            "message": message,
        },
    )
    return alert
