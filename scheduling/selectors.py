"""Reads of scheduling data, scoped to the user asking (node reads: ``scheduling.nodes.selectors``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.postgres.aggregates import ArrayAgg
from django.db import connection
from django.db.models import BooleanField, Count, Exists, OuterRef, Q, QuerySet, Sum, Value

from core.roles import line_ids_query, role_of
from quotas.models import Queue
from scheduling.arrays import ARRAY_LIMIT_CODE
from scheduling.dependencies import DEPENDENCY_CODE
from scheduling.engine.accounting import borrowed_gpus
from scheduling.models import Allocation, Job, JobArray, JobMail, JobMailPreference, Node
from scheduling.permissions import sees_all_jobs, submits_to_any_queue


def _seen_by(user, qs: QuerySet) -> QuerySet:
    """``qs`` (jobs or job arrays: an ``owner`` and a ``queue`` each) narrowed to what
    ``user`` sees: admins and on-call everything, others their own and those of their
    lines' queues, nobody without a role nothing."""
    qs = qs.select_related("queue", "queue__business_line", "owner")
    if sees_all_jobs(user):
        return qs
    if role_of(user) is None:
        return qs.none()
    # the queues' ids as a subquery, not a join: with the (queue, owner, state) index a
    # list's COUNT(*) is an index-only scan (docs/benchmarks.md, "A year of history")
    their_queues = Queue.objects.filter(business_line_id__in=line_ids_query(user)).values("id")
    return qs.filter(Q(owner=user) | Q(queue_id__in=their_queues))


def list_jobs_for_user(user) -> QuerySet[Job]:
    """Admins and on-call see every job; others see the jobs of their lines' queues."""
    return _seen_by(user, Job.objects.all())


def list_arrays_for_user(user) -> QuerySet[JobArray]:
    """The job arrays whose tasks ``user`` sees (``list_jobs_for_user``'s rule)."""
    return _seen_by(user, JobArray.objects.all())


@dataclass(frozen=True)
class ArrayProgress:
    """Where an array's tasks stand: how many in each state (every state, zeros included),
    how many are held back by its bound (``ARRAY_LIMIT``) and the GPUs its tasks hold."""

    by_state: dict[str, int]
    held_back: int
    gpus_held: int

    @property
    def active(self) -> int:
        return sum(self.by_state[s] for s in Job.ACTIVE_STATES)


def _progress_aggregates(path: str = "") -> dict[str, Any]:
    """The aggregates of ``ArrayProgress`` over an array's tasks, reached by ``path`` (``""``
    from the tasks themselves, ``"tasks__"`` from the arrays): one count per state, the
    tasks held back by the bound (``ARRAY_LIMIT``) and the GPUs held (running or
    checkpointing to stop)."""
    state, pk = f"{path}state", f"{path}pk"
    holding = Q(**{f"{state}__in": (Job.State.RUNNING, Job.State.PREEMPTING)})
    held_back = Q(**{state: Job.State.PENDING, f"{path}pending_code": ARRAY_LIMIT_CODE})
    return {
        **{f"progress_{s}": Count(pk, filter=Q(**{state: s})) for s in Job.State.values},
        "progress_held_back": Count(pk, filter=held_back),
        "progress_gpus": Sum(f"{path}gpus", filter=holding, default=0),
    }


def _progress_of(counts: Any) -> ArrayProgress:
    """``ArrayProgress`` out of ``_progress_aggregates``' values (a dict or an annotated row)."""
    get = counts.get if isinstance(counts, dict) else lambda name: getattr(counts, name)
    return ArrayProgress(
        by_state={s: get(f"progress_{s}") for s in Job.State.values},
        held_back=get("progress_held_back"),
        gpus_held=get("progress_gpus"),
    )


def array_progress(array: JobArray) -> ArrayProgress:
    """One query: the array's tasks counted by state, by ``ARRAY_LIMIT`` and their GPUs held
    (running or checkpointing to stop)."""
    return _progress_of(Job.objects.filter(array=array).aggregate(**_progress_aggregates()))


