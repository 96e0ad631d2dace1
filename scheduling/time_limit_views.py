"""Job page action: change a job's time limit (``scheduling.time_limit_services``).

A thin adapter (POST with CSRF; the service decides who may: lower, the owner, their team
lead or an admin; raise, an admin). The form's minutes are read as the API reads them: a
whole number in digits 0-9, anything else said on the page and nothing changed.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.api import client_ip
from core.security import is_ascii_number
from scheduling.time_limit_services import change_time_limit
from scheduling.time_limits import limit_words
from scheduling.views import say_refused, visible_job


@login_required
@require_POST
def job_time_limit(request: HttpRequest, job_id: int) -> HttpResponse:
    """Set the job's time limit (POST ``time_limit_minutes``, ``reason``)."""
    job = visible_job(request, job_id)
    given = request.POST.get("time_limit_minutes", "").strip()
    minutes = int(given) if is_ascii_number(given) and len(given) < 10 else given
    try:
        job = change_time_limit(request.user, job.pk, minutes, request.POST.get("reason", ""),
                                source_ip=client_ip(request))  # fmt: skip
    except (ValidationError, PermissionDenied) as exc:
        say_refused(request, "Time limit not changed: ", exc)
    else:
        limit = limit_words(job.time_limit_minutes or 0)
        messages.success(request, f"Job #{job.pk}'s time limit is now {limit} a run.")
    return redirect("scheduling:job-detail", job_id=job.pk)
