"""Alerts the scheduling layer raises, kept by whoever listens.

``scheduling`` sits below ``monitoring`` (docs/architecture.md): the loop and the node
services say *that* something is wrong by sending ``alert_raised``; the monitoring app
connects its writer (``monitoring.services.raise_alert``) in ``MonitoringConfig.ready``.
Receivers run synchronously, inside the sender's transaction, so an alert commits or
rolls back with the cycle that raised it.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

# Alert kinds and severities the scheduling layer raises (monitoring.models.Alert.Kind
# carries the same values, plus the windowed kinds only the rollup raises).
NODE_UNHEALTHY = "node_unhealthy"
RESIDUAL_PROCESS = "residual_process"
BACKEND_ERROR = "backend_error"
WARNING = "warning"
CRITICAL = "critical"

# Sent with keyword arguments kind, severity, subject, message; a receiver may return the
# alert it wrote (``raise_alert`` hands back the first one).
alert_raised = Signal()


def raise_alert(kind: str, severity: str, subject: str, message: str) -> Any:
    """Raise (or bump) an alert through whoever listens; the listener's alert, or None."""
    responses = alert_raised.send(
        sender=None, kind=kind, severity=severity, subject=subject, message=message
    )
    return next((alert for _, alert in responses if alert is not None), None)
