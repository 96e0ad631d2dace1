"""Writers of job arrays (``scheduling.arrays``): submission, cancelling every task, the
bound on tasks that run at once and the waiting tasks' earliest start (Slurm's ``sbatch
--array``, ``scancel <array>``, ``scontrol update ArrayTaskThrottle``, ``StartTime=``).

Each checks who may act on the server (``may_cancel``: the owner, their team lead or an
admin, for an array as for a job), writes in one transaction, leaves each task's timeline
a line, an audit record when acting on someone else's array, and tells the pages after
commit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core import audit, clock, events
from core.realtime import publish_coalesced, publish_on_commit
from scheduling import arrays, begin_time
from scheduling.begin_time_services import iso, put_off, timeline_line, waiting_for
from scheduling.cluster_lock import wait_cluster_lock
from scheduling.engine.explain import when
from scheduling.hold_services import clean_hold_reason
from scheduling.models import Job, JobArray, JobEvent
from scheduling.permissions import may_cancel, may_submit
from scheduling.selectors import list_arrays_for_user
from scheduling.services import (
    Dependencies,
    JobRequest,
    check_active_jobs,
    check_dependencies,
    link_corresponding,
    link_dependencies,
    resolve_job_request,
    submitted_message,
)
from scheduling.sql import bulk_set
from scheduling.submission_lock import hold_submissions_of
from scheduling.transitions import set_state

# How long cancelling an array waits for the loop to let go of the cluster (else
# ``ClusterBusy``: the API's 503 with Retry-After).
LOCK_WAIT_S = 20.0


def parse_spec(spec: Any) -> arrays.ArraySpec:
    """The spec's indices and bound, or a ValidationError on ``array``."""
    try:
        return arrays.parse(spec)
    except arrays.ArraySpecError as exc:
        raise ValidationError({"array": [str(exc)]}) from exc


def submit_array(user: Any, req: JobRequest, spec: str) -> JobArray:
    """Create a job array: one pending task per index of ``spec`` (``scheduling.arrays``),
    each the job ``req`` asks for, checked once by the rules ``submit_job`` applies.

    All or none. Every task waits for ``req.after`` and ``req.after_arrays`` when given. The tasks, their
    ``submitted`` events and their dependencies are written in bulk, at one cluster
    instant; the array comes back with ``task_ids`` set (ascending index)."""
    if not may_submit(user):
        raise PermissionDenied("log in to submit jobs")
    # its checks against the person's other jobs and its rows under their submission lock
    with clock.one_instant(), transaction.atomic():
        hold_submissions_of(user.pk)
        parsed, fields, deps = _checked(user, req, spec)
        check_active_jobs(user, len(parsed.indices))
        array = JobArray.objects.create(
            name=fields["name"], owner=user, queue=fields["queue"], spec=parsed.text,
            size=len(parsed.indices), max_running=parsed.max_running,
        )  # fmt: skip
        tasks = Job.objects.bulk_create(
            [
                Job(
                    owner=user,
                    state=Job.State.PENDING,
                    array=array,
                    array_index=i,
                    after_condition=deps.condition,
                    singleton=deps.singleton,
                    **fields,
                )  # fmt: skip
                for i in parsed.indices
            ],
            batch_size=500,
        )
        note = f"; task {{}} of array {array.pk} ({parsed.text})"
        JobEvent.objects.bulk_create(
            [
                JobEvent(
                    job=task, at=task.submitted_at, kind="submitted",
                    message=submitted_message(user, task, deps, task.array_index)
                    + note.format(task.array_index),
                )
                for task in tasks
            ],
            batch_size=500,
        )  # fmt: skip
        if deps:
            link_dependencies([task.pk for task in tasks], deps)
            link_corresponding(tasks, deps)
    array.task_ids = [task.pk for task in tasks]  # type: ignore[attr-defined]
    publish_coalesced(*events.queues_updated(queue=array.queue.name))
    return array


