"""Job page action: change a waiting job's earliest start
(``scheduling.begin_time_services``).

A thin adapter (POST with CSRF; the service decides who may: the owner, their team lead or
an admin). The time is read in the viewer's zone as the submission form reads it
(``forms.BeginTimeForm``); empty clears it. Anything refused is said on the page and
nothing changes.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.api import client_ip
from scheduling.begin_time_services import change_begin_time
from scheduling.engine.explain import when
from scheduling.forms import BeginTimeForm
from scheduling.views import say_refused, visible_job

REFUSED = "Earliest start not changed: "


@login_required
@require_POST
def job_begin_time(request: HttpRequest, job_id: int) -> HttpResponse:
    """Set the job's earliest start (POST ``begin_at``, in the viewer's zone; ``reason``)."""
    job = visible_job(request, job_id)
    form = BeginTimeForm(request.POST)
    if not form.is_valid():
        messages.error(request, REFUSED + "; ".join(form.errors["begin_at"]))
        return redirect("scheduling:job-detail", job_id=job.pk)
    try:
        job = change_begin_time(request.user, job.pk, form.cleaned_data["begin_at"],
                                request.POST.get("reason", ""), source_ip=client_ip(request))  # fmt: skip
    except (ValidationError, PermissionDenied) as exc:
        say_refused(request, REFUSED, exc)
    else:
        if job.begin_at:
            messages.success(
                request, f"Job #{job.pk} does not start before {when(job.begin_at.timestamp())}."
            )
        else:
            messages.success(request, f"Job #{job.pk} has no earliest start: it queues from now.")
    return redirect("scheduling:job-detail", job_id=job.pk)
