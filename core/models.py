"""People, roles and the audit log.

A user has exactly one role (``Profile.role``) and belongs to business lines
through ``LineMembership``; a team lead leads the lines where ``is_lead`` is set.
Every privileged action writes an ``AuditRecord`` (who, what, when, from where,
before/after) through ``core.audit.record``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core import clock


class Role(models.TextChoices):
    RESEARCHER = "researcher", "Researcher"
    TEAM_LEAD = "team_lead", "Team lead"
    ONCALL = "oncall", "On-call engineer"
    ADMIN = "admin", "Cluster admin"


class Profile(models.Model):
    """The portal role of a user (one per user; missing means researcher)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile"
    )
    role = models.CharField(max_length=12, choices=Role.choices, default=Role.RESEARCHER)
    time_zone = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="IANA zone the pages show times in; empty: the browser's (else UTC)",
    )

    def __str__(self) -> str:
        return f"{self.user} ({self.role})"


class LineMembership(models.Model):
    """A user's membership of a business line; ``is_lead`` marks its team lead(s)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    business_line = models.ForeignKey(
        "quotas.BusinessLine", on_delete=models.CASCADE, related_name="memberships"
    )
    is_lead = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "business_line"], name="one_membership")
        ]


class AuditRecord(models.Model):
    """One privileged action: who did what to which object, when, from where, and why."""

    at = clock.ClusterTimeField(auto_now_add=True, db_index=True, help_text="cluster time")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    actor_name = models.CharField(max_length=150, help_text="kept if the user is deleted")
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64)
    reason = models.TextField(blank=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    source_ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.target_type}:{self.target_id}"


class ApiToken(models.Model):
    """A named, expiring API token a user created for themselves (``core.tokens``).

    Only the SHA-256 of the secret is stored (``key_hash``); the secret is shown once, at
    creation. ``prefix`` (the first characters of the secret) lets people tell their tokens
    apart without revealing them. Times are wall-clock UTC (``django.utils.timezone.now``),
    not cluster time: a simulator running faster than the wall must not shorten a
    credential's life. ``last_used_at`` is written at most once a minute.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="start of the secret, for display")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 hex of the secret")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "name"],
                condition=models.Q(revoked_at__isnull=True),
                name="one_live_token_name_per_user",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.name} ({self.prefix}…)"
