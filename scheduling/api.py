"""REST: jobs (list, detail, submit, cancel, hold, release, time limit, earliest start, top, move), simulator drills and a loop iteration on demand.

The node API is ``scheduling.nodes.api``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django_filters
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from core import clock
from core.api import (
    AsciiIdLookup,
    LineTextField,
    NameField,
    SharedFields,
    SharedFieldsModelSerializer,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    client_ip,
)
from core.filters import MINE_CHOICES, YES, MineFilter
from core.security import is_ascii_number
from core.time_text import TIME_HELP
from quotas.models import Tier
from scheduling import dependencies, limits, verdict_text
from scheduling.begin_time_services import change_begin_time
from scheduling.cluster_lock import ClusterBusy
from scheduling.hold_services import REASON_MAX, hold_job, release_job
from scheduling.models import Job
from scheduling.move_services import move_job
from scheduling.nodes.faults import FAULT_KINDS
from scheduling.nodes.services import inject_fault
from scheduling.output_api import JobOutputActions
from scheduling.own_order_services import put_first
from scheduling.permissions import DrivesSimulator, OperatesNodes
from scheduling.selectors import (
    build_placement,
    held_filter,
    list_jobs_for_user,
    visible_array_ids,
    visible_job_ids,
)
from scheduling.services import JobRequest, cancel_job, submit_job
from scheduling.time_limit_services import change_time_limit


def id_list(most: int, help_text: str) -> serializers.ListField:
    """An optional list of at most ``most`` ids of jobs or arrays (whole numbers that fit a
    bigint; which ones may be named is the service's rule)."""
    return serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=limits.JOB_ID_MAX),
        max_length=most, required=False, help_text=help_text,
    )  # fmt: skip


