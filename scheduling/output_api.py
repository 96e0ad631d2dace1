"""REST: ``GET /api/v1/jobs/{id}/output/?attempt=N&bytes=N``, the tail of a job's output.

A mixin of ``scheduling.api.JobViewSet`` (the route is the viewset's). The reading and
its rules are ``scheduling/output.py``; here only the query and the answer.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import StrictIntegerField, StrictSerializer
from scheduling.output import DEFAULT_BYTES, MAX_BYTES, OutputUnavailable, read_job_output

RETRY_AFTER_S = 5


class OutputQuery(StrictSerializer):
    """The query: which run (default the latest) and how many bytes of its end."""

    attempt = StrictIntegerField(min_value=1, max_value=1_000_000, required=False,
                                 help_text="run 1..attempts (default: the latest); one the "
                                 "job has not had is a 400 naming its runs")  # fmt: skip
    bytes = StrictIntegerField(min_value=1, max_value=MAX_BYTES, required=False,
                               default=DEFAULT_BYTES, help_text="how much of the end to read")  # fmt: skip


class JobOutputSerializer(serializers.Serializer):
    """The answer (documentation only: ``JobOutput.as_dict`` builds it)."""

    job = serializers.IntegerField()
    state = serializers.CharField(help_text="the job's state when read")
    attempt = serializers.IntegerField(allow_null=True, help_text="the run read; null: none yet")
    attempts = serializers.IntegerField(help_text="runs launched so far (attempt 1..attempts)")
    text = serializers.CharField(
        help_text="the end of the run's output; escape sequences removed, other control "
        "and bidi characters written out (\\x07, \\u202e)"
    )
    truncated = serializers.BooleanField(help_text="the output was longer: this is its end")
    source = serializers.CharField(help_text="where it was read: a file, a pod, the simulator")
    reason = serializers.CharField(allow_null=True, help_text="why there is no output, or null")


def output_query(request: Request) -> dict:
    """The validated query (400 naming each bad parameter, one given twice included)."""
    twice = {name: ["given more than once; give it once"]
             for name, values in request.query_params.lists() if len(values) > 1}  # fmt: skip
    if twice:
        raise exceptions.ValidationError(twice)
    query = OutputQuery(data=request.query_params.dict())
    query.is_valid(raise_exception=True)
    return query.validated_data


class JobOutputActions:
    """``output``: the job's output, for its owner, their team lead, on-call and admins."""

    @extend_schema(
        parameters=[OutputQuery],
        responses={
            200: JobOutputSerializer,
            503: OpenApiResponse(description="the cluster could not answer now; try again "
                                 "(`Retry-After`); `{\"errors\": {\"cluster\": [...]}}`"),
        },
    )  # fmt: skip
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=None)
    def output(self, request: Request, pk: str | None = None) -> Response:
        """The end of a run's output (stdout and stderr): the latest run unless ``attempt``."""
        query = output_query(request)
        job = self.get_object()  # type: ignore[attr-defined]  # 404: not a job you may see
        try:
            out = read_job_output(request.user, job, attempt=query.get("attempt"),
                                  max_bytes=query["bytes"])  # fmt: skip
        except OutputUnavailable as exc:
            return Response(
                {"errors": {"cluster": [str(exc)]}},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        return Response(out.as_dict())
