"""REST: job arrays (Slurm's ``sbatch --array``), ``/api/v1/arrays/``: submit, list, read,
change the bound on tasks running at once, cancel every task.

The rules are ``scheduling.array_services``' (who may act, what a spec and a bound may be,
all or nothing); here only the bodies and the answers. A submission is a job submission
(``JobSubmitSerializer``'s fields, the same conversion into ``JobRequest``) plus ``array``,
the spec (``0-99%10``). Each task is a job of its own under ``/api/v1/jobs/`` (its
``array`` and ``array_index``; ``GET jobs/?array=ID`` lists them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import (
    AsciiIdLookup,
    SharedFieldsModelSerializer,
    StrictIntegerField,
    StrictSerializer,
    client_ip,
)
from scheduling import arrays
from scheduling.api import (
    BeginTimeRequestSerializer,
    JobSubmitSerializer,
    busy,
    job_request,
    valid_body,
)
from scheduling.array_services import (
    cancel_array,
    change_begin_times,
    set_max_running,
    submit_array,
)
from scheduling.cluster_lock import ClusterBusy
from scheduling.models import Job, JobArray
from scheduling.selectors import annotated_progress, arrays_with_progress, list_arrays_for_user

_INDICES = r"[0-9]+(?:-[0-9]+(?::[0-9]+)?)?"
# Slurm's grammar (``scheduling.arrays``), ASCII digits only, nothing after the end (Python's
# ``$`` also matches before a final line break). What it cannot say (ranges low to high, at
# most ``SIZE_MAX`` tasks, each index once, ``%0``) is the parser's 400 on ``array``.
SPEC_PATTERN = rf"^{_INDICES}(?:,{_INDICES})*(?:%[0-9]+)?(?![\s\S])"


@extend_schema_field(
    {
        "type": "string",
        "pattern": SPEC_PATTERN,
        "minLength": 1,
        "maxLength": arrays.SPEC_MAX,
        "example": "0-99%10",
        "description": "the task indices, Slurm's --array spec: indices and ranges (with an "
        "optional :step) separated by commas, and an optional %N, the most tasks to run at "
        f"once; at most {arrays.SIZE_MAX:,} tasks, indices 0 to {arrays.INDEX_MAX:,}",
    }
)
class ArraySpecField(serializers.CharField):
    """An array spec: text (no number, list or null), checked by ``scheduling.arrays.parse``
    with the body's other fields, so one answer names every bad field. Kept as given: the
    parser refuses spaces, which trimming would hide."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trim_whitespace=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("a text like 0-99 or 0-99%10")
        try:
            arrays.parse(data)
        except arrays.ArraySpecError as exc:
            raise serializers.ValidationError(str(exc)) from exc
        return data


class ArraySubmitSerializer(JobSubmitSerializer):
    """A job submission (every field of ``JobSubmitSerializer``: each task is that job) plus
    its indices."""

    array = ArraySpecField()


class BoundField(StrictIntegerField):
    """The bound in ``PATCH arrays/{id}/``. A form has no null: there, as the portal reads
    its forms' other nullable fields, an empty or absent value is null (no bound); a JSON
    body must name it."""

    default_empty_html = None


class ArrayLimitSerializer(StrictSerializer):
    """The body of ``PATCH arrays/{id}/``: the new bound, or null for none. Required: the
    one thing a PATCH changes. Never partial, so drf-spectacular, which documents every PATCH
    body as partial (all optional), documents it as the view reads it."""

    partial = property(lambda self: False, lambda self, value: None)

    max_running = BoundField(
        min_value=1, max_value=arrays.SIZE_MAX, allow_null=True,
        help_text="the most tasks holding GPUs at once, 1 to the array's size; null: no bound",
    )  # fmt: skip


class ArrayProgressSerializer(serializers.Serializer):
    """Where an array's tasks stand (``selectors.ArrayProgress``)."""

    pending = serializers.IntegerField()
    running = serializers.IntegerField()
    preempting = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    held_back = serializers.IntegerField(
        help_text="pending tasks its bound keeps waiting (reason ARRAY_LIMIT)"
    )
    gpus_held = serializers.IntegerField(help_text="GPUs its running and preempting tasks hold")


