"""Portal alerts leave the portal: Alertmanager (API v2) and Slack-compatible webhooks.

Off by default. Configured by the environment (read at call time, parsed like
``core.env``, a bad value stops with the variable's name):

- ``ALERTMANAGER_URL``: base URL of an Alertmanager (``http://alertmanager:9093``);
  every change of a portal alert (raised, repeated, acknowledged, resolved) is POSTed
  to ``<url>/api/v2/alerts``; unresolved alerts are re-sent by the beat entry
  ``alerts-resend`` so Alertmanager keeps them firing.
- ``ALERT_WEBHOOK_URLS``: comma-separated URLs that get ``{"text": "..."}`` (Slack,
  Mattermost, Rocket.Chat and most chat tools accept it) when an alert is raised,
  acknowledged or resolved (not on every repetition: Alertmanager groups those).
- ``PORTAL_URL``: the portal's address for the link back (``generatorURL``).
- ``ALERT_NOTIFY_TIMEOUT_SECONDS`` (default 5): per HTTP call;
  ``ALERT_NOTIFY_MAX_RETRIES`` (default 8): retries with exponential backoff.

Nothing here runs in the request thread: ``enqueue`` registers an on-commit hook that
hands the alert's id to the Celery task ``monitoring.tasks.push_alert``; the task reads
the alert's state when it runs (a late retry never re-opens what was resolved since).
Times sent to Alertmanager are wall-clock (Alertmanager expires alerts on its own clock);
the portal's cluster times travel in the annotations.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial

import requests
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from core.env import env_float, env_int, env_list, env_url, portal_url
from monitoring.models import Alert

# Events that change an alert (the task's second argument).
RAISED, REPEATED, ACKNOWLEDGED, RESOLVED, RESENT = (
    "raised", "repeated", "acknowledged", "resolved", "resent",
)  # fmt: skip
EVENTS = (RAISED, REPEATED, ACKNOWLEDGED, RESOLVED, RESENT)
# Webhooks hear about changes people act on; Alertmanager hears everything.
WEBHOOK_EVENTS = (RAISED, ACKNOWLEDGED, RESOLVED)
# How often unresolved alerts are re-sent (beat entry) and how long one stays firing in
# Alertmanager without a re-send: four re-sends missed, as Prometheus does.
RESEND_SECONDS = 60.0
FIRING_FOR = timedelta(seconds=4 * RESEND_SECONDS)

# Which label the subject of each kind fills.
SUBJECT_LABEL = {
    Alert.Kind.NODE_UNHEALTHY: "node",
    Alert.Kind.RESIDUAL_PROCESS: "node",
    Alert.Kind.EVICTION_RATIO: "queue",
    Alert.Kind.PENDING_TOO_LONG: "queue",
    Alert.Kind.QUOTA_NEAR_LIMIT: "line",
    Alert.Kind.BACKEND_ERROR: "backend",
    Alert.Kind.DIRECTORY_SWEEP: "cause",
    Alert.Kind.PROVIDER_SWEEP: "cause",
}
ALERTMANAGER = "alertmanager"


class DeliveryError(Exception):
    """One or more targets did not accept; ``failed`` names them for the retry."""

    def __init__(self, failed: dict[str, str]):
        super().__init__("; ".join(f"{t}: {why}" for t, why in failed.items()))
        self.failed = failed


@dataclass(frozen=True)
class NotifyConfig:
    """Where alerts go (see the module docstring for the variables)."""

    alertmanager_url: str | None = None
    webhook_urls: tuple[str, ...] = ()
    portal_url: str = "http://localhost:8000"
    timeout_s: float = 5.0
    max_retries: int = 8
    extra_labels: dict[str, str] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.alertmanager_url or self.webhook_urls)

    def targets(self, event: str) -> list[str]:
        """The targets an event goes to: ``alertmanager`` and/or webhook URLs."""
        out = [ALERTMANAGER] if self.alertmanager_url else []
        if event in WEBHOOK_EVENTS:
            out.extend(self.webhook_urls)
        return out


def load_config(environ: Mapping[str, str] | None = None) -> NotifyConfig:
    """The configuration from the environment; ``ImproperlyConfigured`` on a bad value."""
    hooks = env_list("ALERT_WEBHOOK_URLS", [], environ)
    for url in hooks:
        if not url.startswith(("http://", "https://")):
            raise ImproperlyConfigured(f"ALERT_WEBHOOK_URLS must list http(s) URLs, got {url!r}")
    return NotifyConfig(
        alertmanager_url=(env_url("ALERTMANAGER_URL", ("http", "https"), environ) or "").rstrip("/")
        or None,
        webhook_urls=tuple(hooks),
        portal_url=portal_url(environ),
        timeout_s=env_float(
            "ALERT_NOTIFY_TIMEOUT_SECONDS", 5.0, environ, minimum=0.1, maximum=120.0
        ),  # fmt: skip
        max_retries=env_int("ALERT_NOTIFY_MAX_RETRIES", 8, environ, minimum=0, maximum=50),
    )


# --- in the writer's transaction ---------------------------------------------------------


def enqueue(alert_id: int, event: str) -> None:
    """After the current transaction commits, queue the push of ``alert_id`` (no-op when
    nothing is configured). A broker outage is logged, never raised into the writer."""
    if not load_config().enabled:
        return
    transaction.on_commit(partial(_send_task, alert_id, event))


def _send_task(alert_id: int, event: str) -> None:
    from core.tasks import enqueue
    from monitoring.tasks import push_alert

    enqueue(push_alert, (alert_id, event), f"alert {alert_id} ({event}) notification")


# --- payloads -----------------------------------------------------------------------------


def alert_link(config: NotifyConfig, alert: Alert) -> str:
    """The on-call console, scrolled to the alert."""
    return f"{config.portal_url}/oncall/#alert-{alert.pk}"


def alert_labels(alert: Alert) -> dict[str, str]:
    """Labels identifying the alert in Alertmanager: alertname (the kind), kind, severity,
    and node, queue, line or backend from its subject (a queue's alert carries its line)."""
    labels = {"alertname": alert.kind, "kind": alert.kind, "severity": alert.severity,
              "source": "gpu-portal"}  # fmt: skip
    name = SUBJECT_LABEL.get(alert.kind, "subject")
    labels[name] = alert.subject
    if name == "queue":
        from quotas.models import Queue

        line = (
            Queue.objects.filter(name=alert.subject)
            .values_list("business_line__name", flat=True)
            .first()
        )
        if line:
            labels["line"] = line
    return labels


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def alertmanager_alert(config: NotifyConfig, alert: Alert, now: datetime) -> dict:
    """One alert of the API v2 body: firing until ``now + FIRING_FOR`` (re-sent while
    open), or ended at ``now`` once resolved. ``now`` is the wall clock."""
    annotations = {
        "summary": alert.message[:1000],
        "status": alert.status,
        "count": str(alert.count),
        "portal_alert_id": str(alert.pk),
        "raised_at": _iso(alert.created_at),
    }
    if alert.resolved_at is not None:
        annotations["resolved_at"] = _iso(alert.resolved_at)
    body = {
        "labels": alert_labels(alert),
        "annotations": annotations,
        "generatorURL": alert_link(config, alert),
        "startsAt": _iso(now),
    }
    if alert.status == Alert.Status.RESOLVED:
        body["endsAt"] = _iso(now)
    else:
        body["endsAt"] = _iso(now + FIRING_FOR)
    return body


def webhook_text(config: NotifyConfig, alert: Alert, event: str) -> str:
    """One line for a chat channel, with a link back (Slack's ``<url|text>``)."""
    head = {RAISED: "FIRING", ACKNOWLEDGED: "ACKNOWLEDGED", RESOLVED: "RESOLVED"}.get(
        event, event.upper()
    )
    return (
        f"[{head}] {alert.severity} {alert.kind} on {alert.subject}: {alert.message[:500]} "
        f"<{alert_link(config, alert)}|alert #{alert.pk}>"
    )


# --- in the Celery task -------------------------------------------------------------------


def _current(alert: Alert) -> Alert:
    """A resolved alert whose symptom is open again under a newer alert speaks for that
    one (same labels in Alertmanager: a late retry must not resolve the new one)."""
    if alert.status != Alert.Status.RESOLVED:
        return alert
    newer = (
        Alert.objects.filter(dedupe_key=alert.dedupe_key, pk__gt=alert.pk)
        .exclude(status=Alert.Status.RESOLVED)
        .first()
    )
    return newer or alert


def _post(url: str, payload: object, timeout_s: float) -> None:
    response = requests.post(
        url,
        data=json.dumps(payload),
        headers={"Content-Type": "application/json"},
        timeout=timeout_s,
    )
    if response.status_code >= 300:
        raise requests.HTTPError(f"HTTP {response.status_code}: {response.text[:200]}")


def post_to_alertmanager(config: NotifyConfig, alerts: Iterable[Alert]) -> int:
    """POST the alerts' current state to Alertmanager in one call; how many were sent."""
    now = datetime.now(UTC)
    body = [alertmanager_alert(config, a, now) for a in alerts]
    if body and config.alertmanager_url:
        _post(f"{config.alertmanager_url}/api/v2/alerts", body, config.timeout_s)
    return len(body)


def deliver(alert_id: int, event: str, targets: list[str] | None = None,
            config: NotifyConfig | None = None) -> list[str]:  # fmt: skip
    """Send one alert's current state to ``targets`` (default: all configured for the
    event). Returns the targets reached; ``DeliveryError`` names those that failed. An
    alert deleted since (retention) is nothing to send."""
    config = config or load_config()
    alert = Alert.objects.filter(pk=alert_id).first()
    if alert is None:
        return []
    targets = config.targets(event) if targets is None else targets
    failed: dict[str, str] = {}
    reached = []
    for target in targets:
        try:
            if target == ALERTMANAGER:
                post_to_alertmanager(config, [_current(alert)])
            else:
                _post(target, {"text": webhook_text(config, alert, event)}, config.timeout_s)
            reached.append(target)
        except requests.RequestException as exc:
            failed[target] = str(exc)[:300]
    if failed:
        raise DeliveryError(failed)
    return reached


def resend_unresolved(config: NotifyConfig | None = None) -> int:
    """Re-send every unresolved alert to Alertmanager (keeps them firing there)."""
    config = config or load_config()
    if not config.alertmanager_url:
        return 0
    open_alerts = Alert.objects.exclude(status=Alert.Status.RESOLVED).order_by("pk")
    return post_to_alertmanager(config, list(open_alerts[:5000]))
