"""Business lines, queues and their quota contracts.

A contract is a pair of numbers: ``quota_gpus`` (the most GPUs the line/queue may
hold, a cap) and ``guarantee_gpus`` (GPUs it holds that are never preempted, a
floor). The database refuses a guarantee above the quota and negative numbers.
Contracts change only through ``quotas.services`` (approved requests or admin
actions), and every change leaves a ``QuotaChange`` row.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from core import clock
from scheduling.engine.types import FULL_RECLAIM_PATIENCE_S, FULL_STARVATION_BOUND_S
from scheduling.limits import RUNTIME_MAX_MINUTES


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
    # 0 until a request is approved (Q4): a line added in the Django admin starts there.
    quota_gpus = models.PositiveIntegerField("quota (GPUs)", default=0)
    guarantee_gpus = models.PositiveIntegerField("guarantee (GPUs)", default=0)

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
    ``max_time_limit_minutes`` bounds the time limit of its jobs' runs (Slurm's
    partition ``MaxTime``) and ``default_time_limit_minutes`` is the limit of a job
    that gives none (``DefaultTime``; none: the max), both fixed on a job when it is
    submitted (``scheduling.time_limits``).
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
    quota_gpus = models.PositiveIntegerField("quota (GPUs)", null=True, blank=True)
    guarantee_gpus = models.PositiveIntegerField("guarantee (GPUs)", default=0)
    preempts_tiers = models.JSONField(default=list, blank=True)
    max_time_limit_minutes = models.PositiveIntegerField(
        "max time limit (minutes)", null=True, blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(RUNTIME_MAX_MINUTES)],
        help_text="the longest one run of this queue's jobs may last (Slurm's partition "
        "MaxTime); a job asking more is refused. Empty: no bound. Jobs submitted before a "
        "change keep their limit",
    )  # fmt: skip
    default_time_limit_minutes = models.PositiveIntegerField(
        "default time limit (minutes)", null=True, blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(RUNTIME_MAX_MINUTES)],
        help_text="the time limit of a job that gives none (Slurm's DefaultTime). Empty: the "
        "max time limit, if any",
    )  # fmt: skip

    class Meta:
        ordering = ["business_line__name", "name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(quota_gpus__isnull=True) | Q(guarantee_gpus__lte=F("quota_gpus")),
                name="queue_guarantee_within_quota",
            ),
            models.CheckConstraint(
                condition=(
                    Q(max_time_limit_minutes__isnull=True) | Q(max_time_limit_minutes__gte=1)
                )
                & (
                    Q(default_time_limit_minutes__isnull=True)
                    | Q(default_time_limit_minutes__gte=1)
                ),
                name="queue_time_limits_positive",
            ),
            models.CheckConstraint(
                condition=Q(max_time_limit_minutes__isnull=True)
                | Q(default_time_limit_minutes__isnull=True)
                | Q(default_time_limit_minutes__lte=F("max_time_limit_minutes")),
                name="queue_default_time_limit_within_max",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """``preempts_tiers`` is a list of tier names strictly below the queue's: every cycle
        reads it (``scheduling.snapshot``), so anything else saved here (in the Django admin)
        stopped the loop, and a tier not below the queue's would be silently ignored (R2)."""
        super().clean()
        tiers = self.preempts_tiers
        if not isinstance(tiers, list) or not all(
            isinstance(t, str) and t in Tier.values for t in tiers
        ):
            raise ValidationError(
                {"preempts_tiers": f"a list of tiers, of {', '.join(Tier.values)}"}
            )
        if self.tier in Tier.values:
            above = [t for t in tiers if Tier.rank(t) >= Tier.rank(self.tier)]
            if above:
                raise ValidationError(
                    {"preempts_tiers": f"only tiers below {self.tier}; not {', '.join(above)}"}
                )
        most, default = self.max_time_limit_minutes, self.default_time_limit_minutes
        if most and default and default > most:
            raise ValidationError(
                {"default_time_limit_minutes": f"at most the max time limit ({most:,} min)"}
            )

    @property
    def time_limit_for_unlimited_jobs(self) -> int | None:
        """The time limit (minutes) a job of this queue that gives none gets: the default,
        else the max, else none."""
        return self.default_time_limit_minutes or self.max_time_limit_minutes


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
    changed_at = clock.ClusterTimeField(auto_now_add=True, help_text="cluster time")
    reason = models.TextField()
    quota_before = models.PositiveIntegerField(null=True, blank=True)
    quota_after = models.PositiveIntegerField(null=True, blank=True)
    guarantee_before = models.PositiveIntegerField()
    guarantee_after = models.PositiveIntegerField()
    request = models.ForeignKey(
        "QuotaRequest",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="changes",
        help_text="the approved request that made (or ended) this change",
    )

    class Meta:
        ordering = ["-changed_at", "-id"]


