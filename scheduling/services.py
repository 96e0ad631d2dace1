"""Writers of jobs: submission and cancellation (the loop's writers live in ``scheduling.cycle``).

Every function here validates the business rules (who may use which queue,
tier ceilings, requests the cluster's shape could ever run: ``scheduling.feasibility``),
writes in one transaction, appends to the job's timeline and publishes live events after
commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any
from urllib.parse import urlparse

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.db.models import Q, QuerySet

from core import audit, clock, events
from core.prepared import Prepared, PreparedCount, PreparedInsert
from core.realtime import publish_coalesced, publish_on_commit
from core.security import invisible_character_error, is_ascii_number
from quotas.models import Queue, Tier
from scheduling import begin_time, dependencies, feasibility, limits, time_limits
from scheduling.engine import explain
from scheduling.feasibility import ClusterShape
from scheduling.models import Job, JobEvent
from scheduling.permissions import may_cancel, may_submit, submits_to_any_queue
from scheduling.selectors import list_arrays_for_user, list_jobs_for_user, list_queues_for_submit
from scheduling.submission_lock import hold_submissions_of
from scheduling.transitions import set_state


@dataclass(frozen=True)
class JobRequest:
    """A validated-for-types submission (the adapters build it; the service checks the rules)."""

    name: str
    queue: str | int
    gpus: int
    tier: str | None = None
    gpus_per_node: int | None = None
    gpu_memory_gb: int | None = None
    rdma: bool | None = None
    exclusive_node: bool = False
    avoid_inference: bool = False
    preemptible: bool | None = None
    max_retries: int = 3
    checkpoint_path: str = ""
    checkpoint_interval_minutes: int = 60
    estimated_runtime_minutes: int | None = None
    # the longest one run may last (Slurm's --time): stopped there, the job fails (TIMEOUT)
    time_limit_minutes: int | None = None
    # not started before this (Slurm's --begin): an aware datetime or RFC 3339 text
    # (``begin_time.of_request``)
    begin_at: Any = None
    model_name: str = ""
    sim_duration_minutes: int | None = None
    after: Sequence[int] = ()  # job ids that must succeed first (``check_after``)
    after_arrays: Sequence[int] = ()  # arrays every task of which must (``check_after_arrays``)
    # what they must have done: succeeded (afterok), ended whatever the outcome (afterany),
    # or ended without succeeding (afternotok)
    after_condition: str = Job.AfterCondition.SUCCEEDED
    # one at a time by name (Slurm's singleton): also wait for the owner's older active jobs
    # of this name to end (``check_dependencies``)
    singleton: bool = False
    # a job array's only (Slurm's aftercorr): arrays each task of which waits for the task
    # of the same index (``corresponding_tasks``)
    after_corresponding: Sequence[int] = ()

    def __post_init__(self) -> None:
        # tuples, whichever sequence an adapter gives (a form's list, the API's): one value
        object.__setattr__(self, "after", tuple(self.after))
        object.__setattr__(self, "after_arrays", tuple(self.after_arrays))
        object.__setattr__(self, "after_corresponding", tuple(self.after_corresponding))


@cache
def _queue_lookup(any_queue: bool, by_number: bool) -> Prepared:
    """``list_queues_for_submit`` matching a name (and an id when ``by_number``), compiled
    once (``core.prepared``: every submission resolves its queue). Compiled for a stand-in
    user with the same permission (an admin or not: the selector's only branch), so the
    rule stays the selector's; the values: the user's id (unless ``any_queue``: admins'
    queues do not depend on who they are), the name, the id asked for."""
    user_model = get_user_model()

    def build(*values: Any) -> QuerySet[Queue]:
        user_id, name, *number = values if not any_queue else (0, *values)
        stand_in = user_model(pk=user_id, is_superuser=any_queue)
        if submits_to_any_queue(stand_in) is not any_queue:  # the rule changed: recompile here
            raise RuntimeError("the stand-in user no longer takes the selector's branch")
        match = Q(pk=number[0]) | Q(name=name) if number else Q(name=name)
        return list_queues_for_submit(stand_in).order_by().filter(match)[:2]

    types = ([] if any_queue else [int]) + [str] + ([int] if by_number else [])
    return Prepared(build, *types)


NOT_YOURS = "you may not submit to this queue"


def resolve_queue(user: Any, ref: str | int) -> Queue:
    """The queue named or numbered ``ref`` that ``user`` may submit to (a number: id first)."""
    ref = str(ref)
    number = int(ref) if is_ascii_number(ref) and len(ref) < 19 else None  # fits a bigint
    any_queue = submits_to_any_queue(user)
    values = ([] if any_queue else [user.pk]) + [ref] + ([] if number is None else [number])
    found = _queue_lookup(any_queue, number is not None)(*values)
    queue = next((q for q in found if q.pk == number), found[0] if found else None)
    if queue is None:
        exists = Queue.objects.filter(Q(name=ref) | Q(pk=number or 0)).exists()
        msg = NOT_YOURS if exists else f"unknown queue {ref[:80]!r}"
        raise ValidationError({"queue": [msg]})
    return queue


def _check_checkpoint_path(path: str) -> None:
    """A URI on shared storage: a known scheme, then ``//bucket-or-host/path`` with no
    ``.``/``..`` segments (``s3:/../../etc`` is refused)."""
    if not path:
        return
    parsed = urlparse(path)
    if parsed.scheme.lower() not in limits.SHARED_STORAGE_SCHEMES:
        raise ValidationError(
            {
                "checkpoint_path": [
                    "checkpoints must live on shared storage, never node-local disk: use one of "
                    + ", ".join(f"{s}://" for s in limits.SHARED_STORAGE_SCHEMES)
                ]
            }
        )
    parts = [parsed.netloc, *parsed.path.split("/")]
    if (
        not path.startswith(f"{parsed.scheme}://")
        or not parsed.netloc
        or any(part in (".", "..") for part in parts)
        or "\\" in path
        or not path.isprintable()
    ):
        raise ValidationError(
            {"checkpoint_path": ["a URI like s3://bucket/run/, with no '.' or '..' segments"]}
        )


def resolve_job_request(
    user: Any,
    req: JobRequest,
    *,
    queue: Queue | None = None,
    shape: ClusterShape | tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Apply the business rules and defaults; return the Job fields or raise ValidationError.

    A request the cluster's shape could never run, even empty and all healthy (NEVER_FITS:
    more GPUs per node, GPU memory, RDMA nodes or nodes in one block than it has), is
    refused naming the field and the rule, as a request larger than the cluster is.
    ``queue`` (already resolved for ``user`` by ``resolve_queue``) and ``shape`` (the
    ``feasibility.read_cluster_shape()`` just read) save a bulk caller (``submit_jobs``) two
    queries a job; any other ``shape`` (the old ``(largest node, GPUs)`` pair) is read anew.
    """
    errors: dict[str, list[str]] = {}
    queue = queue or resolve_queue(user, req.queue)
    tier = req.tier or queue.tier
    if tier not in Tier.values:
        errors["tier"] = [f"unknown tier {tier!r}; one of {', '.join(Tier.values)}"]
    elif Tier.rank(tier) > Tier.rank(queue.tier):
        errors["tier"] = [f"queue {queue.name} allows tiers up to {queue.tier!r}, not {tier!r}"]

    cluster = shape if isinstance(shape, ClusterShape) else feasibility.read_cluster_shape()
    largest_node, cluster_gpus = cluster.largest_node, cluster.total_gpus
    node_size = largest_node or limits.GPUS_PER_NODE_MAX
    if req.gpus > cluster_gpus:
        errors["gpus"] = [
            f"the cluster has {cluster_gpus:,} GPUs in all; this job asks {req.gpus:,}"
        ]
    per_node = req.gpus_per_node
    if per_node is None:
        per_node = req.gpus if req.gpus <= node_size else node_size
    if per_node > node_size:
        errors["gpus_per_node"] = [f"nodes have at most {node_size} GPUs"]
    elif req.gpus % per_node:
        errors["gpus_per_node"] = [
            f"{req.gpus:,} GPUs cannot be split evenly into nodes of {per_node} GPUs"
        ]
    try:
        _check_checkpoint_path(req.checkpoint_path)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    limit, limit_errors = time_limits.of_request(
        req.time_limit_minutes, req.estimated_runtime_minutes, queue
    )
    errors.update(limit_errors)
    try:
        begin = begin_time.of_request(req.begin_at, clock.now)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    for field, text in (("name", req.name), ("model_name", req.model_name)):
        if invisible := invisible_character_error(text or ""):
            errors[field] = [invisible]
    if errors:
        raise ValidationError(errors)

    multi_node = req.gpus > per_node
    fields = {
        "name": req.name,
        "queue": queue,
        "tier": tier,
        "gpus": req.gpus,
        "gpus_per_node": per_node,
        "gpu_memory_gb": req.gpu_memory_gb,
        "rdma": multi_node if req.rdma is None else req.rdma,
        "exclusive_node": req.exclusive_node,
        "avoid_inference": req.avoid_inference,
        "preemptible": (Tier.rank(tier) < Tier.rank(Tier.CORE))
        if req.preemptible is None
        else req.preemptible,
        "max_retries": req.max_retries,
        "checkpoint_path": req.checkpoint_path,
        "checkpoint_interval_minutes": req.checkpoint_interval_minutes,
        "estimated_runtime_minutes": req.estimated_runtime_minutes,
        "time_limit_minutes": limit,
        "begin_at": begin,
        "model_name": req.model_name,
        "sim_duration_minutes": req.sim_duration_minutes,
    }
    refusal = feasibility.refusal_for(fields, cluster)
    if refusal is not None:
        raise ValidationError({refusal.field: [refusal.message]})
    return fields


# How a refusal says what a dependency did, and why that refuses it, by ``after_condition``.
_DID = {
    Job.State.FAILED: "failed", Job.State.CANCELLED: "was cancelled",
    Job.State.SUCCEEDED: "succeeded",
}  # fmt: skip
_NEVER = {
    Job.AfterCondition.SUCCEEDED: "a job after it could never start",
    Job.AfterCondition.FAILED: "a job after its failure could never start",
}


def _distinct_ids(
    given: Sequence[int], field: str, noun: str, most: int
) -> tuple[list[int], list[int]]:
    """``given`` with duplicates collapsed (first order kept) and those of them an id could
    be (1 to ``limits.JOB_ID_MAX``: a bigint), or a ValidationError on ``field``: an id
    that is not a whole number, more than ``most`` ids."""
    ids = list(dict.fromkeys(given))
    if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise ValidationError({field: [f"{noun} ids are whole numbers"]})
    if len(ids) > most:
        raise ValidationError({field: [f"at most {most} {noun}s, not {len(ids)}"]})
    return ids, [i for i in ids if 1 <= i <= limits.JOB_ID_MAX]


def check_after(
    user: Any, after: Sequence[int], condition: str = Job.AfterCondition.SUCCEEDED
) -> list[int]:
    """The ids of ``after`` a job of ``user``'s may wait for, duplicates collapsed (first
    order kept), or a ValidationError on ``after``.

    At most ``limits.AFTER_MAX`` jobs, each a whole number naming a job ``user`` may view
    (``list_jobs_for_user``, the job page's rule: any other id is "unknown", whether or not
    it exists) that could still meet ``condition`` (``Job.DEFEATS``: under ``succeeded`` one
    that failed or was cancelled could not; under ``failed`` one that succeeded; under
    ``ended`` any will do). One that already met it satisfies it at once. One query.
    """
    ids, in_range = _distinct_ids(after, "after", "job", limits.AFTER_MAX)
    states = dict(list_jobs_for_user(user).filter(pk__in=in_range).values_list("pk", "state"))
    defeats = Job.DEFEATS[condition]
    errors = []
    for job_id in ids:
        state = states.get(job_id)
        if state is None:
            errors.append(f"unknown job {job_id}")
        elif state in defeats:
            errors.append(f"job {job_id} {_DID[state]}; {_NEVER[condition]}")
    if errors:
        raise ValidationError({"after": errors})
    return ids


def check_after_arrays(
    user: Any, array_ids: Sequence[int], condition: str = Job.AfterCondition.SUCCEEDED
) -> list[int]:
    """The ids of ``array_ids`` a job of ``user``'s may wait for as a whole, duplicates
    collapsed (first order kept), or a ValidationError on ``after_arrays``.

    At most ``limits.AFTER_ARRAYS_MAX`` arrays, each naming one ``user`` may view
    (``list_arrays_for_user``: the rule of its tasks' pages; any other id is "unknown")
    that could still meet ``condition``: under ``succeeded`` none of its tasks failed or
    was cancelled, under ``failed`` not every one of them succeeded (``Job.TASK_MEETS``),
    under ``ended`` whatever its tasks did. Two queries (one under ``ended``).
    """
    ids, in_range = _distinct_ids(array_ids, "after_arrays", "array", limits.AFTER_ARRAYS_MAX)
    seen = set(list_arrays_for_user(user).filter(pk__in=in_range).values_list("pk", flat=True))
    doomed: dict[int, str] = {}
    if condition == Job.AfterCondition.SUCCEEDED:
        for array_id, index, state in (
            Job.objects.filter(array_id__in=seen, state__in=Job.DEFEATS[condition])
            .order_by("array_id", "array_index")
            .values_list("array_id", "array_index", "state")
        ):
            doomed.setdefault(array_id, f"task {index} of array {array_id} {_DID[state]}")
    elif condition == Job.AfterCondition.FAILED:
        for array_id in dependencies.arrays_all_succeeded(seen):
            doomed[array_id] = f"every task of array {array_id} succeeded"
    errors = [
        f"{doomed[array_id]}; {_NEVER[condition]}" if array_id in doomed
        else f"unknown array {array_id}"
        for array_id in ids
        if array_id in doomed or array_id not in seen
    ]  # fmt: skip
    if errors:
        raise ValidationError({"after_arrays": errors})
    return ids


@dataclass(frozen=True)
class Dependencies:
    """What a submission waits for, checked (``check_dependencies``): the ids of the jobs
    (``after``) and of the arrays (``after_arrays``) that must first have done what
    ``condition`` says (``Job.AfterCondition``: succeeded, ended, or failed). ``singleton``: those
    include the owner's older active jobs of the same name (``same_name_jobs``)."""

    jobs: Sequence[int] = ()
    arrays: Sequence[int] = ()
    condition: str = Job.AfterCondition.SUCCEEDED
    singleton: bool = False
    # an array's tasks: by index, the tasks of the same index of ``corresponding`` arrays
    per_task: Mapping[int, Sequence[int]] = dataclasses.field(default_factory=dict)
    corresponding: Sequence[int] = ()

    def __bool__(self) -> bool:
        return bool(self.jobs or self.arrays or self.per_task)

    def task_jobs(self, index: int) -> list[int]:
        """The jobs task ``index`` of an array waits for: ``jobs``, then its own."""
        return list(dict.fromkeys([*self.jobs, *self.per_task.get(index, ())]))


def check_dependencies(
    user: Any, req: JobRequest, indices: Sequence[int] | None = None
) -> Dependencies:
    """``req``'s ``after`` and ``after_arrays`` checked (``check_after``,
    ``check_after_arrays``) against its ``after_condition`` (one of ``Job.AfterCondition``;
    ``ended`` and ``failed`` only with something to wait for), with every error in one
    ValidationError. With ``singleton``, also the owner's older active jobs of ``req.name``
    (``same_name_jobs``), to end: the condition is ``ended`` (given with ``after`` or
    ``after_arrays``, it must say so; ``failed`` never goes with it). ``indices``: a job array's (None: one job), whose
    tasks may each wait for the task of the same index of ``req.after_corresponding``
    (``corresponding_tasks``). No query when it names none and is no singleton. A
    submission calls it under the person's lock (``submission_lock``), so that two
    singletons of one name never both find none."""
    condition = req.after_condition
    if condition not in Job.AfterCondition.values:
        *others, last = Job.AfterCondition.values
        allowed = f"{', '.join(others)} or {last}"
        raise ValidationError({"after_condition": [f"after_condition is {allowed}"]})
    named = bool(req.after or req.after_arrays or req.after_corresponding)
    if req.after_corresponding and indices is None:
        raise ValidationError(
            {
                "after_corresponding": [
                    "for a job array only: each of its tasks waits for the task of the same "
                    "index; give the array's indices (array)"
                ]
            }
        )
    if req.singleton and named and condition != Job.AfterCondition.ENDED:
        raise ValidationError(
            {
                "after_condition": [
                    "a singleton waits for your older jobs of its name to end, whatever the "
                    "outcome: with after, after_arrays or after_corresponding, set "
                    "after_condition to ended too"
                ]
            }
        )
    if req.singleton and condition == Job.AfterCondition.FAILED:
        raise ValidationError(
            {
                "after_condition": [
                    "a singleton waits for your older jobs of its name to end, whatever the "
                    "outcome: it cannot wait for them to fail"
                ]
            }
        )
    if condition != Job.AfterCondition.SUCCEEDED and not (named or req.singleton):
        raise ValidationError(
            {"after_condition": [f"{condition} needs jobs (after) or arrays (after_arrays)"]}
        )
    if req.singleton:
        condition = Job.AfterCondition.ENDED
    errors: dict[str, list[str]] = {}
    checked: dict[str, list[int]] = {"jobs": [], "arrays": []}
    for key, given, check in (
        ("jobs", req.after, check_after),
        ("arrays", req.after_arrays, check_after_arrays),
    ):
        try:
            checked[key] = check(user, given, condition) if given else []
        except ValidationError as exc:
            errors.update(exc.message_dict)
    same: tuple[list[int], list[int]] = ([], [])
    if req.singleton:
        try:
            same = same_name_jobs(user, req.name)
        except ValidationError as exc:
            errors.update(exc.message_dict)
    corresponding: list[int] = []
    per_task: dict[int, list[int]] = {}
    if req.after_corresponding and indices is not None:
        try:
            corresponding, per_task = corresponding_tasks(
                user, req.after_corresponding, indices, condition
            )
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    return Dependencies(
        jobs=list(dict.fromkeys([*checked["jobs"], *same[0]])),
        arrays=list(dict.fromkeys([*checked["arrays"], *same[1]])),
        condition=condition,
        singleton=req.singleton,
        per_task=per_task,
        corresponding=corresponding,
    )


def corresponding_tasks(
    user: Any, array_ids: Sequence[int], indices: Sequence[int],
    condition: str = Job.AfterCondition.SUCCEEDED,
) -> tuple[list[int], dict[int, list[int]]]:  # fmt: skip
    """What the tasks of a new array of ``indices`` wait for with ``after_corresponding``
    ``array_ids`` (Slurm's ``aftercorr``): the arrays' ids, duplicates collapsed (first
    order kept), and by index the ids of their tasks of that index (an array without one
    adds nothing to that task), or a ValidationError on ``after_corresponding``.

    At most ``limits.AFTER_ARRAYS_MAX`` arrays, each one ``user`` may view (else
    "unknown", as ``check_after_arrays``), none of whose tasks of those indices could no
    longer meet ``condition`` (``Job.DEFEATS``: under ``succeeded`` one that failed or was
    cancelled, under ``failed`` one that succeeded; under ``ended`` whatever they did): that
    task could never start. Two queries.
    """
    ids, in_range = _distinct_ids(
        array_ids, "after_corresponding", "array", limits.AFTER_ARRAYS_MAX
    )
    seen = set(list_arrays_for_user(user).filter(pk__in=in_range).values_list("pk", flat=True))
    errors = [f"unknown array {array_id}" for array_id in ids if array_id not in seen]
    wanted = set(indices)
    per_task: dict[int, list[int]] = {}
    doomed: dict[int, str] = {}
    for array_id, index, job_id, state in (
        Job.objects.filter(array_id__in=seen, array_index__in=wanted)
        .order_by("array_id", "array_index")
        .values_list("array_id", "array_index", "pk", "state")
    ):
        per_task.setdefault(index, []).append(job_id)
        if state in Job.DEFEATS[condition] and array_id not in doomed:
            doomed[array_id] = (
                f"task {index} of array {array_id} {_DID[state]}; task {index} of this "
                "array could never start"
            )
    errors += [doomed[array_id] for array_id in ids if array_id in doomed]
    if errors:
        raise ValidationError({"after_corresponding": errors})
    return ids, per_task


def same_name_jobs(user: Any, name: str) -> tuple[list[int], list[int]]:
    """What a ``singleton`` job named ``name`` of ``user``'s waits for: the ids of their
    active (pending or running) jobs of that name, and of the arrays of those that are an
    array's tasks (an array's tasks all bear its name: waiting for the whole array is
    waiting for them, with one link). At most ``limits.SINGLETON_MAX`` of the two together,
    else a ValidationError on ``singleton``. One query, on the owner's index."""
    jobs: list[int] = []
    arrays: dict[int, None] = {}
    rows = Job.objects.filter(owner=user, name=name, state__in=Job.ACTIVE_STATES)
    for job_id, array_id in rows.order_by("pk").values_list("pk", "array_id"):
        if array_id is None:
            jobs.append(job_id)
        else:
            arrays[array_id] = None
    if len(jobs) + len(arrays) > limits.SINGLETON_MAX:
        raise ValidationError(
            {
                "singleton": [
                    f"you have {len(jobs) + len(arrays):,} active jobs and arrays named "
                    f"{name[:80]!r}; a singleton waits for at most {limits.SINGLETON_MAX}: "
                    "give it another name, or wait for some to end"
                ]
            }
        )
    return jobs, list(arrays)


def link_dependencies(job_ids: Sequence[int], deps: Dependencies) -> None:
    """Write the links of the new jobs ``job_ids`` to what they wait for (in bulk)."""
    Job.after.through.objects.bulk_create(
        [Job.after.through(from_job_id=j, to_job_id=d) for j in job_ids for d in deps.jobs],
        batch_size=1000,
    )
    Job.after_arrays.through.objects.bulk_create(
        [Job.after_arrays.through(job_id=j, jobarray_id=a) for j in job_ids for a in deps.arrays],
        batch_size=1000,
    )


# a person's active jobs counted (every submission: the SQL compiled once; the partial
# index ``job_active_owner_idx``)
_count_active_jobs = PreparedCount(
    lambda owner_id: Job.objects.filter(owner_id=owner_id, state__in=Job.ACTIVE_STATES), int
)


def link_corresponding(tasks: Sequence[Job], deps: Dependencies) -> None:
    """Write the links of a new array's ``tasks`` to the tasks of the same index of the
    arrays they wait for that way (``Dependencies.per_task``; in bulk)."""
    Job.after.through.objects.bulk_create(
        [
            Job.after.through(from_job_id=task.pk, to_job_id=d)
            for task in tasks
            for d in deps.per_task.get(task.array_index, ())
            if d not in deps.jobs  # linked already, as every task's
        ],
        batch_size=1000,
    )


def check_active_jobs(user: Any, adding: int) -> None:
    """Refuse (a ValidationError, no field) a submission of ``adding`` jobs that would give
    ``user`` more active (pending or running) jobs than ``settings.ACTIVE_JOBS_PER_PERSON``
    (0: no bound). One count on the owner's index. The submissions call it under the
    person's lock (``submission_lock``): two of one person's at the same instant take turns,
    so together they never pass the bound."""
    bound = settings.ACTIVE_JOBS_PER_PERSON
    if not bound:
        return
    active = _count_active_jobs(user.pk)
    if active + adding > bound:
        raise ValidationError(
            f"you have {explain.count(active, 'active job')} (pending or running) and may "
            f"have at most {bound:,} at once; this submission adds {adding:,}: wait for some "
            "to end, or cancel some"
        )


def add_event(job: Job, kind: str, message: str) -> JobEvent:
    """Append to a job's timeline and tell its watchers (after commit)."""
    event = JobEvent.objects.create(job=job, kind=kind, message=message)
    publish_on_commit(*events.job_updated(job.pk, job.state, event=(kind, message)))
    return event


_JOB_INSERT = PreparedInsert(Job)  # every submission: the INSERT's SQL compiled once


def _insert_with_first_event(job: Job, kind: str, message: str) -> JobEvent:
    """INSERT ``job`` and the first line of its timeline in one statement (one round trip).

    ``WITH new_job AS (INSERT INTO job ... RETURNING id) INSERT INTO jobevent ... SELECT``:
    one statement is atomic on its own, so a submission needs neither BEGIN nor COMMIT,
    and its two rows cost one round trip instead of four (BEGIN, two INSERTs, COMMIT).
    The job's INSERT is the one ``Model.save`` makes (``core.prepared.PreparedInsert``:
    every field's ``pre_save`` and database preparation, so ``submitted_at`` and
    ``updated_at`` stamp with the cluster clock); the event carries the job's
    ``submitted_at``, one instant. Both instances come back saved (pk set, not ``adding``).
    Inside a caller's transaction the rows commit or roll back with it.
    """
    job_sql, job_params = _JOB_INSERT(job, connection.alias)
    event_meta = JobEvent._meta
    event = JobEvent(job=job, at=job.submitted_at, kind=kind, message=message)
    columns = [event_meta.get_field(name) for name in ("job", "at", "kind", "message")]
    values = [f.get_db_prep_save(getattr(event, f.attname), connection) for f in columns[1:]]
    qn = connection.ops.quote_name
    sql = (
        f"WITH new_job AS ({job_sql}) "
        f"INSERT INTO {qn(event_meta.db_table)} ({', '.join(qn(f.column) for f in columns)}) "
        f"SELECT new_job.{qn(Job._meta.pk.column)}, %s, %s, %s FROM new_job "
        f"RETURNING {qn(event_meta.pk.column)}, {qn(columns[0].column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*job_params, *values])
        event.pk, job.pk = cursor.fetchone()
    event.job_id = job.pk
    for saved in (job, event):
        saved._state.adding, saved._state.db = False, connection.alias
    return event


def submit_job(user: Any, req: JobRequest) -> Job:
    """Create a pending job after checking the rules; the next cycle will place or explain it.

    The job and its ``submitted`` event are written by one statement
    (``_insert_with_first_event``). The job comes back with its timeline loaded (that one
    event), so the caller can show it without reading it back. Its ``job.<id>`` topic gets
    no event: a job that did not exist has no watchers yet. The queue pages hear of it,
    coalesced.
    """
    if not may_submit(user):
        raise PermissionDenied("log in to submit jobs")
    fields = resolve_job_request(user, req)
    # one time for the job and its event, in a request or not; its checks against the
    # person's other jobs and its rows under their submission lock; with dependencies, the
    # job and its links commit together (the loop never sees the job without them)
    with clock.one_instant(), transaction.atomic():
        hold_submissions_of(user.pk)
        deps = check_dependencies(user, req)
        check_active_jobs(user, 1)
        job = Job(
            owner=user, state=Job.State.PENDING, after_condition=deps.condition,
            singleton=deps.singleton, **fields,
        )  # fmt: skip
        event = _insert_with_first_event(job, "submitted", submitted_message(user, job, deps))
        if deps:
            link_dependencies([job.pk], deps)
    # what prefetch_related("events") sets (and the links of a job without dependencies)
    none = {} if deps else {"after": [], "after_arrays": []}
    job._prefetched_objects_cache = {"events": [event], **none}
    publish_coalesced(*events.queues_updated(queue=job.queue.name))
    return job


def lock_active_job(user: Any, job_id: int, verb: str) -> Job:
    """The job, its row locked until the caller's transaction ends, after checking that
    ``user`` may act on it (``may_cancel``: the owner, their team lead or an admin) and that
    it is still active (compare-and-set: a job that ended is refused, "job is already
    succeeded"). The shared first step of the actions on a job: cancel, hold, release.
    """
    # Only the job row, and FOR NO KEY UPDATE: a lock on its queue as well (select_related
    # locks every joined row) deadlocked with the cycle, which refers to queues (#16). And
    # no join in the locking read: one that waited for a move of the job to another queue
    # (``move_services``) re-checks the join with the job's new queue and finds no row.
    job = Job.objects.select_for_update(no_key=True).get(pk=job_id)
    job.queue = Queue.objects.get(pk=job.queue_id)
    if not may_cancel(user, job):
        raise PermissionDenied(f"only the owner, their team lead or an admin may {verb}")
    if not job.is_active:
        raise ValidationError({"state": [f"job is already {job.state}"]})
    return job


def record_action(
    user: Any, job: Job, action: str, event: tuple[str, str], change: tuple[dict, dict], *,
    reason: str = "", source_ip: str | None = None,
) -> None:  # fmt: skip
    """What an action on a job leaves: a line on its timeline (``event``: kind, message), an
    audit record ``job.<action>`` when ``user`` acted on someone else's job (``change``: the
    fields it changed, before and after, as JSON values), and the queue pages told after
    commit. Inside the action's transaction."""
    add_event(job, *event)
    if job.owner_id != user.pk:
        before, after = change
        audit.record(user, f"job.{action}", job, reason=reason, before=before, after=after,
                     source_ip=source_ip)  # fmt: skip
    publish_on_commit(*events.queues_updated(queue=job.queue.name))


def cancel_job(user: Any, job_id: int, *, source_ip: str | None = None) -> Job:
    """Mark an active job cancelled; the loop releases its GPUs on the backend.

    Compare-and-set: a job already finished is refused with a clear error.
    """
    with transaction.atomic():
        job = lock_active_job(user, job_id, "cancel")
        before = {"state": job.state}
        was = set_state(job, Job.State.CANCELLED)
        fields = ["state", "updated_at"]
        if was == Job.State.PENDING:  # it holds no GPUs: it ends now (a run: once freed)
            job.finished_at = clock.now()
            fields.append("finished_at")
        job.save(update_fields=fields)
        record_action(user, job, "cancel", ("cancelled", f"cancelled by {user.username}"),
                      (before, {"state": job.state}), source_ip=source_ip)  # fmt: skip
    return job


# -- many at once ---------------------------------------------------------------------------


def submitted_message(
    user: Any, job: Job, deps: Dependencies | None = None, index: int | None = None
) -> str:
    """The first line of a new job's timeline: who submitted what where, and what it waits
    for (``index``: the task of an array, with the jobs of its own index it waits for)."""
    deps = Dependencies() if deps is None else deps
    gpus = explain.count(job.gpus, "GPU")
    message = f"submitted by {user.username} to {job.queue.name}: {gpus}, tier {job.tier}"
    jobs = deps.jobs if index is None else deps.task_jobs(index)
    waits = [_named("job", jobs)] if jobs else []
    waits += [f"every task of {_named('array', deps.arrays)}"] if deps.arrays else []
    if waits:
        message += f"; starts after {' and '.join(waits)} {_DONE[deps.condition]}"
    if deps.corresponding and index is not None:
        message += "; each task of its array after the task of the same index of " + _named(
            "array", deps.corresponding
        )
    if deps.singleton:
        message += "; one at a time by name (singleton)"
    if job.time_limit_minutes:
        message += f"; time limit {explain.duration(job.time_limit_minutes * 60)} a run"
    if job.begin_at:
        message += f"; not to start before {explain.when(job.begin_at.timestamp())}"
    return message


# What a submission's timeline says its dependencies must have done, by ``after_condition``.
_DONE = {
    Job.AfterCondition.SUCCEEDED: "succeeded",
    Job.AfterCondition.ENDED: "ended, whatever the outcome",
    Job.AfterCondition.FAILED: "ended without succeeding (failed or cancelled)",
}


def _named(noun: str, ids: Sequence[int]) -> str:
    """``job 12``, ``jobs 12 and 13``, ``arrays 12, 13 and 14``: how texts name things by id."""
    words = [str(i) for i in ids]
    if len(words) == 1:
        return f"{noun} {words[0]}"
    return f"{noun}s {', '.join(words[:-1])} and {words[-1]}"


def submit_jobs(
    user: Any,
    requests: Sequence[JobRequest],
    *,
    submitted_at: Sequence[datetime] | None = None,
    per_person_bound: bool = True,
) -> list[Job]:
    """Create many pending jobs at once, each checked exactly as ``submit_job`` checks one.

    All or none: the same permission check and the same rules and defaults
    (``resolve_job_request``) for every request; if any request breaks a rule nothing is
    written and the ValidationError names each field as ``jobs[<index>].<field>``. Each
    distinct queue is resolved once and the cluster's shape read once, so a batch of
    thousands costs a few queries besides its inserts (one ``submitted`` event per job,
    in bulk). ``submitted_at`` (one per request, cluster time) stamps arrivals that a
    generator submits after the fact (the simulator demo), events included. After
    commit, ``queues.updated`` for each queue written to, coalesced. Inside a caller's
    transaction the jobs commit (or roll back) with it. ``per_person_bound``: the
    ``check_active_jobs`` bound applies (off only for the demo's generator, which submits
    for a simulated population under one account and bounds its backlog itself).
    """
    if not may_submit(user):
        raise PermissionDenied("log in to submit jobs")
    if submitted_at is not None and len(submitted_at) != len(requests):
        raise ValueError(f"{len(submitted_at)} submission times for {len(requests)} requests")
    shape = feasibility.read_cluster_shape()
    queues: dict[str, Queue] = {}
    errors: dict[str, list[str]] = {}
    jobs: list[Job] = []
    for i, req in enumerate(requests):
        waits = {
            "after": req.after, "after_arrays": req.after_arrays,
            "after_condition": req.after_condition != Job.AfterCondition.SUCCEEDED,
            "singleton": req.singleton, "after_corresponding": req.after_corresponding,
        }  # fmt: skip
        if field := next((name for name, given in waits.items() if given), None):
            # one job at a time (``submit_job``): a batch is the demo's, never waits
            errors[f"jobs[{i}].{field}"] = ["not in a batch: submit a job that waits on its own"]
            continue
        try:
            queue = queues.get(str(req.queue)) or resolve_queue(user, req.queue)
            queues[str(req.queue)] = queue
            fields = resolve_job_request(user, req, queue=queue, shape=shape)
        except ValidationError as exc:
            errors.update((f"jobs[{i}].{name}", m) for name, m in exc.message_dict.items())
            continue
        job = Job(owner=user, state=Job.State.PENDING, **fields)
        if submitted_at is not None:
            job.submitted_at = submitted_at[i]
        jobs.append(job)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        if per_person_bound:
            hold_submissions_of(user.pk)
            check_active_jobs(user, len(jobs))
        created = Job.objects.bulk_create(jobs, batch_size=500)
        JobEvent.objects.bulk_create(
            [
                JobEvent(
                    job=job, at=job.submitted_at, kind="submitted",
                    message=submitted_message(user, job),
                )
                for job in created
            ],
            batch_size=500,
        )  # fmt: skip
    for name in sorted({job.queue.name for job in created}):
        publish_coalesced(*events.queues_updated(queue=name))
    return created
