"""The job array page (``/arrays/<id>/``): where its tasks stand, its tasks, and for whoever
may act on it a form to change its bound and a button to cancel every active task.

Thin adapters over ``scheduling.array_services`` (POST with CSRF; the services decide who
may, the page only hides what a viewer may not do, and the views refuse with a 403 before
asking them). Cancelling the array loses the running tasks' work: the page first shows
what (``core.confirm``), as cancelling a running job does. An array the viewer may not see
is a 404, as a job is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from core.api import client_ip
from core.confirm import Confirmation, is_confirmed, render_confirmation
from core.query_forms import takes_query
from scheduling.array_services import cancel_array, change_begin_times, set_max_running
from scheduling.begin_time_views import REFUSED
from scheduling.blast import BlastRadius, array_blast_radius
from scheduling.cluster_lock import ClusterBusy
from scheduling.engine.explain import count, verb, when
from scheduling.forms import ArrayBoundForm, ArrayPageForm, BeginTimeForm
from scheduling.models import JobArray
from scheduling.permissions import may_cancel
from scheduling.selectors import (
    ArrayProgress,
    array_progress,
    list_array_dependents,
    list_arrays_for_user,
)
from scheduling.views import JOBS_PER_PAGE, code_titles, say_refused

# ``array``: the related manager sets each task's array from it (deferred: a query a task)
TASK_FIELDS = ("id", "array", "array_index", "state", "pending_code", "pending_message",
               "estimated_start", "started_at", "finished_at", "after_condition")  # fmt: skip
ONLY_ACTORS = "only the array's owner, their team lead or an admin may act on it"


def visible_array(request: HttpRequest, array_id: int) -> JobArray:
    """The array if the user may see it, else 404 (whether or not it exists)."""
    array = list_arrays_for_user(request.user).filter(pk=array_id).first()
    if array is None:
        raise Http404("no such array")
    return array


def acting_array(request: HttpRequest, array_id: int) -> JobArray:
    """The array if the user may act on it: 404 if they may not see it, else 403."""
    array = visible_array(request, array_id)
    if not may_cancel(request.user, array):
        raise PermissionDenied(ONLY_ACTORS)
    return array


def state_counts(progress: ArrayProgress) -> list[tuple[str, int]]:
    """``(state, tasks)`` for the states the array's tasks are in, in the states' order."""
    return [(state, n) for state, n in progress.by_state.items() if n]


def render_array(
    request: HttpRequest, array: JobArray, bound_form: ArrayBoundForm | None = None,
    status: int = 200,
) -> HttpResponse:  # fmt: skip
    """The array page; ``bound_form``: a refused bound, shown with its errors."""
    query = ArrayPageForm(request.GET)
    tasks = array.tasks.only(*TASK_FIELDS).order_by("array_index")
    if not query.is_valid():  # the page says why; no tasks are listed (as the job list)
        tasks, status = tasks.none(), 400
    page = Paginator(tasks, JOBS_PER_PAGE).get_page(query.cleaned_data.get("page"))
    for task in page:
        task.code_title = code_titles(task.after_condition).get(
            task.pending_code, task.pending_code
        )
    progress = array_progress(array)
    may_act = may_cancel(request.user, array)
    initial = {"max_running": "" if array.max_running is None else array.max_running}
    context = {
        "array": array,
        "progress": progress,
        "states": state_counts(progress),
        "page": page,
        "query": "",
        "list_url": reverse("scheduling:array-detail", args=[array.pk]),
        "page_form": query,
        "may_act": may_act,
        "bound_form": bound_form or ArrayBoundForm(initial=initial),
        # the jobs waiting for every task of it to succeed, those the viewer may see
        "dependents": list_array_dependents(request.user, array),
    }
    return render(request, "scheduling/array_detail.html", context, status=status)


@login_required
@require_GET
@takes_query("page")
def array_detail(request: HttpRequest, array_id: int) -> HttpResponse:
    """One array: its spec, bound, counts by state, GPUs held, and its tasks by index."""
    return render_array(request, visible_array(request, array_id))


def _service(request: HttpRequest, call: Callable[..., Any], array: JobArray, *args: Any) -> Any:
    """``call(user, array id, *args, source_ip=…)``; an array gone from the user's sight
    meanwhile is a 404, as on the page."""
    try:
        return call(request.user, array.pk, *args, source_ip=client_ip(request))
    except JobArray.DoesNotExist:
        raise Http404("no such array") from None


@login_required
@require_POST
def array_bound(request: HttpRequest, array_id: int) -> HttpResponse:
    """Change how many tasks may run at once (POST ``max_running``: a number, or empty for
    no bound). A refused value: the array page again, with why, and nothing changed."""
    array = acting_array(request, array_id)
    form = ArrayBoundForm(request.POST)
    if form.is_valid():
        try:
            array = _service(request, set_max_running, array, form.cleaned_data["max_running"])
        except ValidationError as exc:
            for message in exc.message_dict.get("max_running", exc.messages):
                form.add_error("max_running", message)
    if not form.is_valid():
        return render_array(request, array, form, status=400)
    bound = array.max_running
    said = "no bound" if bound is None else f"at most {count(bound, 'task')} at once"
    messages.success(request, f"Array {array.pk} now runs {said}; the next cycle follows it.")
    return redirect("scheduling:array-detail", array_id=array.pk)


@login_required
@require_POST
def array_begin_time(request: HttpRequest, array_id: int) -> HttpResponse:
    """Change every waiting task's earliest start (POST ``begin_at``, in the viewer's zone,
    empty for none; ``reason``). Refused: said on the page, nothing changed."""
    array = acting_array(request, array_id)
    form = BeginTimeForm(request.POST)
    if not form.is_valid():
        messages.error(request, REFUSED + "; ".join(form.errors["begin_at"]))
        return redirect("scheduling:array-detail", array_id=array.pk)
    try:
        changed, begin = _service(request, change_begin_times, array,
                                  form.cleaned_data["begin_at"], request.POST.get("reason", ""))  # fmt: skip
    except (ClusterBusy, ValidationError) as exc:
        say_refused(request, REFUSED, exc)
    else:
        n = len(changed)
        said = (
            f"{verb(n, 'does', 'do')} not start before {when(begin.timestamp())}"
            if begin
            else f"{verb(n, 'queues', 'queue')} from now"
        )
        messages.success(request, f"Array {array.pk}: {count(n, 'waiting task')} {said}.")
    return redirect("scheduling:array-detail", array_id=array.pk)


def _cancel_confirmation(
    request: HttpRequest, array: JobArray, progress: ArrayProgress, blast: BlastRadius,
    fingerprint: str,
) -> HttpResponse:  # fmt: skip
    """The second step of cancelling an array: the running tasks' work lost, then confirm."""
    active, running = progress.active, blast.job_count
    waiting = active - running
    tasks = count(active, "active task")
    return render_confirmation(request, Confirmation(
        title=f"Cancel the {tasks} of array {array.pk} ({array.name})",
        what=f"Array {array.pk} has {tasks}: {running:,} holding GPUs and {waiting:,} "
             "waiting. Cancelling ends every one of them and cannot be undone: the waiting "
             "ones now, the running ones once the next cycle has freed their GPUs.",
        button=f"Yes, cancel all {tasks}",
        action_url=request.path, back_url=f"/arrays/{array.pk}/",
        figures=[
            *([(f"{blast.gpu_hours_at_risk:.1f} GPU-hours",
                "of work since the running tasks' last checkpoints (or starts) are lost"),
               (count(blast.gpus_hit, "GPU"),
                f"{verb(blast.gpus_hit, 'is', 'are')} released: those tasks end for good")]
              if running else []),
            *([(count(waiting, "waiting task"), f"never {verb(waiting, 'starts', 'start')}")]
              if waiting else []),
        ],
        jobs=blast.jobs, jobs_caption="The running tasks cancelled",
        fingerprint=fingerprint, as_of=blast.now,
    ))  # fmt: skip