def arrays_with_progress(qs: QuerySet[JobArray]) -> QuerySet[JobArray]:
    """``qs`` with each array's progress (``annotated_progress``) and ``task_ids`` (its tasks'
    job ids in index order) in the same query: a page of arrays is one query. Newest first
    (a grouped query ignores ``Meta.ordering``: it is given again)."""
    return qs.annotate(
        **_progress_aggregates("tasks__"),
        task_ids=ArrayAgg("tasks__pk", order_by="tasks__array_index"),
    ).order_by(*JobArray._meta.ordering)


def annotated_progress(array: JobArray) -> ArrayProgress:
    """The progress ``arrays_with_progress`` annotated ``array`` with (no query)."""
    return _progress_of(array)


def held_filter(held: bool) -> Q:
    """Jobs on hold (``scheduling.holds``: active and held), or (``held`` False) the others:
    the job lists' ``held`` filter. A hold left on a job that ended holds nothing."""
    on_hold = Q(held_at__isnull=False, state__in=Job.ACTIVE_STATES)
    return on_hold if held else ~on_hold


def get_job_for_user(user, job_id: int) -> Job | None:
    return list_jobs_for_user(user).filter(pk=job_id).first()


def visible_job_ids(user, job_ids: Iterable[int]) -> set[int]:
    """Those of ``job_ids`` the user may see (``list_jobs_for_user``)."""
    return _visible_ids(list_jobs_for_user, user, job_ids)


def visible_array_ids(user, array_ids: Iterable[int]) -> set[int]:
    """Those of ``array_ids`` the user may see (``list_arrays_for_user``)."""
    return _visible_ids(list_arrays_for_user, user, array_ids)


def _visible_ids(rows: Any, user: Any, ids: Iterable[int]) -> set[int]:
    """Those of ``ids`` among ``rows(user)``: one query, none when there is nothing to ask."""
    asked = set(ids)
    if not asked:
        return set()
    return set(rows(user).filter(pk__in=asked).values_list("pk", flat=True))


@dataclass(frozen=True)
class LinkedJob:
    """A job another one starts after, or waits for it, as ``user`` may see it: its name
    and state only if they may view that job (``name`` None: they may not; its id alone).
    ``after_condition``: of a job waiting for another or for an array, what it waits for
    them to have done (``Job.AfterCondition``: succeeded, ended, or failed); None where not read."""

    id: int
    name: str | None = None
    state: str | None = None
    after_condition: str | None = None
    index: int | None = None  # a task of an array: its index (named ``train [3]``)

    @property
    def title(self) -> str | None:
        """Its name as the job list shows it (a task: ``train [3]``); None where not seen."""
        if self.name is None or self.index is None:
            return self.name
        return f"{self.name} [{self.index}]"


def by_condition(jobs: list[LinkedJob]) -> list[tuple[str, list[LinkedJob]]]:
    """Jobs waiting for a job or an array by their ``after_condition``, those waiting for
    its success first: ``[("succeeded", [...]), ("ended", [...])]``, a condition no job has
    left out, each list in ``jobs``' order (no query)."""
    return [
        (condition, group)
        for condition in Job.AfterCondition.values
        if (group := [j for j in jobs if j.after_condition == condition])
    ]


@dataclass(frozen=True)
class LinkedArray:
    """An array a job starts after as a whole (``Job.after_arrays``), as ``user`` may see
    it: its name and how many of its tasks succeeded (``ended``: succeeded, failed or were
    cancelled) only if they may view the array (``name`` None: they may not; its id alone)."""

    id: int
    name: str | None = None
    succeeded: int | None = None
    size: int | None = None
    ended: int | None = None


@dataclass(frozen=True)
class Pipeline:
    """What a job's page says of its dependencies, as ``user`` may see them, each in id
    order: the jobs it starts after (``Job.after``), the arrays every task of which it
    starts after (``Job.after_arrays``) and the jobs waiting for it."""

    starts_after: list[LinkedJob]
    starts_after_arrays: list[LinkedArray]
    waited_for_by: list[LinkedJob]

    @property
    def waiting_by_condition(self) -> list[tuple[str, list[LinkedJob]]]:
        """``waited_for_by`` by what each waits for it to do (``by_condition``)."""
        return by_condition(self.waited_for_by)


