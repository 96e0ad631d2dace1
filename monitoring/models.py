"""Alerts for on-call (V4)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core import clock


class Alert(models.Model):
    """An alert raised by the loop or the health sweep.

    ``dedupe_key`` keeps one open alert per symptom and subject: raising the
    same alert again while it is open bumps ``count`` instead of adding a row.
    """

    class Kind(models.TextChoices):
        RESIDUAL_PROCESS = "residual_process"
        NODE_UNHEALTHY = "node_unhealthy"
        EVICTION_RATIO = "eviction_ratio"
        PENDING_TOO_LONG = "pending_too_long"
        QUOTA_NEAR_LIMIT = "quota_near_limit", "Quota Near or Over Limit"
        BACKEND_ERROR = "backend_error"
        DIRECTORY_SWEEP = "directory_sweep"
        PROVIDER_SWEEP = "provider_sweep"

    class Severity(models.TextChoices):
        INFO = "info"
        WARNING = "warning"
        CRITICAL = "critical"

    class Status(models.TextChoices):
        OPEN = "open"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved"

    kind = models.CharField(max_length=32, choices=Kind.choices)
    severity = models.CharField(max_length=10, choices=Severity.choices)
    status = models.CharField(max_length=14, choices=Status.choices, default=Status.OPEN)
    subject = models.CharField(max_length=200)
    message = models.TextField()
    dedupe_key = models.CharField(max_length=250, db_index=True)
    count = models.PositiveIntegerField(default=1)
    created_at = clock.ClusterTimeField(auto_now_add=True, help_text="cluster time")
    updated_at = clock.ClusterTimeField(auto_now=True, help_text="cluster time")
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["dedupe_key"],
                condition=~models.Q(status="resolved"),
                name="one_unresolved_alert_per_key",
            )
        ]


class MetricSample(models.Model):
    """One point of the live time series (written by the metrics rollup beat entry).

    ``per_line``: {line: {used, borrowed, pending_gpus, quota, guarantee}};
    ``per_queue``: {queue_id: {name, used, pending_jobs, evicted_gpu_s, eviction_ratio}};
    ``pending_by_reason``: {code: jobs}; ``idle_gpu_s``: {cause: GPU-seconds} idle while
    jobs waited, cumulative (``IdleAccount.totals``), with ``as_of`` the cluster time (epoch
    seconds) of the plan they run up to; the dashboard draws the differences between
    samples. ``at`` is cluster time. ``seeded``: demo history
    written by ``seed_demo`` (demo/history.py) so a fresh demo's charts have a past; not a
    measurement, drawn apart on the dashboard and carrying no per-line or per-queue figures.
    """

    at = models.DateTimeField(db_index=True)
    gpus_total = models.PositiveIntegerField()
    gpus_healthy = models.PositiveIntegerField()
    gpus_allocated = models.PositiveIntegerField()
    utilization = models.FloatField()
    fragmentation_gpus = models.PositiveIntegerField()
    pending_jobs = models.PositiveIntegerField()
    pending_by_reason = models.JSONField(default=dict)
    per_line = models.JSONField(default=dict)
    per_queue = models.JSONField(default=dict)
    idle_gpu_s = models.JSONField(
        default=dict, blank=True,
        help_text="GPU-seconds idle while jobs waited, per cause, since the portal started "
        "counting (cumulative, cluster time; monitoring.idle)",
    )  # fmt: skip
    seeded = models.BooleanField(default=False, help_text="seeded demo history, not measured")

    class Meta:
        ordering = ["-at"]


class IdleAccount(models.Model):
    """Idle GPUs by cause (``monitoring.idle``), kept by the loop: one row (pk 1).

    Written after every applied plan, inside the cycle's transaction
    (``monitoring.idle_account.record_plan``). ``at``: cluster time of that plan;
    ``claims``: idle GPUs per cause it left (empty when no job waits); ``free_before`` /
    ``free_after``: free GPUs when it planned / once its starts were placed; ``waiting``:
    some job still waited; ``totals``: GPU-seconds per cause idle while jobs waited, summed
    over cluster time since counting began (up to ``at``; ``/metrics`` and the rollup add
    the claims' time since).
    """

    at = models.DateTimeField(null=True, blank=True, help_text="cluster time of the last plan")
    claims = models.JSONField(default=dict, blank=True)
    free_before = models.PositiveIntegerField(default=0)
    free_after = models.PositiveIntegerField(default=0)
    waiting = models.BooleanField(default=False)
    totals = models.JSONField(default=dict, blank=True)
