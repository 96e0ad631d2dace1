"""Business lines, queues and their quota contracts.

A contract is a pair of numbers: ``quota_gpus`` (the most GPUs the line/queue may
hold, a cap) and ``guarantee_gpus`` (GPUs it holds that are never preempted, a
floor). The database refuses a guarantee above the quota and negative numbers.
Contracts change only through ``quotas.services`` (approved requests or admin
actions), and every change leaves a ``QuotaChange`` row.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q


class Tier(models.TextChoices):
    """The four priority tiers, highest first (Q2)."""

    URGENT = "urgent", "Urgent fix"
    CORE = "core", "Core training"
    FINETUNE = "finetune", "Fine-tuning"
    EXPERIMENT = "experiment", "Experiment"

    @classmethod
    def rank(cls, value: str) -> int:
        """3 for urgent down to 0 for experiment."""
        return {"urgent": 3, "core": 2, "finetune": 1, "experiment": 0}[value]


class BusinessLine(models.Model):
    """A business line (e.g. LLM) owning queues and a line-level quota contract."""

    name = models.SlugField(max_length=50, unique=True)
    display_name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    quota_gpus = models.PositiveIntegerField()
    guarantee_gpus = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(guarantee_gpus__lte=F("quota_gpus")),
                name="line_guarantee_within_quota",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Queue(models.Model):
    """A queue inside a business line, with one tier (Q1, Q2).

    ``quota_gpus`` is optional (None: bounded only by the line's quota);
    ``guarantee_gpus`` is the part of the line that this queue keeps even
    under pressure (Q5). ``preempts_tiers`` lists the tiers its jobs may
    preempt; empty means the default policy (only urgent preempts).
    """

    class Nature(models.TextChoices):
        URGENT_FIX = "urgent_fix", "Urgent fix"
        CORE_TRAINING = "core_training", "Core training"
        FINE_TUNING = "fine_tuning", "Fine-tuning"
        EXPERIMENTS = "experiments", "Experiments"

    name = models.SlugField(max_length=80, unique=True)
    business_line = models.ForeignKey(BusinessLine, on_delete=models.PROTECT, related_name="queues")
    nature = models.CharField(max_length=20, choices=Nature.choices)
    tier = models.CharField(max_length=12, choices=Tier.choices)
    quota_gpus = models.PositiveIntegerField(null=True, blank=True)
    guarantee_gpus = models.PositiveIntegerField(default=0)
    preempts_tiers = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["business_line__name", "name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(quota_gpus__isnull=True) | Q(guarantee_gpus__lte=F("quota_gpus")),
                name="queue_guarantee_within_quota",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class QuotaChange(models.Model):
    """One change of a contract: who, when, why, before and after (Q4, Q6)."""

    business_line = models.ForeignKey(
        BusinessLine, on_delete=models.CASCADE, related_name="changes"
    )
    queue = models.ForeignKey(
        Queue, on_delete=models.CASCADE, null=True, blank=True, related_name="changes"
    )
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    changed_at = models.DateTimeField(auto_now_add=True)
    reason = models.TextField()
    quota_before = models.PositiveIntegerField(null=True, blank=True)
    quota_after = models.PositiveIntegerField(null=True, blank=True)
    guarantee_before = models.PositiveIntegerField()
    guarantee_after = models.PositiveIntegerField()

    class Meta:
        ordering = ["-changed_at", "-id"]