def _checked(
    user: Any, req: JobRequest, spec: str
) -> tuple[arrays.ArraySpec, dict[str, Any], Dependencies]:
    """``spec`` parsed, ``req`` resolved and its dependencies checked, or one
    ValidationError with every field's errors."""
    errors: dict[str, list[str]] = {}

    def attempt(check: Callable[..., Any], *args: Any) -> Any:
        try:
            return check(*args)
        except ValidationError as exc:
            errors.update(exc.message_dict)
            return None

    parsed = attempt(parse_spec, spec)
    fields = attempt(resolve_job_request, user, req)
    deps = attempt(check_dependencies, user, req, parsed.indices if parsed else ())
    if errors:
        raise ValidationError(errors)
    return parsed, fields, deps


def _locked_array(user: Any, array_id: int, verb: str) -> JobArray:
    """The array, its row locked until the caller's transaction ends, after checking that
    ``user`` may see it (else "not found", as for a job) and may act on it."""
    array = (
        list_arrays_for_user(user)
        .select_for_update(of=("self",), no_key=True)
        .filter(pk=array_id)
        .first()
    )
    if array is None:
        raise JobArray.DoesNotExist(f"no array {array_id}")
    if not may_cancel(user, array):
        raise PermissionDenied(f"only the owner, their team lead or an admin may {verb}")
    return array


def cancel_array(user: Any, array_id: int, *, source_ip: str | None = None) -> list[int]:
    """Cancel every active task of an array (as ``cancel_job`` cancels one: a waiting task
    ends now, a running one once the loop has freed its GPUs); returns the ids cancelled,
    none when every task had already ended. One transaction, which first takes the
    cluster lock (up to ``LOCK_WAIT_S``, else ``ClusterBusy``): a cycle locks the rows of the
    jobs it reconciles and then of those it launches, in no order of ours, so holding some
    tasks' rows while waiting for others could deadlock with it; under the cluster lock no
    cycle runs, and the tasks' rows are locked in id order (a single job's cancel waits for
    this one, never the other way round)."""
    with transaction.atomic():
        wait_cluster_lock(LOCK_WAIT_S)
        array = _locked_array(user, array_id, "cancel its tasks")
        tasks = list(
            Job.objects.select_for_update(of=("self",), no_key=True)
            .filter(array=array, state__in=Job.ACTIVE_STATES)
            .order_by("pk")
        )
        now = clock.now()
        by_state: dict[str, int] = {}
        for task in tasks:
            was = set_state(task, Job.State.CANCELLED)
            by_state[was] = by_state.get(was, 0) + 1
            task.updated_at = now  # a bulk update stamps no ``auto_now`` field
            if was == Job.State.PENDING:  # holds no GPUs: it ends now
                task.finished_at = now
        written = ("state", "finished_at", "updated_at")
        bulk_set(Job, written, [(t.pk, *(getattr(t, f) for f in written)) for t in tasks])
        message = f"cancelled by {user.username} with its array {array.pk}"
        JobEvent.objects.bulk_create(
            [JobEvent(job=task, at=now, kind="cancelled", message=message) for task in tasks],
            batch_size=500,
        )
        for task in tasks:
            publish_on_commit(
                *events.job_updated(task.pk, task.state, event=("cancelled", message))
            )
        if tasks and array.owner_id != user.pk:
            audit.record(user, "array.cancel", array, before={"active_tasks": by_state},
                         after={"cancelled": len(tasks)}, source_ip=source_ip)  # fmt: skip
        publish_on_commit(*events.queues_updated(queue=array.queue.name))
    return [task.pk for task in tasks]