class QuotaRequest(models.Model):
    """A team lead's request for a new quota and/or guarantee of their line or one of its
    queues, for a period (Q6).

    States (``quotas.transitions``): pending -> approved | rejected | withdrawn, decided
    once. An approved request takes effect at ``starts_at`` (at approval when empty or
    past; later ones through the ``quota-activation`` beat entry), sets ``applied_at``
    and keeps the replaced values in ``previous``; at ``ends_at`` they are restored and
    ``expired_at`` is set. ``quota_gpus``/``guarantee_gpus`` left empty stay unchanged.
    Times are cluster time (the scheduler's clock). Written by ``quotas.services`` only.
    """

    class State(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        WITHDRAWN = "withdrawn"

    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="quota_requests"
    )
    business_line = models.ForeignKey(
        BusinessLine, on_delete=models.CASCADE, related_name="quota_requests"
    )
    queue = models.ForeignKey(
        Queue, on_delete=models.CASCADE, null=True, blank=True, related_name="quota_requests"
    )
    quota_gpus = models.PositiveIntegerField("quota (GPUs)", null=True, blank=True)
    guarantee_gpus = models.PositiveIntegerField("guarantee (GPUs)", null=True, blank=True)
    reason = models.TextField()
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(
        max_length=10, choices=State.choices, default=State.PENDING, db_index=True
    )
    created_at = clock.ClusterTimeField(auto_now_add=True, help_text="cluster time")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="quota_decisions",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    previous = models.JSONField(
        default=dict, blank=True, help_text="values replaced when applied, restored at ends_at"
    )
    activation_note = models.CharField(
        max_length=300, blank=True, help_text="why an approved change is not in effect yet"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "applied_at", "expired_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(quota_gpus__isnull=False) | Q(guarantee_gpus__isnull=False),
                name="quota_request_changes_something",
            ),
            models.CheckConstraint(
                condition=Q(quota_gpus__isnull=True)
                | Q(guarantee_gpus__isnull=True)
                | Q(guarantee_gpus__lte=F("quota_gpus")),
                name="quota_request_guarantee_within_quota",
            ),
            models.CheckConstraint(
                condition=Q(starts_at__isnull=True)
                | Q(ends_at__isnull=True)
                | Q(ends_at__gt=F("starts_at")),
                name="quota_request_ends_after_start",
            ),
            models.CheckConstraint(
                condition=Q(applied_at__isnull=True) | Q(state="approved"),
                name="quota_request_applied_only_if_approved",
            ),
        ]

    def __str__(self) -> str:
        return f"quota request #{self.pk} for {self.target_name} ({self.state})"

    @property
    def target_name(self) -> str:
        return self.queue.name if self.queue_id else self.business_line.name

    @property
    def status(self) -> str:
        """The state with the calendar folded in: ``scheduled``, ``active``, ``ended``."""
        if self.state != self.State.APPROVED:
            return self.state
        if self.expired_at:
            return "ended"
        return "active" if self.applied_at else "scheduled"


#: The most nodes a cycle may empty for defragmentation (each move is a checkpoint).
MAX_DEFRAGMENT_NODES = 8
# The starvation bound (#19): the ``full`` preset's by default (7 days), at most 90 days.
DEFAULT_STARVATION_BOUND_HOURS = round(FULL_STARVATION_BOUND_S / 3600)
MAX_STARVATION_BOUND_HOURS = 90 * 24
# The patience before a reclaim (#19, session 29): the ``full`` preset's (25 min, predictive).
DEFAULT_RECLAIM_PATIENCE_MINUTES = round(FULL_RECLAIM_PATIENCE_S / 60)


# A line's and each queue's usage is sampled each minute and kept this long.
USAGE_RETENTION_DAYS = 30
# The eviction window and the borrowing cool-down look back at most that far (cluster time
# minus a larger one overflowed, and every rollup or cycle failed).
MAX_EVICTION_WINDOW_HOURS = USAGE_RETENTION_DAYS * 24
MAX_BORROW_COOLDOWN_MINUTES = USAGE_RETENTION_DAYS * 24 * 60