def list_linked_jobs(user, job: Job) -> Pipeline:
    """``job``'s pipeline for its page: every job and array it starts after (by id alone
    where ``user`` may not see it) and the jobs waiting for it that ``user`` may see. Two
    queries (its links of both kinds at once, and the jobs waiting for it), one more with
    a job it starts after and one more with an array (``list_linked_arrays``)."""
    links = (
        Job.after.through.objects.filter(from_job=job)
        .values_list("to_job_id", Value(False, output_field=BooleanField()))
        .union(
            Job.after_arrays.through.objects.filter(job=job).values_list(
                "jobarray_id", Value(True, output_field=BooleanField())
            ),
            all=True,
        )
    )
    after: list[int] = []
    arrays: list[int] = []
    for pk, is_array in links:
        (arrays if is_array else after).append(pk)
    after.sort()
    seen = dict.fromkeys(after)
    if after:
        visible = list_jobs_for_user(user).filter(pk__in=after).order_by()
        seen.update(
            (pk, {"name": name, "state": state, "index": index})
            for pk, name, state, index in visible.values_list("pk", "name", "state", "array_index")
        )
    dependents = list_jobs_for_user(user).filter(after=job).order_by("pk")
    return Pipeline(
        starts_after=[LinkedJob(pk, **(seen[pk] or {})) for pk in after],
        starts_after_arrays=list_linked_arrays(user, arrays) if arrays else [],
        waited_for_by=[
            LinkedJob(*row)
            for row in dependents.values_list(
                "pk", "name", "state", "after_condition", "array_index"
            )
        ],
    )


def list_linked_arrays(user, array_ids: Iterable[int]) -> list[LinkedArray]:
    """The arrays of ``array_ids`` (those a job starts after as a whole), in id order, each
    with how many of its tasks succeeded and ended where ``user`` may see it
    (``list_arrays_for_user``), by id alone where not. One query: the arrays, their
    succeeded and ended tasks counted and whether the viewer sees each, together."""
    rows = (
        JobArray.objects.filter(pk__in=list(array_ids))
        .annotate(
            succeeded=Count("tasks", filter=Q(tasks__state=Job.State.SUCCEEDED)),
            ended=Count("tasks", filter=Q(tasks__state__in=Job.TERMINAL_STATES)),
            visible=Exists(list_arrays_for_user(user).filter(pk=OuterRef("pk"))),
        )
        .order_by("pk")
        .values_list("pk", "name", "succeeded", "size", "ended", "visible")
    )
    return [
        LinkedArray(pk, name, succeeded, size, ended) if visible else LinkedArray(pk)
        for pk, name, succeeded, size, ended, visible in rows
    ]


def list_array_dependents(user, array: JobArray) -> list[tuple[str, list[LinkedJob]]]:
    """The jobs waiting for every task of ``array`` to succeed, or to end
    (``Job.after_arrays``, by their ``after_condition``: ``by_condition``) that ``user`` may
    see, each group in id order (one query)."""
    dependents = list_jobs_for_user(user).filter(after_arrays=array).order_by("pk")
    fields = ("pk", "name", "state", "after_condition", "array_index")
    return by_condition([LinkedJob(*row) for row in dependents.values_list(*fields)])


def list_queues_for_submit(user) -> QuerySet[Queue]:
    """Queues the user may submit to: admins any, others their lines' queues."""
    qs = Queue.objects.select_related("business_line").order_by("business_line__name", "name")
    if submits_to_any_queue(user):
        return qs
    return qs.filter(business_line__memberships__user=user)  # one membership per line


