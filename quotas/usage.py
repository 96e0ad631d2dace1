"""GPU-hours used per business line, queue and person over a period: the usage report.

Summed from the runs the loop recorded when their GPUs were freed (``JobRun``) and the
runs still going (their jobs' ``started_at`` and size), each clipped to the period, so a
run that straddles the period's edge counts only its part inside. What a viewer sees is
what they see of jobs (``list_jobs_for_user``): on-call and admins everything, others
their lines' and their own. Reads only; all times are cluster time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    Min,
    Q,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Greatest, Least

from core.roles import line_ids_query, role_of
from quotas.ledger import quota_gpu_seconds
from quotas.models import BusinessLine, Queue, QuotaChange
from scheduling.models import Allocation, Job, JobRun, Node
from scheduling.permissions import sees_all_jobs

# A run that ended this way was work lost (the job failed, or will run it again).
WASTED = (JobRun.Outcome.FAILED, JobRun.Outcome.RETRIED)
HELD_STATES = (Job.State.RUNNING, Job.State.PREEMPTING)


@dataclass
class UsageRow:
    """One line, queue or person: GPU-hours in the period and what became of them."""

    key: Any
    name: str
    gpu_hours: float = 0.0
    runs: int = 0
    running: int = 0
    wasted_gpu_hours: float = 0.0  # runs that failed (retried or not)
    stopped_gpu_hours: float = 0.0  # runs stopped to make room, move, drain or suspend (requeued)
    percent: float | None = None  # of the cluster's GPU-hours in the period (``Usage``)
    quota_gpu_hours: float | None = None  # the quota held over the period (lines, queues)

    @property
    def of_quota_percent(self) -> float | None:
        """GPU-hours as a share of the quota's GPU-hours (beyond 100%: borrowed)."""
        return self.gpu_hours / self.quota_gpu_hours * 100 if self.quota_gpu_hours else None

    def add(self, hours: float, runs: int, outcome: str | None) -> None:
        self.gpu_hours += hours
        if outcome is None:
            self.running += runs
        else:
            self.runs += runs
        if outcome in WASTED:
            self.wasted_gpu_hours += hours
        elif outcome == JobRun.Outcome.STOPPED:
            self.stopped_gpu_hours += hours


@dataclass
class Usage:
    """The report of one period: totals, and rows per line, queue and person (largest
    first). ``counted_from``: the period's start, or when the cluster's known runs begin if
    later (a cluster that began inside the period: ``runs_begin``). ``capacity_gpu_hours``:
    the cluster's GPU-hours from ``counted_from`` to ``until``, each node's from when it
    joined (``capacity_gpu_seconds``; the share a row's hours are of it; the quotas' hours
    are over the same span).
    ``recorded_since``: set when runs ended in the period before the portal recorded any
    (it records them since the upgrade that brought the report): the first recorded run's
    end, before which runs are missing."""

    start: datetime
    end: datetime
    until: datetime  # the end, or now when the period has not ended
    total: UsageRow
    lines: list[UsageRow] = field(default_factory=list)
    queues: list[UsageRow] = field(default_factory=list)
    people: list[UsageRow] = field(default_factory=list)
    capacity_gpu_hours: float = 0.0
    recorded_since: datetime | None = None
    counted_from: datetime | None = None

    def share(self, row: UsageRow) -> float | None:
        return row.gpu_hours / self.capacity_gpu_hours if self.capacity_gpu_hours else None


class Seconds(Func):
    """``EXTRACT(EPOCH FROM <interval>)``: a duration in seconds (PostgreSQL, the portal's
    database), so a sum of GPU-seconds is one aggregate."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)"
    output_field = FloatField()


def _gpu_seconds(start: datetime, until: datetime, ended: Any) -> Any:
    """A run's GPUs times its part inside ``[start, until)``, in seconds (SQL)."""
    inside = ExpressionWrapper(
        Least(ended, Value(until, output_field=DateTimeField()))
        - Greatest(F("started_at"), Value(start, output_field=DateTimeField())),
        output_field=DurationField(),
    )
    return Sum(F("gpus") * Seconds(inside), output_field=FloatField())


def capacity_gpu_seconds(start: datetime, until: datetime) -> float:
    """The cluster's GPU-seconds over ``[start, until)``: each node's GPUs from when the loop
    discovered it (``Node.joined_at``; a node the portal was set up with, from ``start``),
    so a cluster that grew in the month is not counted at its new size for all of it. One
    aggregate."""
    begin = Value(start, output_field=DateTimeField())
    since = Greatest(Coalesce(F("joined_at"), begin), begin)
    inside = ExpressionWrapper(Value(until, output_field=DateTimeField()) - since,
                               output_field=DurationField())  # fmt: skip
    total = Node.objects.filter(Q(joined_at__isnull=True) | Q(joined_at__lt=until)).aggregate(
        s=Sum(F("gpus_total") * Seconds(inside), output_field=FloatField())
    )["s"]
    return max(0.0, total or 0.0)


def _visible(user: Any, query: Any, line_path: str) -> Any:
    if sees_all_jobs(user):
        return query
    if role_of(user) is None:
        return query.none()
    lines = {f"{line_path}__in": line_ids_query(user)}
    return query.filter(Q(owner=user) | Q(**lines))