@extend_schema_field(OpenApiTypes.DATETIME)
class TimeText(serializers.CharField):
    """A time as sent (RFC 3339, zone required), read by the service
    (``core.time_text.parse_time``): DRF's own ``DateTimeField`` would take a time without a
    zone in the server's zone."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=64, **kwargs)


class JobSubmitSerializer(SharedFields, serializers.Serializer):
    """The submission body of API.md; types and bounds only (rules live in the service)."""

    name = NameField(min_length=1, max_length=limits.NAME_MAX, trim_whitespace=True)
    queue = serializers.CharField(max_length=80, help_text="queue id or name")
    tier = serializers.ChoiceField(choices=Tier.choices, required=False)
    gpus = StrictIntegerField(min_value=1, max_value=limits.GPUS_MAX)
    gpus_per_node = StrictIntegerField(
        min_value=1, max_value=limits.GPUS_PER_NODE_MAX, required=False
    )
    gpu_memory_gb = StrictIntegerField(
        min_value=1, max_value=limits.GPU_MEMORY_GB_MAX, required=False
    )
    rdma = serializers.BooleanField(required=False, allow_null=True, default=None)
    exclusive_node = serializers.BooleanField(required=False, default=False)
    avoid_inference = serializers.BooleanField(required=False, default=False)
    preemptible = serializers.BooleanField(required=False, allow_null=True, default=None)
    max_retries = StrictIntegerField(
        min_value=0, max_value=limits.MAX_RETRIES_MAX, required=False, default=3
    )
    checkpoint_path = serializers.CharField(
        max_length=limits.CHECKPOINT_PATH_MAX, required=False, allow_blank=True, default=""
    )
    checkpoint_interval_minutes = StrictIntegerField(
        min_value=1, max_value=limits.CHECKPOINT_INTERVAL_MAX, required=False, default=60
    )
    estimated_runtime_minutes = StrictIntegerField(
        min_value=1, max_value=limits.RUNTIME_MAX_MINUTES, required=False
    )
    time_limit_minutes = StrictIntegerField(
        min_value=1, max_value=limits.RUNTIME_MAX_MINUTES, required=False,
        help_text="the longest one run may last, as Slurm's --time: a run that reaches it is "
        "asked to checkpoint and stop, and the job fails (time limit), with no retry",
    )  # fmt: skip
    begin_at = TimeText(
        required=False, allow_null=True,
        help_text=f"not started before this (Slurm's --begin), {TIME_HELP}; a time already "
        "past: no wait; at most 366 days ahead",
    )  # fmt: skip
    model_name = NameField(
        max_length=limits.MODEL_NAME_MAX, required=False, allow_blank=True, default=""
    )
    sim_duration_minutes = StrictIntegerField(
        min_value=1, max_value=limits.RUNTIME_MAX_MINUTES, required=False
    )
    after = id_list(
        limits.AFTER_MAX,
        "ids of jobs that must all succeed (or end, or end without succeeding: after_condition) "
        "before this one may start",
    )
    after_arrays = id_list(
        limits.AFTER_ARRAYS_MAX,
        "ids of job arrays every task of which must succeed (or end; or end, not all succeeded: "
        "after_condition) before this one may start",
    )
    after_corresponding = id_list(
        limits.AFTER_ARRAYS_MAX,
        "a job array's only (POST arrays/): ids of job arrays each of its tasks waits for the "
        "task of the same index of (to succeed, end, or end without succeeding: "
        "after_condition; Slurm's aftercorr)",
    )
    after_condition = serializers.ChoiceField(
        choices=Job.AfterCondition.choices, required=False,
        help_text="what the jobs of after and the tasks of after_arrays must have done: "
        "succeeded (the default, Slurm's afterok), ended, whatever the outcome (afterany), or "
        "failed or been cancelled (afternotok; an array: all its tasks ended, not all "
        "succeeded)",
    )  # fmt: skip
    singleton = serializers.BooleanField(
        required=False, default=False,
        help_text="one at a time by name (Slurm's singleton): also wait for your older active "
        "jobs of the same name to end, whatever the outcome",
    )  # fmt: skip

    def validate(self, attrs: dict) -> dict:
        unknown = (
            set(self.initial_data) - set(self.fields)
            if hasattr(self.initial_data, "keys")
            else set()
        )
        if unknown:
            raise serializers.ValidationError(
                {name[:50]: ["unknown field"] for name in sorted(unknown)[:20]}
            )
        return attrs


def job_request(data: dict) -> JobRequest:
    """The ``JobRequest`` of a body ``JobSubmitSerializer`` validated (a job's, an array's)."""
    return JobRequest(**data)


class JobSerializer(SharedFieldsModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    queue = serializers.CharField(source="queue.name", read_only=True)
    business_line = serializers.CharField(source="queue.business_line.name", read_only=True)
    pending_reason = serializers.SerializerMethodField()
    progress_seconds = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id", "name", "owner", "queue", "business_line", "tier", "gpus", "gpus_per_node",
            "gpu_memory_gb", "rdma", "exclusive_node", "avoid_inference", "preemptible",
            "max_retries", "checkpoint_path", "checkpoint_interval_minutes",
            "estimated_runtime_minutes", "time_limit_minutes", "begin_at", "first_among_own_at",
            "model_name", "state", "pending_reason", "queue_position", "estimated_start", "preemption_count", "retry_count",
            "progress_seconds", "last_checkpoint_at", "borrowed", "submitted_at", "started_at",
            "finished_at", "failure_reason", "array", "array_index",
        ]  # fmt: skip
        extra_kwargs = {
            "array": {"help_text": "the job array it is a task of (its id), or null"},
            "time_limit_minutes": {
                "help_text": "the longest one run may last (Slurm's --time), or null: none"
            },
            "array_index": {"help_text": "its index in that array, or null"},
            "begin_at": {
                "help_text": "not started before this (Slurm's --begin), or null: no wait"
            },
            "first_among_own_at": {
                "help_text": "when it was put first among its owner's waiting jobs (top/, "
                "Slurm's scontrol top), or null: never"
            },
        }

    @extend_schema_field(OpenApiTypes.DOUBLE)
    def get_progress_seconds(self, obj: Job) -> float:
        """Seconds of work done: a run that is on counts to now (``Job.progress_at``)."""
        return obj.progress_at(clock.now())

    def get_pending_reason(self, obj: Job) -> dict | None:
        """API.md's ``{code, message, details}`` plus ``remedy``, and the same verdict for
        people, formatted once (``scheduling.verdict_text``) for the page and ``gpuctl``:
        ``facts`` (each detail with its label and unit) and ``estimated_start_text`` (the
        one estimated start, or ``unknown: <why>``)."""
        if obj.state != Job.State.PENDING or not obj.pending_code:
            return None
        return {
            "code": obj.pending_code,
            "message": obj.pending_message,
            "details": obj.pending_details,
            "remedy": obj.pending_remedy,
            "facts": verdict_text.facts(obj.pending_details),
            "estimated_start_text": verdict_text.estimate(obj.estimated_start, obj.pending_details),
        }


class HoldSerializer(serializers.Serializer):
    """A job's hold (``scheduling.holds``): who, since when, why, and its kind (``admin``:
    an admin's hold of someone else's job, which only an admin may release)."""

    by = serializers.CharField(allow_null=True)
    at = serializers.DateTimeField()
    reason = serializers.CharField(allow_blank=True)
    kind = serializers.ChoiceField(choices=["user", "admin"])


class HoldRequestSerializer(StrictSerializer):
    """The body of ``hold/``: an optional reason (required for an admin's hold of someone
    else's job; the service checks it: length, control and invisible characters)."""

    reason = LineTextField(
        max_length=REASON_MAX, required=False, allow_blank=True, trim_whitespace=False,
        help_text="why (shown on the job and in the audit log)",
    )  # fmt: skip


class MoveRequestSerializer(StrictSerializer):
    """The body of ``move/``: the queue to move to and an optional reason (the service
    checks who may and where: a queue the job's owner may submit to, whose rules it
    meets)."""

    queue = serializers.CharField(max_length=80, help_text="queue id or name")
    reason = LineTextField(
        max_length=REASON_MAX, required=False, allow_blank=True, trim_whitespace=False,
        help_text="why (shown on the job and in the audit log)",
    )  # fmt: skip


class TimeLimitRequestSerializer(StrictSerializer):
    """The body of ``time-limit/``: the new limit and an optional reason (the service checks
    who may: lower, the owner, their team lead or an admin; raise, an admin)."""

    time_limit_minutes = StrictIntegerField(
        min_value=1, max_value=limits.RUNTIME_MAX_MINUTES,
        help_text="the longest one run may last from now on (its run on now counts from its "
        "start)",
    )  # fmt: skip
    reason = LineTextField(
        max_length=REASON_MAX, required=False, allow_blank=True, trim_whitespace=False,
        help_text="why (shown on the job and in the audit log)",
    )  # fmt: skip


class BeginTimeRequestSerializer(StrictSerializer):
    """The body of ``begin-time/``: the new earliest start (null: none) and an optional
    reason (the service checks who may: the owner, their team lead or an admin)."""

    begin_at = TimeText(
        allow_null=True, allow_blank=True,
        help_text=f"not started before this (Slurm's --begin), {TIME_HELP}; null "
        "or a time already past: none, it queues from now",
    )  # fmt: skip
    reason = LineTextField(
        max_length=REASON_MAX, required=False, allow_blank=True, trim_whitespace=False,
        help_text="why (shown on the job and in the audit log)",
    )  # fmt: skip


class JobEventSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    kind = serializers.CharField()
    message = serializers.CharField()


class PlacementSerializer(serializers.Serializer):
    node = serializers.CharField()
    gpus = serializers.ListField(child=serializers.IntegerField())
    node_gpus = serializers.IntegerField(help_text="the node's GPUs (all of them: used whole)")


class JobDetailSerializer(JobSerializer):
    placement = serializers.SerializerMethodField()
    events = JobEventSerializer(many=True, read_only=True)
    after = serializers.SerializerMethodField()
    waiting_for = serializers.SerializerMethodField()
    after_arrays = serializers.SerializerMethodField()
    waiting_for_arrays = serializers.SerializerMethodField()
    hold = serializers.SerializerMethodField()
    time_limit_at = serializers.DateTimeField(
        read_only=True, allow_null=True,
        help_text="when its run on now reaches its time limit and is asked to stop (cluster "
        "time), or null: no limit, or no run on",
    )  # fmt: skip

    class Meta(JobSerializer.Meta):
        fields = [
            *JobSerializer.Meta.fields, "placement", "events", "after", "waiting_for",
            "after_arrays", "waiting_for_arrays", "after_condition", "singleton", "hold",
            "time_limit_at",
        ]  # fmt: skip

    @extend_schema_field(HoldSerializer(allow_null=True))
    def get_hold(self, obj: Job) -> dict | None:
        """The job's hold while it is active and held, else null."""
        if obj.held_at is None or not obj.is_active:
            return None
        by = obj.held_by.username if obj.held_by else None
        hold = {"by": by, "at": obj.held_at, "reason": obj.hold_reason, "kind": obj.hold_kind}
        return HoldSerializer(hold).data

    @extend_schema(responses=PlacementSerializer(many=True))
    def get_placement(self, obj: Job) -> list[dict]:
        return build_placement(obj)

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_after(self, obj: Job) -> list[int]:
        """The ids of the jobs it starts after (``Job.after``)."""
        return [job_id for job_id, _ in self._after(obj)]

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_waiting_for(self, obj: Job) -> list[int]:
        """Those of ``after`` that have not met its ``after_condition`` (succeeded, or
        ended), while it is pending (else none)."""
        if obj.state != Job.State.PENDING:
            return []
        meets = Job.MEETS[obj.after_condition]
        return [job_id for job_id, state in self._after(obj) if state not in meets]

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_after_arrays(self, obj: Job) -> list[int]:
        """The ids of the arrays every task of which it starts after (``Job.after_arrays``)."""
        return sorted(array.pk for array in obj.after_arrays.all())

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_waiting_for_arrays(self, obj: Job) -> list[int]:
        """Those of ``after_arrays`` that have not met its ``after_condition`` (a task has
        not done its part, ``Job.TASK_MEETS``; waited for to fail, all its tasks succeeded),
        while it is pending (else none; one query when it waits for any, two to fail)."""
        arrays = self.get_after_arrays(obj)
        if obj.state != Job.State.PENDING or not arrays:
            return []
        waiting = set(
            Job.objects.filter(array_id__in=arrays)
            .exclude(state__in=Job.TASK_MEETS[obj.after_condition])
            .values_list("array_id", flat=True)
            .distinct()
        )
        if obj.after_condition == Job.AfterCondition.FAILED:
            waiting.update(dependencies.arrays_all_succeeded(arrays))
        return sorted(waiting)

    def _after(self, obj: Job) -> list[tuple[int, str]]:
        """``(id, state)`` of the jobs it starts after, in id order (``prefetch_related``,
        or what the submit service left: no query)."""
        return sorted((job.pk, job.state) for job in obj.after.all())


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": limits.JOB_ID_MAX})
class IdFilter(django_filters.CharFilter):
    """An object's id in a query: documented as the whole number it must be; read as text
    and checked by the filter's method (digits 0-9, in range: else a 400, never a 500)."""


class JobFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=Job.State.choices)
    queue = django_filters.CharFilter(method="filter_queue")
    owner = django_filters.CharFilter(field_name="owner__username")
    name = django_filters.CharFilter(field_name="name", label="exactly this job name")
    mine = MineFilter("owner")
    held = django_filters.ChoiceFilter(
        choices=MINE_CHOICES, method="filter_held",
        label="1/true: only jobs on hold; 0/false: the others",
    )  # fmt: skip

    array = IdFilter(method="filter_array", label="only the tasks of this job array (its id)")

    class Meta:
        model = Job
        fields = ["state", "queue", "owner", "mine", "held", "array"]

    def filter_array(self, qs, name, value: str):
        if not is_ascii_number(value) or not 1 <= int(value) <= limits.JOB_ID_MAX:
            raise serializers.ValidationError({name: ["an array id: a whole number, at least 1"]})
        return qs.filter(array_id=int(value))

    def filter_held(self, qs, name, value: str):
        return qs.filter(held_filter(value in YES))

    def filter_queue(self, qs, name, value: str):
        return (
            qs.filter(queue_id=int(value))
            if is_ascii_number(value)
            else qs.filter(queue__name=value)
        )