class QuotaPolicy(models.Model):
    """The admins' knobs of quota governance (one row, edited in the Django admin).

    ``reserve_gpus``: healthy GPUs kept out of guarantees; approving into it needs an
    explicit override. ``eviction_target``/``eviction_window_hours``: a queue whose
    eviction ratio over the window is above the target gets a guarantee suggestion that
    would have prevented ``suggestion_coverage`` of its lost GPU time (R4); with
    ``borrow_cap`` the scheduler also tightens the borrowing of such a queue (#19).
    ``borrow_cooldown_minutes``: a job or queue preempted this recently does not borrow
    idle capacity again (#19).
    ``preempt_after_minutes`` / ``urgent_preempt_after_minutes`` (patience, #19): how long a
    waiting job waits for capacity to free before it reclaims borrowed work / before a job
    of a queue that preempts lower tiers (urgent) stops them; 0: at once (25 and 0 by
    default, the ``full`` preset's).
    ``predictive_patience`` (on by default): only for capacity predicted to free within the
    patience; when nothing is, the reclaim happens at once.
    ``borrow_cap``: the eviction target also caps a queue's borrowed GPUs (#19; off by
    default since session 15: docs/quotas.md).
    ``defragment_nodes``: partly used nodes the scheduler may empty per cycle by moving
    checkpointable jobs into holes elsewhere, so whole nodes are free before a gang asks
    (#19, ``scheduling/engine/defragment.py``; 0, the default: only for a waiting gang).
    ``starvation_bound_hours``: a job waiting this long goes ahead of every job of its
    tier that has waited less, and holds its queue's or line's quota room (#19,
    ``scheduling/engine/aging.py``; 168, the default: 7 days; 0: no bound).
    """

    singleton = models.BooleanField(default=True, unique=True, editable=False)
    reserve_gpus = models.PositiveIntegerField(default=0)
    eviction_target = models.FloatField(default=0.10)
    eviction_window_hours = models.PositiveIntegerField(
        default=72, validators=[MaxValueValidator(MAX_EVICTION_WINDOW_HOURS)]
    )
    suggestion_coverage = models.FloatField(default=0.8)
    borrow_cooldown_minutes = models.PositiveIntegerField(
        default=30,
        validators=[MaxValueValidator(MAX_BORROW_COOLDOWN_MINUTES)],
        help_text="minutes a preempted job or queue waits before borrowing again",
    )
    preempt_after_minutes = models.PositiveIntegerField(
        default=DEFAULT_RECLAIM_PATIENCE_MINUTES,
        help_text="minutes a job within its quota waits for capacity to free before it "
        f"reclaims borrowed GPUs ({DEFAULT_RECLAIM_PATIENCE_MINUTES}, the default; 0: at once)",
    )
    urgent_preempt_after_minutes = models.PositiveIntegerField(
        default=0,
        help_text="minutes a job of a queue that preempts lower tiers (urgent) waits for "
        "capacity to free before it preempts",
    )
    predictive_patience = models.BooleanField(
        default=True,
        help_text="wait out the patience only for capacity the running work is predicted "
        "to free within it; otherwise reclaim at once (on, the default)",
    )
    borrow_cap = models.BooleanField(
        default=False,
        help_text="a queue above the eviction target may hold fewer borrowed GPUs: fewer "
        "evictions, longer waits, and a queue reclaimed early may stay below its quota "
        "(off, the default: the target advises and alerts)",
    )
    defragment_nodes = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(MAX_DEFRAGMENT_NODES)],
        help_text="partly used nodes the scheduler may empty each cycle by moving "
        "checkpointable jobs into holes on fuller nodes, so whole nodes are free before a "
        "multi-GPU job asks (0, the default: jobs move only for a waiting one)",
    )
    starvation_bound_hours = models.PositiveIntegerField(
        default=DEFAULT_STARVATION_BOUND_HOURS,
        validators=[MaxValueValidator(MAX_STARVATION_BOUND_HOURS)],
        help_text="hours after which a waiting job goes ahead of every job of its tier that "
        "has waited less and holds its quota room, so it cannot be overtaken for ever "
        "(168, the default: 7 days; 0: no bound; higher tiers still go first)",
    )
    usage_days = models.PositiveIntegerField(
        default=7,
        validators=[MinValueValidator(1), MaxValueValidator(USAGE_RETENTION_DAYS)],
        help_text=f"days of recent use shown next to a request and on a line's page (1 to "
        f"{USAGE_RETENTION_DAYS}: usage samples are kept {USAGE_RETENTION_DAYS} days)",
    )

    class Meta:
        verbose_name_plural = "quota policy"
        constraints = [
            models.CheckConstraint(
                condition=Q(eviction_target__gte=0) & Q(eviction_target__lte=1),
                name="quota_policy_target_0_to_1",
            ),
            models.CheckConstraint(
                condition=Q(suggestion_coverage__gt=0) & Q(suggestion_coverage__lte=1),
                name="quota_policy_coverage_0_to_1",
            ),
            models.CheckConstraint(
                condition=Q(defragment_nodes__lte=MAX_DEFRAGMENT_NODES),
                name="quota_policy_defragment_bounded",
            ),
            models.CheckConstraint(
                condition=Q(starvation_bound_hours__lte=MAX_STARVATION_BOUND_HOURS),
                name="quota_policy_starvation_bound_bounded",
            ),
        ]

    def __str__(self) -> str:
        return "quota policy"

    @classmethod
    def load(cls) -> QuotaPolicy:
        obj, _ = cls.objects.get_or_create(singleton=True)
        return obj


class UsageSample(models.Model):
    """A line's (``queue`` empty) or a queue's use at one instant, written each minute by the
    ``quota-activation`` beat entry: recent peaks and averages next to a request, and the
    delivered GPU time of the eviction ratio. ``at`` is cluster time."""

    at = models.DateTimeField(db_index=True)
    business_line = models.ForeignKey(
        BusinessLine, on_delete=models.CASCADE, related_name="usage_samples"
    )
    queue = models.ForeignKey(
        Queue, on_delete=models.CASCADE, null=True, blank=True, related_name="usage_samples"
    )
    used_gpus = models.PositiveIntegerField()
    borrowed_gpus = models.PositiveIntegerField(default=0)
    pending_gpus = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["business_line", "queue", "at"]),
        ]
