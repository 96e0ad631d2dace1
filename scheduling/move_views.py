"""Job page action: move a waiting job to another queue (``scheduling.move_services``,
Slurm's ``scontrol update Partition=``).

A thin adapter (POST with CSRF: ``queue``, ``reason``; the service decides who may and
where). A refusal, or the loop holding the cluster past the wait, is said on the page and
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
from scheduling.cluster_lock import ClusterBusy
from scheduling.move_services import move_job
from scheduling.views import say_refused, visible_job


@login_required
@require_POST
def job_move(request: HttpRequest, job_id: int) -> HttpResponse:
    """Move the job to the queue POSTed (``queue``: its id), with an optional ``reason``."""
    job = visible_job(request, job_id)
    try:
        job = move_job(request.user, job.pk, request.POST.get("queue", "").strip(),
                       request.POST.get("reason", ""), source_ip=client_ip(request))  # fmt: skip
    except (ValidationError, PermissionDenied, ClusterBusy) as exc:
        say_refused(request, "Not moved: ", exc)
    else:
        messages.success(request, f"Job #{job.pk} is now in queue {job.queue.name}; it waits "
                                  "there from the next cycle.")  # fmt: skip
    return redirect("scheduling:job-detail", job_id=job.pk)
