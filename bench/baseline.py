"""The yardstick of ``bench_api`` (#16): the same stack serving a trivial authenticated insert.

``POST /api/v1/bench/baseline/`` with ``{"name": "..."}``: the API's own authentication
(``Authorization: Token``, or a session) and permission (signed in), the same parser and
middleware and web server as ``POST /api/v1/jobs/``, then one INSERT of one tiny row
(``bench.models.BaselineRow``) and a 201 answer. What a job submission does beyond that
(validation, the queue and its rules, the cluster's shape, the clock, the job and its
event in one transaction, its answer) is what ``bench_api`` reports as the ratio
"submissions/s ÷ trivial inserts/s" (docs/api.md, "Throughput").

Not part of the product: the route is mounted only when the web server's environment has
``BENCH_ENDPOINTS=1`` (``portal/urls.py`` asks ``urlpatterns()``), and never appears in the
OpenAPI schema, mounted or not (``exclude=True``), so clients, ``gpuctl`` and the
schemathesis run never see it. Use it on a throw-away benchmark stack only.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.urls import URLPattern, path
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bench.models import BaselineRow
from core.env import env_bool

ENV_VAR = "BENCH_ENDPOINTS"
ROUTE = "api/v1/bench/baseline/"
NAME_MAX = 100


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process mounts the benchmark endpoints (``BENCH_ENDPOINTS``, default off)."""
    return env_bool(ENV_VAR, False, environ)


class BaselineInsertView(APIView):
    """One row inserted per request, after the API's usual authentication and permission."""

    @extend_schema(exclude=True)
    def post(self, request: Request) -> Response:
        data = request.data
        name = data.get("name", "") if isinstance(data, Mapping) else None
        if not isinstance(name, str) or len(name) > NAME_MAX:
            raise ValidationError({"name": [f"a text of at most {NAME_MAX} characters"]})
        row = BaselineRow.objects.create(user=request.user, name=name)
        return Response({"id": row.pk, "name": row.name}, status=status.HTTP_201_CREATED)


def urlpatterns(environ: Mapping[str, str] | None = None) -> list[URLPattern]:
    """The baseline route when ``BENCH_ENDPOINTS`` is on, else nothing."""
    if not enabled(environ):
        return []
    return [path(ROUTE, BaselineInsertView.as_view(), name="bench-baseline")]