def cluster_shape() -> tuple[int, int]:
    """``(GPUs of the largest node, GPUs in all)``: one aggregate, read on every submission."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT max(gpus_total), sum(gpus_total) FROM {Node._meta.db_table}")
        largest, total = cursor.fetchone()
    return largest or 0, total or 0


def build_placement(job: Job) -> list[dict]:
    """``[{node, gpus: [indices], node_gpus}]`` of a job, from its allocations
    (``node_gpus``: the node's GPUs, so a page can say "all 8 GPUs" of a node used whole).

    A pending job holds no GPUs (the loop frees them when it requeues one), so it costs
    no query.
    """
    if job.state == Job.State.PENDING:
        return []
    by_node: dict[str, list[int]] = defaultdict(list)
    size: dict[str, int] = {}
    for node_name, index, total in job.allocations.values_list(
        "node__name", "gpu_index", "node__gpus_total"
    ):
        by_node[node_name].append(index)
        size[node_name] = total
    return [
        {"node": name, "gpus": sorted(idx), "node_gpus": size[name]}
        for name, idx in sorted(by_node.items())
    ]


@dataclass(frozen=True)
class QueueUsage:
    """A queue's or a business line's use now (the one computation of these numbers).

    ``used_gpus``: GPUs held by its running and checkpointing (preempting) jobs;
    ``borrowed_gpus``: the part of it beyond its own quota
    (``scheduling.engine.accounting.borrowed_gpus``: ``max(0, used - quota)``, 0 without a
    quota of its own); ``within_quota_gpus``: ``used - borrowed``; ``pending_gpus`` /
    ``pending_jobs``: what its pending jobs ask for, but those waiting for other jobs to
    succeed (``DEPENDENCY``: not demand yet, ``scheduling.dependencies``), those on hold
    (``scheduling.holds``) and an array's tasks past its bound (``ARRAY_LIMIT``,
    ``scheduling.arrays``).
    """

    used_gpus: int = 0
    borrowed_gpus: int = 0
    running_jobs: int = 0
    pending_jobs: int = 0
    pending_gpus: int = 0

    @property
    def within_quota_gpus(self) -> int:
        return self.used_gpus - self.borrowed_gpus


@dataclass(frozen=True)
class UsageNow:
    """Every queue's and line's use, read at one instant: ``queues``/``lines`` by id."""

    queues: dict[int, QueueUsage]
    lines: dict[int, QueueUsage]


_USAGE_FIELDS = ("used_gpus", "running_jobs", "pending_jobs", "pending_gpus")


def _use_by(*group: str, **where: Any) -> QuerySet:
    """The active jobs' use (``QueueUsage``'s counted fields) grouped by ``group``: one
    aggregate, the one rule for what holds GPUs and what is demand."""
    running = Q(state__in=[Job.State.RUNNING, Job.State.PREEMPTING])
    queued = (
        Q(state=Job.State.PENDING)
        & ~Q(pending_code__in=(DEPENDENCY_CODE, ARRAY_LIMIT_CODE))
        & Q(held_at__isnull=True)
    )
    return (
        Job.objects.filter(state__in=Job.ACTIVE_STATES, **where)
        .values(*group)
        .annotate(
            used_gpus=Sum("gpus", filter=running),
            running_jobs=Count("id", filter=running),
            pending_jobs=Count("id", filter=queued),
            pending_gpus=Sum("gpus", filter=queued),
        )
        .order_by()
    )


def build_usage() -> UsageNow:
    """Use of every queue and line, with borrowing against each one's own quota (two
    queries). Every page, the API, ``/metrics``, the dashboard and the approval impact
    read these numbers from here."""
    rows = {r["queue_id"]: r for r in _use_by("queue_id")}
    queues: dict[int, QueueUsage] = {}
    line_totals: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(_USAGE_FIELDS, 0))
    line_quota: dict[int, int] = {}
    for queue_id, line_id, quota, of_line in Queue.objects.values_list(
        "id", "business_line_id", "quota_gpus", "business_line__quota_gpus"
    ):
        line_quota[line_id] = of_line
        r = rows.get(queue_id, {})
        values = {f: r.get(f) or 0 for f in _USAGE_FIELDS}
        queues[queue_id] = QueueUsage(
            borrowed_gpus=borrowed_gpus(values["used_gpus"], quota), **values
        )
        totals = line_totals[line_id]
        for f in _USAGE_FIELDS:
            totals[f] += values[f]
    # a line without queues holds nothing: readers default it to QueueUsage()
    lines = {
        line_id: QueueUsage(
            borrowed_gpus=borrowed_gpus(totals["used_gpus"], line_quota[line_id]), **totals
        )
        for line_id, totals in line_totals.items()
    }
    return UsageNow(queues=queues, lines=lines)


@dataclass(frozen=True)
class PersonUse:
    """One person's use of a line now: what ``QueueUsage`` counts, for their jobs."""

    name: str
    used_gpus: int
    running_jobs: int
    pending_jobs: int
    pending_gpus: int