@login_required
@require_POST
def array_cancel(request: HttpRequest, array_id: int) -> HttpResponse:
    """Cancel every active task of the array, in two steps: a post without ``confirm=1``
    answers with what it loses and changes nothing (``core.confirm``)."""
    array = acting_array(request, array_id)
    progress = array_progress(array)
    blast = array_blast_radius(array.pk)
    fingerprint = f"{progress.active}:{blast.fingerprint()}"
    if progress.active and not is_confirmed(request.POST, fingerprint):
        return _cancel_confirmation(request, array, progress, blast, fingerprint)
    running = blast.job_count  # as confirmed: the tasks holding GPUs
    try:
        cancelled = _service(request, cancel_array, array)
    except ClusterBusy as err:  # the loop held the cluster past the wait: nothing changed
        messages.error(request, f"Nothing was cancelled: {err}.")
        return render_array(request, array, status=503)
    if cancelled:
        freed = (
            f"; the {count(running, 'running one')}' GPUs are released at the next cycle"
            if running > 1
            else "; the running one's GPUs are released at the next cycle"
            if running
            else ""
        )
        messages.success(
            request, f"Array {array.pk}: {count(len(cancelled), 'task')} cancelled{freed}."
        )
    else:
        messages.info(request, f"Array {array.pk} has no active task left: nothing cancelled.")
    return redirect("scheduling:array-detail", array_id=array.pk)