class JobArraySerializer(SharedFieldsModelSerializer):
    """An array read through ``selectors.arrays_with_progress`` (its tasks and progress come
    with the row: no query per array)."""

    queue = serializers.CharField(source="queue.name", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    tasks = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()

    class Meta:
        model = JobArray
        fields = [
            "id", "name", "queue", "owner", "spec", "size", "max_running", "created_at",
            "tasks", "progress",
        ]  # fmt: skip

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_tasks(self, obj: JobArray) -> list[int]:
        """The tasks' job ids, in index order."""
        return list(obj.task_ids or [])  # type: ignore[attr-defined]

    @extend_schema_field(ArrayProgressSerializer)
    def get_progress(self, obj: JobArray) -> dict[str, int]:
        progress = annotated_progress(obj)
        return {
            **{state: progress.by_state[state] for state in Job.State.values},
            "held_back": progress.held_back,
            "gpus_held": progress.gpus_held,
        }


class ArrayCancelSerializer(serializers.Serializer):
    cancelled = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="the ids of the tasks cancelled (none when every task had already ended)",
    )


class ArrayBeginTimeSerializer(serializers.Serializer):
    changed = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="the ids of the waiting tasks whose earliest start changed",
    )
    begin_at = serializers.DateTimeField(
        allow_null=True, help_text="the earliest start they now have (null: none, they queue)"
    )


@contextmanager
def _visible() -> Iterator[None]:
    """An array the caller may not see (or that went away meanwhile) is a 404."""
    try:
        yield
    except JobArray.DoesNotExist as exc:
        raise exceptions.NotFound() from exc


class JobArrayViewSet(AsciiIdLookup, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                      viewsets.GenericViewSet):  # fmt: skip
    """Job arrays the caller may see (those of their lines' queues and their own; on-call
    and admins every one), newest first. POST submits one; PATCH changes its bound;
    cancel/ and begin-time/ act on its tasks."""

    serializer_class = JobArraySerializer

    def get_queryset(self):
        qs = list_arrays_for_user(self.request.user)
        return arrays_with_progress(qs) if self.action in ("list", "retrieve") else qs

    def _answer(self, array_id: int) -> dict:
        """The array as ``GET arrays/{id}/`` shows it."""
        qs = arrays_with_progress(list_arrays_for_user(self.request.user))
        return JobArraySerializer(qs.get(pk=array_id)).data

    @extend_schema(request=ArraySubmitSerializer, responses={201: JobArraySerializer})
    def create(self, request: Request) -> Response:
        """Submit an array: one pending job per index, each the job the other fields ask for
        (``after`` included: every task waits for those jobs). All or none."""
        data = valid_body(ArraySubmitSerializer, request)
        spec = data.pop("array")
        array = submit_array(request.user, job_request(data), spec)
        return Response(self._answer(array.pk), status=status.HTTP_201_CREATED)

    @extend_schema(request=ArrayLimitSerializer, responses={200: JobArraySerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Change the bound (Slurm's ``scontrol update ArrayTaskThrottle``): the next cycle
        starts or holds back tasks by it; a lower bound stops no running task. The owner,
        their team lead or an admin."""
        array = self.get_object()
        body = valid_body(ArrayLimitSerializer, request)
        with _visible():
            set_max_running(request.user, array.pk, body["max_running"],
                            source_ip=client_ip(request))  # fmt: skip
        return Response(self._answer(array.pk))

    @extend_schema(request=None, responses={200: ArrayCancelSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel every active task (Slurm's ``scancel ARRAY``): a waiting one ends now, a
        running one once the loop has freed its GPUs. The owner, their team lead or an
        admin. It waits for a cycle under way (``cancel_array`` takes the cluster lock): a
        409 when the loop holds the cluster longer, nothing cancelled."""
        array = self.get_object()
        with _visible():
            try:
                cancelled = cancel_array(request.user, array.pk, source_ip=client_ip(request))
            except ClusterBusy as exc:
                return busy(exc)
        return Response({"cancelled": cancelled})

    @extend_schema(request=BeginTimeRequestSerializer, responses={200: ArrayBeginTimeSerializer})
    @action(detail=True, methods=["post"], url_path="begin-time")
    def begin_time(self, request: Request, pk: str | None = None) -> Response:
        """Change the earliest start of every waiting task (Slurm's ``scontrol update
        JobId=<array> StartTime=``), as ``POST jobs/{id}/begin-time/`` changes a job's; tasks
        that started or ended are left. The owner, their team lead or an admin. It waits for
        a cycle under way (the cluster lock, as cancelling the array)."""
        array = self.get_object()
        body = valid_body(BeginTimeRequestSerializer, request)
        with _visible():
            try:
                changed, begin = change_begin_times(request.user, array.pk, body["begin_at"],
                                             body.get("reason", ""), source_ip=client_ip(request))  # fmt: skip
            except ClusterBusy as exc:
                return busy(exc)
        return Response(ArrayBeginTimeSerializer({"changed": changed, "begin_at": begin}).data)