def people_of_line(line_id: int) -> list[PersonUse]:
    """Who holds and waits for a line's GPUs now, most GPUs held first (one query; the
    rules of ``build_usage``, so the GPUs held add up to the line's use). People whose only
    active jobs are on hold or wait for other jobs to succeed are left out: they use and ask
    for nothing."""
    people = [
        PersonUse(r["owner__username"], *(r[f] or 0 for f in _USAGE_FIELDS))
        for r in _use_by("owner__username", queue__business_line_id=line_id)
    ]
    return sorted(
        (p for p in people if p.running_jobs or p.pending_jobs),
        key=lambda p: (-p.used_gpus, -p.pending_gpus, p.name),
    )


def build_queue_usage() -> dict[int, QueueUsage]:
    """Usage per queue id (``build_usage().queues``)."""
    return build_usage().queues


def build_line_usage() -> dict[int, QueueUsage]:
    """Usage per business line id (``build_usage().lines``): its queues' use summed, and
    borrowing against the line's own quota (not the sum of its queues' borrowing)."""
    return build_usage().lines


@dataclass(frozen=True)
class ClusterSummary:
    """The cluster at a glance. ``gpus_healthy``: GPUs of ready nodes whose health is ok;
    ``gpus_allocated``: GPUs held by jobs on any node; ``gpus_allocated_healthy``: those
    on healthy nodes; ``gpus_inference_healthy``: GPUs serving online inference on healthy
    shared nodes (``Node.inference_gpus``: in use, by no job); ``utilization``:
    ``(gpus_allocated_healthy + gpus_inference_healthy) / gpus_healthy`` (0..1, 0 with no
    healthy GPU): healthy GPUs in use by jobs or by inference, the one utilization every
    surface shows (#19: inference is work, not idle capacity)."""

    nodes_total: int
    nodes_by_state: dict[str, int]
    gpus_total: int
    gpus_healthy: int
    gpus_allocated: int
    gpus_residual: int
    gpus_allocated_healthy: int = 0
    gpus_inference_healthy: int = 0

    @property
    def utilization(self) -> float:
        if self.gpus_healthy <= 0:
            return 0.0
        in_use = self.gpus_allocated_healthy + self.gpus_inference_healthy
        return round(min(1.0, in_use / self.gpus_healthy), 4)


_HEALTHY = Q(state=Node.State.READY, health=Node.Health.OK)


def build_cluster_summary() -> ClusterSummary:
    """Cluster at a glance: nodes by state, GPUs total/healthy/allocated/serving inference
    (three queries)."""
    by_state = dict(Node.objects.values("state").annotate(n=Count("id")).values_list("state", "n"))
    totals = Node.objects.aggregate(
        total=Sum("gpus_total"),
        healthy=Sum("gpus_total", filter=_HEALTHY),
        residual=Sum("residual_gpus"),
        inference=Sum("inference_gpus", filter=_HEALTHY),
    )
    allocated = Allocation.objects.aggregate(
        all=Count("id"),
        healthy=Count("id", filter=Q(node__state=Node.State.READY, node__health=Node.Health.OK)),
    )
    return ClusterSummary(
        nodes_total=sum(by_state.values()),
        nodes_by_state=by_state,
        gpus_total=totals["total"] or 0,
        gpus_healthy=totals["healthy"] or 0,
        gpus_allocated=allocated["all"],
        gpus_residual=totals["residual"] or 0,
        gpus_allocated_healthy=allocated["healthy"],
        gpus_inference_healthy=totals["inference"] or 0,
    )


def count_own_active_jobs(user: Any) -> dict[str, int]:
    """How many of ``user``'s jobs are pending, running and preempting (every state, 0 for
    none): the home page's "Your jobs"."""
    counts = dict.fromkeys((Job.State.PENDING, Job.State.RUNNING, Job.State.PREEMPTING), 0)
    rows = (
        Job.objects.filter(owner=user, state__in=list(counts))
        .order_by()
        .values_list("state")
        .annotate(n=Count("id"))
    )
    counts.update(dict(rows))
    return counts


def get_job_mail_kinds(user: object) -> list[str]:
    """The ``JobMail`` values ``user`` chose (empty: no mail), in ``JobMail``'s order."""
    pref = JobMailPreference.objects.filter(user=user).first()
    return [k for k in JobMail.values if pref is not None and k in pref.kinds]
