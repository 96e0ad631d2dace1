"""Job page actions: hold (a running job: suspend, in two steps) and release.

Thin adapters over ``scheduling.hold_services`` (POST with CSRF; the services decide who
may, the page only hides what a viewer may not do). Suspending a running job stops it: the
page first shows what that means for its work (``core.confirm``), as cancel does.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.api import client_ip
from core.confirm import Confirmation, is_confirmed, render_confirmation
from scheduling.blast import job_blast_radius
from scheduling.engine.explain import count
from scheduling.hold_services import hold_job, release_job
from scheduling.models import Job
from scheduling.permissions import may_cancel
from scheduling.views import visible_job


def _suspend_confirmation(request: HttpRequest, job: Job, reason: str) -> HttpResponse:
    """The second step of suspending a running job: what it keeps or loses, then confirm."""
    blast = job_blast_radius(job)
    if job.checkpoint_path:
        figures = [(job.checkpoint_path, "it checkpoints there first, and resumes from it")]
    else:
        figures = [
            (f"{blast.gpu_hours_at_risk:.1f} GPU-hours",
             "of work may be lost: it has no checkpoint path, so unless it saves its own "
             "progress it restarts from the beginning when released"),
        ]  # fmt: skip
    figures.append((count(job.gpus, "GPU"), "go back to the queue once it has stopped"))
    return render_confirmation(request, Confirmation(
        title=f"Suspend job #{job.pk} ({job.name})",
        what=f"Job #{job.pk} is {job.state} on {job.gpus:,} GPUs. Suspending asks it to "
             "checkpoint and stop at the next cycle; it then waits, pending and held, until "
             "it is released. This is not a preemption.",
        button=f"Yes, suspend job #{job.pk}",
        action_url=request.path, back_url=f"/jobs/{job.pk}/",
        figures=figures, jobs=blast.jobs, jobs_caption="The job suspended",
        hidden=[("reason", reason)], fingerprint=blast.fingerprint(), as_of=blast.now,
    ))  # fmt: skip


@login_required
@require_POST
def job_hold(request: HttpRequest, job_id: int) -> HttpResponse:
    """Hold a job (POST ``reason``); a running one is suspended after a confirmation."""
    job = visible_job(request, job_id)
    reason = request.POST.get("reason", "")
    if (
        job.state == Job.State.RUNNING
        and may_cancel(request.user, job)
        and job.held_at is None
        and not is_confirmed(request.POST)
    ):
        return _suspend_confirmation(request, job, reason)
    try:
        job = hold_job(request.user, job.pk, reason, source_ip=client_ip(request))
    except ValidationError as exc:
        messages.error(request, "Not held: " + "; ".join(exc.messages))
    else:
        done = (
            "suspended: the next cycle checkpoints and stops it"
            if job.state != "pending"
            else "held"
        )
        messages.success(request, f"Job #{job.pk} {done}; it waits until released.")
    return redirect("scheduling:job-detail", job_id=job.pk)


@login_required
@require_POST
def job_release(request: HttpRequest, job_id: int) -> HttpResponse:
    """Release a held job (an admin hold: admins only, the service decides)."""
    job = visible_job(request, job_id)
    try:
        job = release_job(request.user, job.pk, source_ip=client_ip(request))
    except ValidationError as exc:
        messages.error(request, "Not released: " + "; ".join(exc.messages))
    else:
        messages.success(request, f"Job #{job.pk} released: it queues again from now.")
    return redirect("scheduling:job-detail", job_id=job.pk)