def build_usage_report(user: Any, start: datetime, end: datetime, now: datetime) -> Usage:
    """GPU-hours of the runs ``user`` may see inside ``[start, end)``, cut at ``now``."""
    until = min(end, now)
    usage = Usage(start=start, end=end, until=until, total=UsageRow(None, "all"))
    if until <= start:
        return usage
    ended = (
        _visible(user, JobRun.objects.all(), "queue__business_line_id")
        .filter(started_at__lt=until, ended_at__gt=start)
        .values("queue_id", "owner_id", "outcome")
        .annotate(gpu_s=_gpu_seconds(start, until, F("ended_at")), n=Count("id"))
        .order_by()
    )
    going = (
        _visible(user, Job.objects.all(), "queue__business_line_id")
        .filter(
            Q(state__in=HELD_STATES)
            | Q(state=Job.State.CANCELLED, pk__in=Allocation.objects.values("job_id"))
        )  # a cancelled job holds its GPUs until its run has ended
        .filter(started_at__lt=until)
        .values("queue_id", "owner_id")
        .annotate(
            gpu_s=_gpu_seconds(start, until, Value(until, output_field=DateTimeField())),
            n=Count("id"),
        )
        .order_by()
    )
    pieces = [(r, r["outcome"]) for r in ended] + [(r, None) for r in going]
    _add_rows(usage, [(r["queue_id"], r["owner_id"], max(0.0, r["gpu_s"] or 0) / 3600, r["n"], o)
                      for r, o in pieces])  # fmt: skip
    usage.recorded_since = _missing_before(start, until)
    begin = None if usage.recorded_since is not None else runs_begin()
    usage.counted_from = counted = min(until, max(start, begin or start))
    _add_quotas(usage, counted, until)
    usage.capacity_gpu_hours = capacity_gpu_seconds(counted, until) / 3600
    for row in (usage.total, *usage.lines, *usage.queues, *usage.people):
        row.percent = usage.share(row) * 100 if usage.capacity_gpu_hours else None
    return usage


def runs_begin() -> datetime | None:
    """When the cluster's known runs begin: the earliest start of a recorded run or of a
    run still going (None: no run yet). Every run since is in the report."""
    recorded = JobRun.objects.aggregate(at=Min("started_at"))["at"]
    going = Job.objects.filter(state__in=HELD_STATES).aggregate(at=Min("started_at"))["at"]
    return min((t for t in (recorded, going) if t is not None), default=None)


def _missing_before(start: datetime, until: datetime) -> datetime | None:
    """The first recorded run's end (``until`` when none is recorded yet) if a run ended
    inside ``[start, until)`` before it: such a run has no record (any job with a recorded
    run finished after its end), so the report misses it; else None."""
    first = JobRun.objects.aggregate(at=Min("ended_at"))["at"]
    cut = until if first is None else min(first, until)
    ran_before = Job.objects.filter(
        started_at__isnull=False, finished_at__gt=start, finished_at__lt=cut
    )
    return cut if ran_before.exists() else None


def _add_rows(usage: Usage, pieces: Iterable[tuple[int, int, float, int, str | None]]) -> None:
    from django.contrib.auth import get_user_model

    pieces = list(pieces)
    queues = Queue.objects.select_related("business_line").in_bulk({p[0] for p in pieces})
    people = get_user_model().objects.in_bulk({p[1] for p in pieces})
    by_line: dict[int, UsageRow] = {}
    by_queue: dict[int, UsageRow] = {}
    by_owner: dict[int, UsageRow] = defaultdict(lambda: UsageRow(None, ""))
    for queue_id, owner_id, hours, n, outcome in pieces:
        queue = queues[queue_id]
        line = queue.business_line
        rows = (
            by_line.setdefault(line.pk, UsageRow(line.name, line.display_name)),
            by_queue.setdefault(queue_id, UsageRow(queue.name, queue.name)),
            by_owner.setdefault(owner_id, UsageRow(owner_id, people[owner_id].get_username())),
            usage.total,
        )
        for row in rows:
            row.add(hours, n, outcome)
    largest = lambda rows: sorted(rows, key=lambda r: (-r.gpu_hours, r.name))  # noqa: E731
    usage.lines = largest(by_line.values())
    usage.queues = largest(by_queue.values())
    usage.people = largest(by_owner.values())


def _add_quotas(usage: Usage, start: datetime, until: datetime) -> None:
    """Each line's and queue's quota over the period (``ledger.quota_gpu_seconds``), from
    its quota now and its contract's changes since ``start``."""
    lines = {row.key: row for row in usage.lines}
    queues = {row.key: row for row in usage.queues}
    if not lines:
        return
    changes: dict[tuple[str, str | None], list] = defaultdict(list)
    for line, queue, at, before, after in (
        QuotaChange.objects.filter(business_line__name__in=lines, changed_at__gt=start)
        .order_by("changed_at", "id")
        .values_list("business_line__name", "queue__name", "changed_at", "quota_before",
                     "quota_after")
    ):  # fmt: skip
        changes[(line, queue)].append((at.timestamp(), before, after))
    now = dict(BusinessLine.objects.filter(name__in=lines).values_list("name", "quota_gpus"))
    scopes = [((name, None), row, now[name]) for name, row in lines.items()]
    for queue in Queue.objects.filter(name__in=queues).select_related("business_line"):
        scopes.append(
            ((queue.business_line.name, queue.name), queues[queue.name], queue.quota_gpus)
        )
    for key, row, quota in scopes:
        seconds = quota_gpu_seconds(quota, changes[key], start.timestamp(), until.timestamp())
        row.quota_gpu_hours = None if seconds is None else seconds / 3600
