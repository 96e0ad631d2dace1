"""Writing audit records for privileged actions (stamped with cluster time: ``core.clock``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.models import AuditRecord


def record(
    actor: Any,
    action: str,
    target: Any,
    *,
    reason: str = "",
    before: dict | None = None,
    after: dict | None = None,
    source_ip: str | None = None,
    at: datetime | None = None,
) -> AuditRecord:
    """Write one audit record; call inside the action's transaction.

    ``at`` is when it happened: by default ``core.clock.now()`` (cluster time); an action
    that already read the clock passes its instant so its rows agree to the microsecond.
    """
    target_type = target._meta.label_lower if hasattr(target, "_meta") else type(target).__name__
    target_id = str(getattr(target, "pk", target))
    return AuditRecord.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        actor_name=getattr(actor, "username", "") or "system",
        action=action,
        target_type=target_type,
        target_id=target_id,
        reason=reason,
        before=before or {},
        after=after or {},
        source_ip=source_ip,
        **({"at": at} if at is not None else {}),
    )
