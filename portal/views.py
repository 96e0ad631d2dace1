"""Portal pages that belong to no single app: the home page."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.query_forms import takes_query
from quotas.models import BusinessLine
from scheduling.selectors import QueueUsage, build_cluster_summary, build_line_usage


@login_required
@takes_query()
def home(request: HttpRequest) -> HttpResponse:
    """The cluster at a glance: nodes by state, GPUs, lines against their contracts."""
    usage = build_line_usage()
    lines = [
        {"line": line, "usage": usage.get(line.pk, QueueUsage())}
        for line in BusinessLine.objects.all()
    ]
    return render(request, "portal/home.html", {"summary": build_cluster_summary(), "lines": lines})
