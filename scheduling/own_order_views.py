"""Job page action: put a waiting job first among its owner's waiting jobs
(``scheduling.own_order_services``, Slurm's ``scontrol top``).

A thin adapter (POST with CSRF, no fields; the service decides who may: the owner, their
team lead or an admin). A refusal is said on the page and nothing changes.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.api import client_ip
from scheduling.own_order_services import put_first
from scheduling.views import say_refused, visible_job


@login_required
@require_POST
def job_top(request: HttpRequest, job_id: int) -> HttpResponse:
    """Put the job first among its owner's waiting jobs of its line and tier."""
    job = visible_job(request, job_id)
    try:
        job = put_first(request.user, job.pk, source_ip=client_ip(request))
    except (ValidationError, PermissionDenied) as exc:
        say_refused(request, "Not put first: ", exc)
    else:
        whose = "your" if job.owner_id == request.user.pk else f"{job.owner.username}'s"
        messages.success(request, f"Job #{job.pk} is now first among {whose} waiting jobs of "
                                  f"{job.queue.business_line.name}, tier {job.tier}; the next "
                                  "cycle places it.")  # fmt: skip
    return redirect("scheduling:job-detail", job_id=job.pk)