def set_max_running(
    user: Any, array_id: int, max_running: Any, *, source_ip: str | None = None
) -> JobArray:
    """Change how many of an array's tasks may hold GPUs at once (None: no bound); the next
    cycle starts or holds back tasks by it (a lower bound stops no running task, as in
    Slurm). A whole number from 1 to the array's size, or None."""
    if max_running is not None and (
        isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1
    ):
        raise ValidationError({"max_running": ["a whole number of tasks, at least 1, or none"]})
    with transaction.atomic():
        array = _locked_array(user, array_id, "change its bound")
        if max_running is not None and max_running > array.size:
            raise ValidationError(
                {"max_running": [f"the array has {array.size:,} tasks; at most {array.size:,}"]}
            )
        before = array.max_running
        if before == max_running:
            return array
        array.max_running = max_running
        array.save(update_fields=["max_running"])
        if array.owner_id != user.pk:
            audit.record(user, "array.max_running", array, before={"max_running": before},
                         after={"max_running": max_running}, source_ip=source_ip)  # fmt: skip
        publish_on_commit(*events.queues_updated(queue=array.queue.name))
    return array


def change_begin_times(
    user: Any, array_id: int, value: Any, reason: Any = "", *, source_ip: str | None = None
) -> tuple[list[int], datetime | None]:
    """Set the earliest start of every waiting task of an array (Slurm's ``scontrol update
    JobId=<array> StartTime=``), each as ``begin_time_services.change_begin_time`` sets a
    job's; returns the ids of the tasks it changed and the time they now have (None: none,
    a time already past included). Tasks that started or ended are left.

    Under the cluster lock, as ``cancel_array`` (the loop writes many tasks' rows in an
    order of its own), the waiting tasks' rows locked in id order. Refused, nothing
    written: no task waits (``ValidationError`` on ``state``); a time that is not one, or
    too far ahead, or what every waiting task has already (on ``begin_at``); a reason that
    is not one clean line; anyone who may not act on the array (``PermissionDenied``).
    """
    reason = clean_hold_reason(reason, required=False)
    with transaction.atomic():
        wait_cluster_lock(LOCK_WAIT_S)
        array = _locked_array(user, array_id, "change its tasks' earliest start")
        tasks = list(
            Job.objects.select_for_update(of=("self",), no_key=True)
            .filter(array=array, state=Job.State.PENDING)
            .order_by("pk")
        )
        if not tasks:
            raise ValidationError(
                {"state": [f"no task of array {array.pk} waits: only a waiting task's earliest "
                           "start can change"]}
            )  # fmt: skip
        now = clock.now()
        new = begin_time.of_request(value, lambda: now)
        before = {task.pk: waiting_for(task, now) for task in tasks}
        changed = [task for task in tasks if before[task.pk] != new]
        if not changed:
            said = when(new.timestamp()) if new else "none: they already queue"
            raise ValidationError({"begin_at": [f"every waiting task's earliest start is {said}"]})
        lines = []
        for task in changed:
            put_off(task, new, now)
            task.updated_at = now  # a bulk update stamps no ``auto_now`` field
            lines.append(timeline_line(user, before[task.pk], new, reason))
        written = ("begin_at", "released_at", "updated_at")
        bulk_set(Job, written, [(t.pk, *(getattr(t, f) for f in written)) for t in changed])
        JobEvent.objects.bulk_create(
            [
                JobEvent(job=t, at=now, kind="begin_time", message=m)
                for t, m in zip(changed, lines, strict=True)
            ],
            batch_size=500,
        )
        for task, line in zip(changed, lines, strict=True):
            publish_on_commit(*events.job_updated(task.pk, task.state, event=("begin_time", line)))
        if array.owner_id != user.pk:
            was = sorted({iso(b) for b in before.values()}, key=lambda at: at or "")
            audit.record(user, "array.begin_time", array, reason=reason,
                         before={"begin_at": was}, after={"begin_at": iso(new),
                                                          "tasks": len(changed)},
                         source_ip=source_ip)  # fmt: skip
        publish_on_commit(*events.queues_updated(queue=array.queue.name))
    return [task.pk for task in changed], new
