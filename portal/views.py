"""Portal pages that belong to no single app: the home page."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.query_forms import takes_query
from quotas.models import BusinessLine
from scheduling.engine import explain
from scheduling.selectors import (
    QueueUsage,
    build_cluster_summary,
    build_line_usage,
    count_own_active_jobs,
)


@login_required
@takes_query()
def home(request: HttpRequest) -> HttpResponse:
    """The person's own active jobs, then the cluster at a glance: nodes by state, GPUs,
    lines against their contracts."""
    usage = build_line_usage()
    lines = [
        {"line": line, "usage": usage.get(line.pk, QueueUsage())}
        for line in BusinessLine.objects.all()
    ]
    return render(request, "portal/home.html", {
        "summary": build_cluster_summary(), "lines": lines, "own": _own_jobs(request.user),
    })  # fmt: skip


def _own_jobs(user: Any) -> list[tuple[str, str]]:
    """The person's active jobs in words, each with the job list filtered to them:
    ``[("2 jobs running", "/jobs/?state=running&mine=1"), ...]``; states with none left out."""
    return [
        (f"{explain.count(n, 'job')} {state}", f"/jobs/?state={state}&mine=1")
        for state, n in count_own_active_jobs(user).items()
        if n
    ]
