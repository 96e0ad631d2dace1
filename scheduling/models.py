"""Cluster nodes, jobs, GPU allocations and job timelines.

Invariants held by the database itself:
- an ``Allocation`` is one GPU of one node, unique per (node, gpu_index): no GPU
  is ever given to two jobs, whatever the writers do;
- GPU indices are within 0..7 (nodes have at most 8 GPUs) and counts are positive.
State changes go through the services and the loop (``scheduling.cycle``); a job's
``state`` is assigned only by ``scheduling.transitions.set_state``.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core import clock
from quotas.models import Queue, Tier
from scheduling import transitions
from scheduling.backends.base import (
    HEALTH_DOWN,
    HEALTH_GPU_FAILURE,
    HEALTH_LABELS,
    HEALTH_OK,
    HEALTH_RDMA_DEGRADED,
)

MAX_GPUS_PER_NODE = 8


class Node(models.Model):
    """A GPU node as the portal knows it (discovered from or pushed to the backend).

    ``state`` is the scheduling state (may jobs land here); ``health`` is what the
    last observation or health sweep saw. ``residual_gpus`` counts GPUs held by
    stale processes of finished jobs (R6): busy, but by nobody. ``inference_gpus``
    counts GPUs serving online inference on a shared (``inference``) node as of the last
    applied plan (``scheduling.nodes.inference``): in use, though by no job;
    ``inference_profile`` the hourly peaks of that count, today's and yesterday's
    (``scheduling.engine.inference_forecast``), from which the engine is told how much
    more inference will want later in the day. ``joined_at``: when the loop discovered it
    on the backend, the cluster growing (null for the nodes it was set up with); the
    cluster's GPUs over time, for the usage report's shares.
    """

    class State(models.TextChoices):
        READY = "ready"
        CORDONED = "cordoned"
        DRAINING = "draining"
        DOWN = "down"
        UNHEALTHY = "unhealthy"

    class Health(models.TextChoices):
        # the labels are what pages write (``get_health_display``); the API keeps the values
        OK = HEALTH_OK, HEALTH_LABELS[HEALTH_OK]
        GPU_FAILURE = HEALTH_GPU_FAILURE, HEALTH_LABELS[HEALTH_GPU_FAILURE]
        RDMA_DEGRADED = HEALTH_RDMA_DEGRADED, HEALTH_LABELS[HEALTH_RDMA_DEGRADED]
        DOWN = HEALTH_DOWN, HEALTH_LABELS[HEALTH_DOWN]

    name = models.CharField(max_length=64, unique=True)
    rack = models.CharField(max_length=32, db_index=True)
    block = models.CharField(max_length=32)
    gpu_model = models.CharField(max_length=32)
    gpu_memory_gb = models.PositiveSmallIntegerField()
    gpus_total = models.PositiveSmallIntegerField()
    rdma = models.BooleanField(default=True)
    inference = models.BooleanField(default=False, help_text="serves online inference")
    state = models.CharField(max_length=12, choices=State.choices, default=State.READY)
    state_reason = models.CharField(max_length=300, blank=True)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.OK)
    health_detail = models.CharField(max_length=300, blank=True)
    residual_gpus = models.PositiveSmallIntegerField(default=0)
    inference_gpus = models.PositiveSmallIntegerField(
        default=0, help_text="GPUs serving online inference at the last applied plan"
    )
    inference_profile = models.JSONField(
        default=dict, blank=True,
        help_text="GPUs online inference held per UTC hour, today and yesterday (learned)",
    )  # fmt: skip
    uncordon_requested = models.BooleanField(
        default=False, help_text="the portal uncordoned it; the loop tells the backend"
    )
    recent_models = models.JSONField(default=list, blank=True)
    updated_at = clock.ClusterTimeField(auto_now=True, help_text="cluster time")
    joined_at = clock.ClusterTimeField(
        null=True, blank=True,
        help_text="cluster time the loop discovered it on the backend (null: part of the "
        "cluster the portal was set up with); the usage report counts its GPUs from then",
    )  # fmt: skip

    objects = clock.ClockManager()  # a bulk insert reads the cluster clock once

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpus_total__gte=1) & Q(gpus_total__lte=MAX_GPUS_PER_NODE),
                name="node_gpus_total_1_to_8",
            ),
            models.CheckConstraint(
                condition=Q(residual_gpus__lte=models.F("gpus_total")),
                name="node_residual_within_total",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class MaintenanceWindow(models.Model):
    """Scheduled maintenance of some nodes, as Slurm's maintenance reservations
    (``scontrol create reservation flags=maint``).

    Until ``starts_at`` the plan starts on its nodes only work predicted to end by then
    (``NodeView.unavailable_from``, built in ``scheduling.snapshot``); at ``starts_at`` the
    loop drains the nodes with the window's reason, and at ``ends_at`` (None: open-ended,
    until cancelled) it returns them as they were (uncordoned, or cordoned again with the
    reason they had: ``cordons``), except a node someone changed by hand meanwhile, which
    it leaves as it is and says so in ``note``. ``state``: scheduled -> active ->
    done, or cancelled (before the start: nothing changes; while active: the nodes return as
    at the end). The one writer is ``scheduling.nodes.maintenance``.
    """

    class State(models.TextChoices):
        SCHEDULED = "scheduled"
        ACTIVE = "active"
        DONE = "done"
        CANCELLED = "cancelled"

    nodes = models.ManyToManyField(Node, related_name="maintenance_windows")
    starts_at = models.DateTimeField(db_index=True, help_text="cluster time")
    ends_at = models.DateTimeField(null=True, blank=True, help_text="none: open-ended")
    reason = models.CharField(max_length=300)
    state = models.CharField(
        max_length=12, choices=State.choices, default=State.SCHEDULED, db_index=True
    )
    note = models.TextField(blank=True, help_text="what the loop did, or left as it was")
    cordons = models.JSONField(
        default=dict, blank=True,
        help_text="nodes cordoned when it started, with their reasons: cordoned again at its end",
    )  # fmt: skip
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )  # fmt: skip
    created_at = clock.ClusterTimeField(auto_now_add=True, help_text="cluster time")
    updated_at = clock.ClusterTimeField(auto_now=True, help_text="cluster time")

    objects = clock.ClockManager()

    class Meta:
        ordering = ["starts_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=models.F("starts_at")),
                name="maintenance_ends_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"maintenance #{self.pk}"


class JobArray(models.Model):
    """A job array (Slurm's ``sbatch --array``): one submission of many tasks that differ only
    by their index, each task a ``Job`` (``tasks``, ``Job.array_index``) queued, run,
    preempted and finished on its own.

    ``spec`` is the indices as asked (``0-99%10``, Slurm's syntax, ``scheduling.arrays``);
    ``max_running`` (Slurm's ``%N`` throttle, ``ArrayTaskThrottle``) bounds how many tasks
    hold GPUs at once: the loop gives the engine only the lowest-index waiting tasks that fit
    under it and writes the others' verdict itself (``ARRAY_LIMIT``). None: no bound. Its
    owner, their team lead or an admin may change it (``scheduling.array_services``, the only
    writer). ``owner`` and ``queue`` are every task's.
    """

    name = models.CharField(max_length=100)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_arrays"
    )
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="job_arrays")
    spec = models.CharField(max_length=200, help_text="the indices as asked: 0-99%10")
    size = models.PositiveIntegerField(help_text="tasks")
    max_running = models.PositiveIntegerField(
        null=True, blank=True, help_text="tasks holding GPUs at once; none: no bound"
    )
    created_at = clock.ClusterTimeField(auto_now_add=True, help_text="cluster time")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(size__gte=1), name="jobarray_size_positive"),
            models.CheckConstraint(
                condition=Q(max_running__isnull=True) | Q(max_running__gte=1),
                name="jobarray_max_running_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"array {self.name} (#{self.pk})"


class Job(models.Model):
    """A training job: its submitted spec, where it stands, and why.

    States follow API.md: pending -> running -> succeeded | failed | cancelled, and
    running -> preempting -> pending on graceful preemption (progress kept,
    ``preemption_count`` + 1); ``scheduling.transitions`` lists every allowed move and
    is the one writer of ``state``. ``pending_*`` hold the engine's latest verdict.
    ``launch_*`` hold the current streak of transient launch failures (the backoff of
    ``scheduling.cycle.backoff``): zero attempts and no times when there is none.
    ``after`` (Slurm's ``--dependency=afterok``): the jobs that must all succeed before this
    one may start, chosen at submission and never changed (``dependents``: the jobs that
    wait for this one). While one of them has not succeeded the job is pending with the
    loop's ``DEPENDENCY`` reason and is not given to the engine; when one ends failed or
    cancelled the loop cancels it (``scheduling.cycle.dependencies``). Jobs are never
    pruned; a dependency's row deleted by hand takes its link with it and holds nothing.
    ``after_arrays``: arrays waited for as a whole, as if every task of each were in
    ``after`` (an array's tasks are all created with it, so "every task" never changes).
    ``after_condition``: ``succeeded`` (the above) or ``ended`` (Slurm's ``afterany``: they
    must all have ended, whatever the outcome; the job is never cancelled for theirs).
    ``singleton`` (Slurm's ``--dependency=singleton``): asked for one at a time by name, so
    at submission it was made to wait for its owner's older active jobs of the same name to
    end (``after``, or ``after_arrays`` for an array's tasks, with ``after_condition``
    ``ended``; ``services.check_dependencies``); the flag records why those links exist.
    ``held_*``/``hold_*`` (Slurm's ``scontrol hold``/``release``, ``scheduling.holds``): a
    held job stays pending with the loop's ``HELD`` reason and is not given to the engine; a
    running job held is suspended (checkpointed and stopped by the loop, back pending and
    held). ``released_at``: its wait counts from its last release. ``array``/``array_index``:
    a task of a job array (``JobArray``), which may bound how many of its tasks run at once.
    """

    class State(models.TextChoices):
        # The values are the state machine's, written once in scheduling.transitions.
        PENDING = transitions.PENDING
        RUNNING = transitions.RUNNING
        PREEMPTING = transitions.PREEMPTING
        SUCCEEDED = transitions.SUCCEEDED
        FAILED = transitions.FAILED
        CANCELLED = transitions.CANCELLED

    class AfterCondition(models.TextChoices):
        """What the jobs a job waits for must have done first (``after_condition``)."""

        SUCCEEDED = "succeeded", "succeeded (Slurm's afterok)"
        ENDED = "ended", "ended, whatever the outcome (Slurm's afterany)"
        FAILED = "failed", "failed or been cancelled (Slurm's afternotok)"

    ACTIVE_STATES = (State.PENDING, State.RUNNING, State.PREEMPTING)
    TERMINAL_STATES = (State.SUCCEEDED, State.FAILED, State.CANCELLED)
    # the states of a dependency (a job) that meet each ``after_condition``
    MEETS = {
        AfterCondition.SUCCEEDED: frozenset({State.SUCCEEDED}),
        AfterCondition.ENDED: frozenset(TERMINAL_STATES),
        AfterCondition.FAILED: frozenset({State.FAILED, State.CANCELLED}),
    }
    # the states of a dependency that mean it can never meet it (its dependents are
    # cancelled): ended the other way
    DEFEATS = {
        AfterCondition.SUCCEEDED: frozenset({State.FAILED, State.CANCELLED}),
        AfterCondition.ENDED: frozenset(),
        AfterCondition.FAILED: frozenset({State.SUCCEEDED}),
    }
    # An array waited for as a whole (``after_arrays``): under ``succeeded`` every task must
    # succeed (one that did not defeats it), under ``ended`` every task end; under
    # ``failed`` (Slurm's afternotok on an array job) every task must end, and not all of
    # them succeed: it is defeated once all have succeeded. The states a task must reach:
    TASK_MEETS = {**MEETS, AfterCondition.FAILED: frozenset(TERMINAL_STATES)}

    name = models.CharField(max_length=100)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="jobs")
    tier = models.CharField(max_length=12, choices=Tier.choices)
    gpus = models.PositiveIntegerField()
    gpus_per_node = models.PositiveSmallIntegerField(null=True, blank=True)
    gpu_memory_gb = models.PositiveSmallIntegerField(null=True, blank=True)
    rdma = models.BooleanField(default=False)
    exclusive_node = models.BooleanField(default=False)
    avoid_inference = models.BooleanField(default=False)
    preemptible = models.BooleanField(default=True)
    borrowed = models.BooleanField(default=False, help_text="started beyond quota on idle capacity")
    max_retries = models.PositiveSmallIntegerField(default=3)
    checkpoint_path = models.CharField(max_length=500, blank=True)
    checkpoint_interval_minutes = models.PositiveIntegerField(default=60)
    estimated_runtime_minutes = models.PositiveIntegerField(null=True, blank=True)
    time_limit_minutes = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="the longest one run may last (Slurm's --time): a run that reaches it is "
        "asked to checkpoint and stop, and the job fails (TIMEOUT), with no retry",
    )  # fmt: skip
    begin_at = models.DateTimeField(
        null=True, blank=True,
        help_text="not started before this (Slurm's --begin), cluster time; its wait counts "
        "from then (scheduling.begin_time)",
    )  # fmt: skip
    first_among_own_at = models.DateTimeField(
        null=True, blank=True,
        help_text="when it was put first among its owner's waiting jobs (Slurm's scontrol "
        "top), cluster time: it takes the first of their places (scheduling.own_order_services)",
    )  # fmt: skip
    time_limit_past_queue_max = models.BooleanField(
        default=False,
        help_text="an admin gave it a time limit above its queue's max: the queue's bound does "
        "not hold it back (QUEUE_TIME_LIMIT)",
    )
    model_name = models.CharField(max_length=100, blank=True)
    sim_duration_minutes = models.PositiveIntegerField(null=True, blank=True)

    state = models.CharField(
        max_length=12, choices=State.choices, default=State.PENDING, db_index=True
    )
    pending_code = models.CharField(max_length=24, blank=True)
    pending_message = models.TextField(blank=True)
    pending_details = models.JSONField(default=dict, blank=True)
    pending_remedy = models.TextField(blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)

    preemption_count = models.PositiveSmallIntegerField(default=0)
    retry_count = models.PositiveSmallIntegerField(default=0)
    progress_seconds = models.FloatField(default=0)
    run_start_progress_seconds = models.FloatField(
        default=0,
        help_text="the progress the current run started from (its checkpoint's): with "
        "started_at, when the run is predicted to end; progress_seconds moves on as it runs",
    )
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    preempt_deadline = models.DateTimeField(null=True, blank=True)
    preempted_for = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    attempt = models.PositiveIntegerField(default=0, help_text="runs launched so far")
    backend_ref = models.CharField(max_length=100, blank=True, db_index=True)
    stop_reason = models.CharField(
        max_length=16, blank=True, help_text="why a requested stop happened: preemption, drain..."
    )
    move_to_node = models.CharField(
        max_length=64, blank=True,
        help_text="moved (#19): the node where the scheduler keeps room for its restart",
    )  # fmt: skip
    failure_reason = models.TextField(blank=True)
    launch_attempts = models.PositiveIntegerField(
        default=0, help_text="launches that failed transiently in a row (cleared at start)"
    )
    launch_first_failed_at = models.DateTimeField(null=True, blank=True, help_text="cluster time")
    launch_last_failed_at = models.DateTimeField(null=True, blank=True, help_text="cluster time")
    launch_error = models.TextField(blank=True, help_text="the backend's words, last failure")
    after = models.ManyToManyField(
        "self", symmetrical=False, blank=True, related_name="dependents",
        help_text="jobs that must succeed (or end, or end without succeeding: after_condition) "
        "before this one may start (Slurm's afterok, afterany, afternotok)",
    )  # fmt: skip
    after_arrays = models.ManyToManyField(
        JobArray, blank=True, related_name="dependents",
        help_text="arrays every task of which must succeed (or end, or end with one at least "
        "not succeeded: after_condition) before this one may start (Slurm's afterok, afterany, "
        "afternotok on an array job)",
    )  # fmt: skip

    after_condition = models.CharField(
        max_length=9, choices=AfterCondition.choices, default=AfterCondition.SUCCEEDED,
        help_text="what every job of after and task of after_arrays must have done first",
    )  # fmt: skip
    singleton = models.BooleanField(
        default=False,
        help_text="one at a time by name (Slurm's singleton): made at submission to wait for "
        "its owner's older active jobs of the same name to end",
    )
    # A hold (Slurm's ``scontrol hold``, ``scheduling.holds``): set, the job is not the
    # engine's (a running one is suspended first); ``released_at`` is when the last hold was
    # released, and its wait counts from then. Written only by ``scheduling.hold_services``.
    held_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+", help_text="who holds it (none: not held, or their account is gone)",
    )  # fmt: skip
    held_at = models.DateTimeField(
        null=True, blank=True, help_text="cluster time; set: the job is held"
    )
    hold_reason = models.CharField(max_length=300, blank=True)
    hold_kind = models.CharField(
        max_length=8, blank=True, choices=[("user", "user"), ("admin", "admin")],
        help_text="user: its owner, team lead or an admin may release it; admin: admins only",
    )  # fmt: skip
    released_at = models.DateTimeField(
        null=True, blank=True,
        help_text="cluster time its last hold was released, or its earliest start cleared "
        "(scheduling.begin_time_services): its wait counts from then",
    )  # fmt: skip
    # A task of a job array (``JobArray``): its array and index, both or neither, never changed.
    array = models.ForeignKey(
        JobArray, on_delete=models.PROTECT, null=True, blank=True, related_name="tasks"
    )
    array_index = models.PositiveIntegerField(null=True, blank=True)

    submitted_at = clock.ClusterTimeField(
        auto_now_add=True, db_index=True, help_text="cluster time"
    )
    started_at = models.DateTimeField(null=True, blank=True, help_text="cluster time")
    finished_at = models.DateTimeField(null=True, blank=True, help_text="cluster time")
    updated_at = clock.ClusterTimeField(auto_now=True, help_text="cluster time")

    objects = clock.ClockManager()  # a bulk insert reads the cluster clock once

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "queue"]),
            # who may see a job (its queue's line, or its owner) and its state: a list's
            # COUNT(*) reads this index alone (docs/benchmarks.md, "A year of history")
            models.Index(fields=["queue", "owner", "state"]),
            # the runtime predictor's history, the newest successful runs first
            # (``scheduling.prediction.load_history``): read once a minute, not sorted
            models.Index(
                fields=["-finished_at"],
                condition=Q(state="succeeded"),
                name="job_succeeded_newest_idx",
            ),
            # the few jobs on hold: the cycle's suspensions (``stops.jobs_to_move``) and the
            # lists' ``held`` filter read them without scanning every running job
            models.Index(
                fields=["held_at"], condition=Q(held_at__isnull=False), name="job_held_idx"
            ),
            # a person's active jobs (the bound on them, ``services.check_active_jobs``, every
            # submission): the few active rows, not a year of their finished ones
            models.Index(
                fields=["owner"],
                condition=Q(state__in=["pending", "running", "preempting"]),
                name="job_active_owner_idx",
            ),
            # the loop's sweep of the jobs waiting for others' failure (``after_condition``
            # ``failed``, few): without it each read of them walked every active job
            models.Index(
                fields=["state"],
                condition=Q(after_condition="failed"),
                name="job_after_failure_idx",
            ),  # fmt: skip
            # the lists' ``name`` filter (all of a run's parts, ``squeue --name``)
            models.Index(fields=["name"], name="job_name_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=1), name="job_gpus_positive"),
            models.CheckConstraint(
                condition=Q(gpus_per_node__isnull=True)
                | (Q(gpus_per_node__gte=1) & Q(gpus_per_node__lte=MAX_GPUS_PER_NODE)),
                name="job_gpus_per_node_1_to_8",
            ),
            models.CheckConstraint(
                condition=Q(max_retries__lte=10), name="job_max_retries_at_most_10"
            ),
            models.CheckConstraint(
                condition=Q(checkpoint_interval_minutes__gte=1),
                name="job_checkpoint_interval_positive",
            ),
            models.CheckConstraint(
                condition=Q(progress_seconds__gte=0), name="job_progress_nonnegative"
            ),
            models.CheckConstraint(
                condition=Q(time_limit_minutes__isnull=True) | Q(time_limit_minutes__gte=1),
                name="job_time_limit_positive",
            ),
            models.CheckConstraint(
                condition=Q(launch_attempts=0)
                | (
                    Q(launch_first_failed_at__isnull=False) & Q(launch_last_failed_at__isnull=False)
                ),
                name="job_launch_streak_has_times",
            ),
            models.CheckConstraint(
                condition=(Q(held_at__isnull=True) & Q(hold_kind=""))
                | (Q(held_at__isnull=False) & Q(hold_kind__in=["user", "admin"])),
                name="job_hold_has_time_and_kind",
            ),
            models.CheckConstraint(
                condition=Q(array__isnull=True, array_index__isnull=True)
                | Q(array__isnull=False, array_index__isnull=False),
                name="job_array_task_has_index",
            ),
            models.UniqueConstraint(fields=["array", "array_index"], name="job_array_index_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE_STATES

    @property
    def time_limit_at(self) -> datetime | None:
        """When its run on now reaches the time limit (``started_at`` + ``time_limit_minutes``,
        cluster time): None without a limit or a run on."""
        on = self.state in (self.State.RUNNING, self.State.PREEMPTING)
        if not (on and self.started_at and self.time_limit_minutes):
            return None
        return self.started_at + timedelta(minutes=self.time_limit_minutes)

    def progress_at(self, now: datetime) -> float:
        """Seconds of work done by ``now`` (cluster time). A run that is on (running, or
        stopping at a checkpoint) has done the progress it started from plus the time it
        has run; ``progress_seconds`` is the backend's last reading, written when a
        checkpoint lands or every 5 minutes of work (``cycle.reconcile``), so on its own it
        lags: a page read "Started 16:08" and "Progress so far 29 min" at 16:45. Otherwise
        the progress kept."""
        if self.state not in (self.State.RUNNING, self.State.PREEMPTING) or not self.started_at:
            return self.progress_seconds
        ran = max(0.0, (now - self.started_at).total_seconds())
        return max(self.progress_seconds, self.run_start_progress_seconds + ran)

    @property
    def progress_label(self) -> str:
        """What ``progress_seconds`` is, in the job page's words (static/js/pages/
        jobs_detail.js says the same): "so far" while a run is on, "made" once it was
        cancelled or failed (the work since its last checkpoint is lost: the last reading,
        not what a resumed job would keep; page walk: a cancelled job read "Progress kept 2 h
        22 min" with 21 min of it lost), "kept" otherwise (waiting again with what its
        checkpoint saved, or done)."""
        if self.state in (self.State.RUNNING, self.State.PREEMPTING):
            return "Progress so far"
        if self.state in (self.State.CANCELLED, self.State.FAILED):
            return "Progress made"
        return "Progress kept"


class Allocation(models.Model):
    """One GPU of one node held by one job. Unique per (node, gpu_index)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    gpu_index = models.PositiveSmallIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "gpu_index"], name="one_job_per_gpu"),
            models.CheckConstraint(
                condition=Q(gpu_index__lt=MAX_GPUS_PER_NODE), name="allocation_gpu_index_0_to_7"
            ),
        ]


class JobRun(models.Model):
    """One ended run of a job on the cluster: who used how many GPUs, from when to when.

    Written by the loop when the run's GPUs are freed (``cycle.finished.finish_runs`` and
    ``cycle.reconcile.release_cancelled``): the accounting the usage report sums (GPU-hours
    per line, queue and person, as Slurm's ``sreport``). A run still going is read from its
    job (``started_at``, ``gpus``) until it ends. The owner, queue and size are copied from
    the job, so the report is unchanged if a job is deleted (``job`` becomes null); the
    retention rules (``portal.retention``) keep runs. Times are cluster time."""

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed (no retry left)"
        RETRIED = "retried", "failed, retried"
        STOPPED = "stopped", "stopped and requeued (preempted, moved, drained or suspended)"
        CANCELLED = "cancelled", "cancelled"

    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, related_name="runs")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_runs"
    )
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="job_runs")
    gpus = models.PositiveIntegerField()
    gpu_model = models.CharField(max_length=40, blank=True)
    # both indexed: a month's runs are those that started before its end and ended after
    # its start, the two ranges PostgreSQL intersects (a bitmap AND) however long ago
    started_at = models.DateTimeField(db_index=True, help_text="cluster time")
    ended_at = models.DateTimeField(db_index=True, help_text="cluster time")
    outcome = models.CharField(max_length=12, choices=Outcome.choices)

    class Meta:
        ordering = ["ended_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ended_at__gte=models.F("started_at")), name="run_ends_after_start"
            ),
        ]

    def __str__(self) -> str:
        return f"run of job {self.job_id} ({self.outcome})"