class JobViewSet(AsciiIdLookup, JobOutputActions,
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):  # fmt: skip
    """Jobs visible to the caller; POST submits one (see API.md for the body)."""

    filterset_class = JobFilter

    def get_queryset(self):
        qs = list_jobs_for_user(self.request.user)
        if self.action == "retrieve":
            qs = qs.select_related("held_by").prefetch_related("events", "after", "after_arrays")
        return qs

    def get_serializer_class(self):
        if self.action == "create":
            return JobSubmitSerializer
        return JobDetailSerializer if self.action == "retrieve" else JobSerializer

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """One job. Its ``pending_reason`` also has ``job_links``: for each job the verdict
        names (``verdict_text.job_refs``) that the caller may see, the address of that job's
        page (the job page's live updates link them as the page does); ``array_links`` the
        same for the arrays it names (``verdict_text.array_refs``). Added here, not in
        the serializer: its fields are shared and know no request (``SharedFields``)."""
        response = super().retrieve(request, *args, **kwargs)
        reason = response.data.get("pending_reason")
        if reason is not None:
            refs = verdict_text.job_refs(reason["details"])
            reason["job_links"] = {
                str(job_id): reverse("scheduling:job-detail", args=[job_id])
                for job_id in sorted(visible_job_ids(request.user, refs))
            }
            arrays = verdict_text.array_refs(reason["details"])
            reason["array_links"] = {
                str(array_id): reverse("scheduling:array-detail", args=[array_id])
                for array_id in sorted(visible_array_ids(request.user, arrays))
            }
        return response

    @extend_schema(request=JobSubmitSerializer, responses={201: JobDetailSerializer})
    def create(self, request: Request, *args, **kwargs) -> Response:
        job = submit_job(request.user, job_request(valid_body(JobSubmitSerializer, request)))
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        job = cancel_job(request.user, job.pk, source_ip=client_ip(request))
        return Response(JobDetailSerializer(job).data)

    @extend_schema(request=HoldRequestSerializer, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def hold(self, request: Request, pk: str | None = None) -> Response:
        """Hold the job: a pending one waits until released; a running one is suspended
        (checkpointed and stopped by the next cycle, then pending and held). The owner, their
        team lead or an admin; an admin's hold of someone else's job needs a reason."""
        job = self.get_object()
        body = valid_body(HoldRequestSerializer, request)
        job = hold_job(request.user, job.pk, body.get("reason", ""), source_ip=client_ip(request))
        return Response(JobDetailSerializer(job).data)

    @extend_schema(request=TimeLimitRequestSerializer, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"], url_path="time-limit")
    def time_limit(self, request: Request, pk: str | None = None) -> Response:
        """Change the job's time limit (Slurm's ``scontrol update TimeLimit=``): the owner,
        their team lead or an admin may lower it; only an admin may raise it."""
        job = self.get_object()
        body = valid_body(TimeLimitRequestSerializer, request)
        job = change_time_limit(request.user, job.pk, body["time_limit_minutes"],
                                body.get("reason", ""), source_ip=client_ip(request))  # fmt: skip
        return Response(JobDetailSerializer(job).data)

    @extend_schema(request=BeginTimeRequestSerializer, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"], url_path="begin-time")
    def begin_time(self, request: Request, pk: str | None = None) -> Response:
        """Change a waiting job's earliest start (Slurm's ``scontrol update StartTime=``):
        the owner, their team lead or an admin; null clears it (it queues from now)."""
        job = self.get_object()
        body = valid_body(BeginTimeRequestSerializer, request)
        job = change_begin_time(request.user, job.pk, body["begin_at"], body.get("reason", ""),
                                source_ip=client_ip(request))  # fmt: skip
        return Response(JobDetailSerializer(job).data)

    @extend_schema(request=MoveRequestSerializer, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def move(self, request: Request, pk: str | None = None) -> Response:
        """Move a waiting job to another queue (Slurm's ``scontrol update Partition=``), one
        its owner may submit to and whose rules it meets. The owner, their team lead or an
        admin. It waits for a cycle under way (the cluster lock): past that, a 409."""
        job = self.get_object()
        body = valid_body(MoveRequestSerializer, request)
        try:
            job = move_job(request.user, job.pk, body["queue"], body.get("reason", ""),
                           source_ip=client_ip(request))  # fmt: skip
        except ClusterBusy as exc:
            return busy(exc)
        return Response(JobDetailSerializer(job).data)

    @extend_schema(request=None, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def top(self, request: Request, pk: str | None = None) -> Response:
        """Put a waiting job first among its owner's waiting jobs of its line and tier
        (Slurm's ``scontrol top``): it takes the first of their places in the queue; nobody
        else's job moves. The owner, their team lead or an admin."""
        job = self.get_object()
        job = put_first(request.user, job.pk, source_ip=client_ip(request))
        return Response(JobDetailSerializer(job).data)

    @extend_schema(request=None, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        """Release a held or suspended job: it queues again from now (an admin hold: admins
        only)."""
        job = self.get_object()
        job = release_job(request.user, job.pk, source_ip=client_ip(request))
        return Response(JobDetailSerializer(job).data)


class FaultSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=list(FAULT_KINDS))
    node = serializers.CharField(max_length=64)


class AdvanceSerializer(StrictSerializer):
    seconds = StrictFloatField(min_value=1, max_value=7 * 86400)


class CycleSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    cluster_time = serializers.CharField()
    duration_ms = serializers.FloatField()
    starts = serializers.IntegerField()
    preemptions = serializers.IntegerField()
    finished = serializers.IntegerField()
    failed = serializers.IntegerField()
    requeued = serializers.IntegerField()
    pending = serializers.IntegerField()
    pending_by_reason = serializers.DictField(child=serializers.IntegerField())


def busy(exc: ClusterBusy) -> Response:
    """409 when the loop holds the cluster past the service's wait."""
    return Response({"errors": {"non_field_errors": [str(exc)]}}, status=status.HTTP_409_CONFLICT)


def _unless_busy(call: Callable[[], Any]) -> Response:
    """``call()``'s result, or 409 when the loop holds the cluster past the service's wait."""
    try:
        return Response(call())
    except ClusterBusy as exc:
        return busy(exc)


def valid_body(serializer_class: type[serializers.Serializer], request: Request) -> dict:
    """The request's body validated by ``serializer_class`` (a 400 naming each bad field)."""
    body = serializer_class(data=request.data)
    body.is_valid(raise_exception=True)
    return body.validated_data


class SimulatorFaultView(GenericAPIView):
    """Inject a fault on a simulated node (on-call, admin; simulator backend only)."""

    serializer_class = FaultSerializer
    permission_classes = [IsAuthenticated, OperatesNodes]

    @extend_schema(request=FaultSerializer, responses={200: FaultSerializer})
    def post(self, request: Request) -> Response:
        data = valid_body(FaultSerializer, request)
        return _unless_busy(
            lambda: inject_fault(request.user, data["kind"], data["node"], client_ip(request))
        )


class SimulatorAdvanceView(GenericAPIView):
    """Move the simulated clock forward (admin; simulator backend only)."""

    serializer_class = AdvanceSerializer
    permission_classes = [IsAuthenticated, DrivesSimulator]

    @extend_schema(request=AdvanceSerializer, responses={200: dict})
    def post(self, request: Request) -> Response:
        from scheduling.sim_services import advance_clock

        data = valid_body(AdvanceSerializer, request)
        return _unless_busy(
            lambda: advance_clock(request.user, data["seconds"], client_ip(request))
        )


class SchedulerCycleView(GenericAPIView):
    """Run one full loop iteration now and return its summary (admin)."""

    permission_classes = [IsAuthenticated, DrivesSimulator]

    # Runs inline, not as a queued task: API.md promises the cycle's summary in the response.

    serializer_class = CycleSerializer

    @extend_schema(request=None, responses={200: CycleSerializer})
    def post(self, request: Request) -> Response:
        from scheduling.cycle import cycle_payload
        from scheduling.sim_services import run_cycle_now

        return _unless_busy(lambda: cycle_payload(run_cycle_now(request.user, client_ip(request))))