class JobEvent(models.Model):
    """One line of a job's timeline (submitted, started, preempted, checkpointed, retried...)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = clock.ClusterTimeField(auto_now_add=True, help_text="cluster time")
    kind = models.CharField(max_length=32)
    message = models.TextField()

    objects = clock.ClockManager()  # a bulk insert reads the cluster clock once

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"])]

    def __str__(self) -> str:
        return f"{self.kind} (event #{self.pk})"


class JobMail(models.TextChoices):
    """What a person may ask to be mailed about their jobs (``JobMailPreference.kinds``);
    ``JOB_MAIL_EVENTS`` names the timeline kinds (``JobEvent.kind``) each one covers."""

    STARTED = "started", "started"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    PREEMPTED = "preempted", "preempted, requeued or moved"
    CANCELLED = "cancelled", "cancelled by someone else"


JOB_MAIL_EVENTS: dict[str, tuple[str, ...]] = {
    JobMail.STARTED: ("started",),
    JobMail.SUCCEEDED: ("succeeded",),
    JobMail.FAILED: ("failed",),
    # a run stopped and the job went back in the queue: preempted (asked to stop),
    # requeued (stopped, progress kept), moved (consolidation), retried (a failed run),
    # suspended (held while it ran: only when someone else held it, ``job_mail``)
    JobMail.PREEMPTED: ("preempted", "requeued", "moved", "retried", "suspended"),
    # only when someone else cancelled it (``cancel_job`` writes "cancelled by <name>")
    JobMail.CANCELLED: ("cancelled",),
}


class JobMailPreference(models.Model):
    """Which of a person's own jobs' timeline events are mailed to them (``kinds``, of
    ``JobMail``; empty: none, the default) and how far they were read (``last_event_id``).

    Invariants: ``kinds`` holds only ``JobMail`` values, written by
    ``scheduling.job_mail.set_job_mail_preference`` (the account page) and nothing else;
    ``last_event_id`` only grows, and every ``JobEvent`` at or below it is either mailed
    or not to be (it is set to the newest event id when mail is turned on, so nothing
    from before is mailed, and advanced by ``send_job_digests`` in the transaction that
    queues the mail). No row: nothing is mailed.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="job_mail"
    )
    kinds = models.JSONField(default=list, blank=True, help_text="JobMail values; empty: off")
    last_event_id = models.BigIntegerField(
        default=0, help_text="the highest JobEvent id read for this person (the watermark)"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"job mail of {self.user}: {', '.join(self.kinds) or 'off'}"


class ClusterSettings(models.Model):
    """The one row of cluster-wide settings the demo and the loop read.

    ``workload_enabled`` turns the simulator's demo workload generator on;
    ``seed`` makes the simulated cluster and its workload reproducible.
    """

    singleton = models.BooleanField(default=True, unique=True, editable=False)
    workload_enabled = models.BooleanField(default=True)
    seed = models.IntegerField(default=0)
    workload_minute = models.BigIntegerField(
        null=True, blank=True, help_text="last cluster-time minute the demo workload generated"
    )

    @classmethod
    def load(cls) -> ClusterSettings:
        obj, _ = cls.objects.get_or_create(singleton=True)
        return obj


class JSONTextField(models.JSONField):
    """A JSON value kept as ``text`` (not ``jsonb``): read and written as JSON like any
    ``JSONField``, but PostgreSQL neither parses nor re-renders it, and nothing queries
    into it.

    For a large document written whole and read whole (the simulator's 0.7 MB state at
    10,000 GPUs, saved every cycle): parsing it into ``jsonb`` and compressing that took
    most of the save (55 -> 6 ms as lz4-compressed text, measured in ``docs/benchmarks.md``).
    """

    def db_type(self, connection: Any) -> str:
        return "text"

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> str | None:
        """The value as JSON text (SQL NULL for None, as ``JSONField`` stores it)."""
        if value is None:
            return None
        return json.dumps(value if prepared else self.get_prep_value(value), cls=self.encoder)


class SimulatorState(models.Model):
    """The simulated cluster's whole state (``Simulator.to_dict``), so it survives restarts.

    The virtual clock runs ``speed`` times faster than the wall clock: at wall
    time ``saved_wall`` it read ``virtual_now``. Locked (``select_for_update``)
    by the one cycle that advances it.
    """

    singleton = models.BooleanField(default=True, unique=True, editable=False)
    # JSON as lz4-compressed text where the server has lz4 (migration 0005).
    state = JSONTextField()
    virtual_now = models.FloatField()
    saved_wall = models.FloatField()
    speed = models.FloatField(default=60.0)
    # Wall clock on purpose, like ``saved_wall``: when the row was written, read by no one.
    updated_at = models.DateTimeField(auto_now=True)


class SchedulingCycle(models.Model):
    """One iteration of the loop: what it did, how long it took, what went wrong."""

    kind = models.CharField(max_length=16, default="cycle", help_text="cycle or sweep")
    # Wall clock on purpose: the loop's heartbeat (``/readyz`` compares it with the wall
    # clock); ``cluster_time`` is when the iteration happened on the cluster (shown).
    started_at = models.DateTimeField(default=timezone.now, db_index=True, help_text="wall clock")
    cluster_time = models.DateTimeField(help_text="cluster time")
    duration_ms = models.FloatField()
    observe_ms = models.FloatField(default=0)
    plan_ms = models.FloatField(default=0)
    apply_ms = models.FloatField(default=0)
    starts = models.PositiveIntegerField(default=0)
    preemptions = models.PositiveIntegerField(default=0)
    finished = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    requeued = models.PositiveIntegerField(default=0)
    pending = models.PositiveIntegerField(default=0)
    pending_by_reason = models.JSONField(default=dict)
    violations = models.JSONField(default=list)
    errors = models.JSONField(default=list)
    drift = models.JSONField(default=list)

    class Meta:
        ordering = ["-started_at", "-id"]


# ``Job.stop_reason`` and ``Eviction.reason`` of a job moved by consolidation (#19): it
# checkpoints and restarts elsewhere to make room for a gang. Not an eviction: it does not
# count towards demotion, the eviction ratio nor ``gpuportal_preemptions_total``.
CONSOLIDATION = "consolidate"
# Eviction.reason of a stop for online inference (traffic took a shared node's GPUs back).
INFERENCE_STOP = "inference"


class Eviction(models.Model):
    """A running job stopped to make room (preemption, inference yield) for R4's ratio.

    ``gpu_seconds`` is the GPU time the evicted run had been given; ``lost_gpu_seconds``
    the part of it not saved by a checkpoint. A row with ``reason`` ``CONSOLIDATION`` is a
    migration (consolidation): kept to count migrations per window, left out of the ratio.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="evictions")
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="evictions")
    at = models.DateTimeField(db_index=True)
    reason = models.CharField(max_length=16)
    gpus = models.PositiveIntegerField()
    gpu_seconds = models.FloatField()
    lost_gpu_seconds = models.FloatField(default=0)

    class Meta:
        ordering = ["-at"]
