"""Researcher pages: submit a job (with the resource estimator), my jobs, job detail, queues.

Thin adapters: reads come from ``scheduling.selectors`` (scoped to the user), writes go
through ``scheduling.services``; the estimator is the pure ``scheduling.estimator``, and
"would it start now?" is the engine's own what-if (``scheduling.whatif``). Pages render
fully on the server; ``static/js/pages/*`` then apply live updates (``job.<id>``,
``pending``, ``queues`` topics) and refetch on reconnect.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Max, Q, Sum
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core import clock
from core.api import client_ip
from core.confirm import Confirmation, is_confirmed, render_confirmation
from core.query_forms import takes_query
from core.timezones import viewer_zone, written
from quotas.models import Queue, Tier
from scheduling import estimator, limits, verdict_text, whatif
from scheduling.array_services import submit_array
from scheduling.blast import job_blast_radius
from scheduling.engine.explain import count, verb
from scheduling.forms import EstimatorForm, JobFilterForm, JobSubmitForm, initial_like
from scheduling.models import Job, Node
from scheduling.permissions import (
    holds_as_admin,
    may_cancel,
    may_raise_time_limit,
    may_read_output,
    may_release,
    sees_all_jobs,
)
from scheduling.selectors import (
    build_placement,
    cluster_shape,
    get_job_for_user,
    held_filter,
    list_arrays_for_user,
    list_jobs_for_user,
    list_linked_jobs,
    list_queues_for_submit,
    visible_array_ids,
    visible_job_ids,
)
from scheduling.services import JobRequest, cancel_job, submit_job

JOBS_PER_PAGE = 50

# Each pending code in plain words (the guide says the same).
CODE_TITLES: dict[str, str] = {
    "NEVER_FITS": "Can never run as asked",
    "HELD": "On hold",
    "QUEUE_TIME_LIMIT": "Its time limit is longer than its queue allows now",
    "DEPENDENCY": "Waiting for other jobs to succeed",
    "BEGIN_TIME": "Asked to start later",
    "ARRAY_LIMIT": "Its array runs at most so many tasks at once",
    "QUOTA_EXCEEDED": "Waiting for quota",
    "NODES_UNAVAILABLE": "Waiting for nodes to come back",
    "PRIORITY": "Higher-priority work goes first",
    "PREEMPTING": "Room is being made for it",
    "TOPOLOGY": "Free GPUs are scattered",
    "INSUFFICIENT_GPUS": "Not enough free GPUs",
    "DEMOTED": "Demoted after repeated preemption",
    "LAUNCH_RETRY": "Starting failed for now; retrying",
}


def detail_rows(details: dict) -> list[tuple[str, str]]:
    """``pending_details`` as (label, value) rows: the one formatter the job page, the API
    and ``gpuctl explain`` use (``verdict_text.facts``)."""
    return [(fact["label"], fact["text"]) for fact in verdict_text.facts(details)]


def duration_text(seconds: float) -> str:
    """1234 s -> ``"20 min"``, 5400 -> ``"1 h 30 min"`` (jobs_detail.js says it the same way)."""
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60:,} h {minutes % 60} min"


def _is_simulator() -> bool:
    return settings.SCHEDULING_BACKEND == "simulator"


# -- submit ---------------------------------------------------------------------------------


def gpu_options() -> list[estimator.GpuOption]:
    """The kinds of GPU in the cluster (model and memory), with how many of each."""
    rows = (
        Node.objects.values("gpu_model", "gpu_memory_gb")
        .annotate(
            per_node=Max("gpus_total"),
            gpus=Sum("gpus_total"),
            rdma_gpus=Sum("gpus_total", filter=Q(rdma=True)),
        )
        .order_by("gpu_memory_gb", "gpu_model")
    )
    return [
        estimator.GpuOption(
            model=r["gpu_model"],
            memory_gb=r["gpu_memory_gb"],
            gpus_per_node=r["per_node"],
            gpus=r["gpus"] or 0,
            rdma_gpus=r["rdma_gpus"] or 0,
        )
        for r in rows
    ]


# The submit form's headline per answer (the job page's CODE_TITLES, said of a job not yet sent).
WHATIF_TITLES: dict[str, str] = {
    "NEVER_FITS": "Can never run as asked",
    "HELD": "On hold",
    "QUOTA_EXCEEDED": "Would wait for quota",
    "NODES_UNAVAILABLE": "Would wait for nodes to come back",
    "PRIORITY": "Would wait: higher-priority work goes first",
    "PREEMPTING": "Would wait while room is made for it",
    "TOPOLOGY": "Would wait: the free GPUs are scattered",
    "INSUFFICIENT_GPUS": "Would wait: not enough free GPUs",
    "DEMOTED": "Would wait: demoted after repeated preemption",
    "DEPENDENCY": "Would wait for other jobs to succeed",
    "BEGIN_TIME": "Would wait until the time you gave",
}

# The DEPENDENCY titles (the job page's, the what-if's) of a job that waits for the others to
# do other than succeed: to end whatever the outcome (``after_condition`` ``ended``, Slurm's
# afterany) or without succeeding (``failed``, afternotok).
DEPENDENCY_TITLES: dict[str, tuple[str, str]] = {
    Job.AfterCondition.ENDED: ("Waiting for other jobs to end", "Would wait for other jobs to end"),
    Job.AfterCondition.FAILED: (
        "Waiting for other jobs to fail", "Would wait for other jobs to fail"
    ),
}  # fmt: skip


def code_titles(after_condition: str, whatif: bool = False) -> dict[str, str]:
    """``CODE_TITLES`` (``whatif``: ``WHATIF_TITLES``) as said of a job with this
    ``after_condition`` (its DEPENDENCY: to succeed, to end, or to fail)."""
    titles = WHATIF_TITLES if whatif else CODE_TITLES
    if after_condition in DEPENDENCY_TITLES:
        return {**titles, "DEPENDENCY": DEPENDENCY_TITLES[after_condition][whatif]}
    return titles


def whatif_answer(w: whatif.WhatIf) -> dict[str, Any]:
    """The what-if as the form shows it: the page and ``/jobs/feasibility/`` say the same."""
    data = w.as_dict()
    if w.tasks is not None and w.tasks.start_now and w.tasks.total > 1:  # an array's tasks
        n, total = w.tasks.start_now, w.tasks.total
        data["title"] = f"Would start all {total:,} tasks now" if n == total else (
            f"Would start {n:,} of its {total:,} tasks now"
        )  # fmt: skip
    elif w.status == "fits_now":
        data["title"] = "Would start now, on borrowed GPUs" if w.borrowed else "Would start now"
    else:
        condition = w.details.get("after_condition", "")
        titles = code_titles(condition, whatif=True)
        data["title"] = titles.get(w.code, f"Would wait: {w.code}")
    data["detail_rows"] = detail_rows(w.details)
    # written as the verdicts write times, so the page (in_zone) and its script (zoned) show
    # it in the viewer's zone as they show the estimated start beside it
    when = w.cycle_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if w.cycle_at else ""
    added = "this job" if w.tasks is None else _tasks_added(w.tasks)
    data["as_of_text"] = (
        f"The scheduler's own plan on the cluster as its cycle #{w.cycle_id} left it ({when}, "
        f"cluster time), with {added} added. Its next cycle decides."
        if w.cycle_id
        else "The scheduler's own plan on the cluster as registered (no cycle has run yet), "
        f"with {added} added. Its first cycle decides."
    )
    return data


def _tasks_added(tasks: whatif.Tasks) -> str:
    """What an array's what-if added to the plan: its tasks, up to its bound."""
    if tasks.at_once is not None and tasks.at_once < tasks.total:
        return f"the first {tasks.at_once:,} of its {tasks.total:,} tasks (its bound)"
    return "its task" if tasks.total == 1 else f"its {tasks.total:,} tasks"


def refused_answer(exc: ValidationError) -> dict[str, Any]:
    """The answer when a submission would be refused (the service's rules)."""
    return {
        "status": "invalid",
        "code": "",
        "title": "Would be refused",
        "message": "Not valid yet: " + "; ".join(_flat_errors(exc)),
    }


def unavailable_answer(exc: whatif.ClusterUnavailable) -> dict[str, Any]:
    """The answer when the cluster cannot be read now (the scheduler's own cycle retries)."""
    return {"status": "unknown", "code": "", "title": "No answer now", "message": f"{exc}."}


def ask_engine(user: Any, req: JobRequest, array: str | None = None) -> dict[str, Any]:
    """Would ``req`` (an array of it: ``array``, its spec) start now, and when? The engine's
    what-if (``scheduling.whatif``), or why a submission would be refused, or that the
    cluster cannot be read now."""
    try:
        return whatif_answer(whatif.what_if(user, req, array))
    except ValidationError as exc:
        return refused_answer(exc)
    except whatif.ClusterUnavailable as exc:
        return unavailable_answer(exc)


def _queue_info(queues: list[Queue]) -> list[dict]:
    return [
        {
            "id": q.pk,
            "name": q.name,
            "tier": q.tier,
            "line": q.business_line.name,
            "preemptible_default": Tier.rank(q.tier) < Tier.rank(Tier.CORE),
            # the queue's time limits (``time_limits.of_request``), for the form's hint
            "max_time_limit": q.max_time_limit_minutes,
            "default_time_limit": q.time_limit_for_unlimited_jobs,
        }
        for q in queues
    ]


@login_required
@require_http_methods(["GET", "POST"])
@takes_query("queue", "like")
def submit(request: HttpRequest) -> HttpResponse:
    """Submit a job. One form, four buttons: Estimate, Use this estimate, Check, Submit.

    Without JavaScript each button posts the whole form and the page comes back with the
    values kept; with it, the estimate and the feasibility line update in place.
    ``?like=<job id>`` fills the form as that job was asked for (a job the user may see);
    ``?queue=`` then still chooses the queue.
    """
    queues = list(list_queues_for_submit(request.user))
    simulator = _is_simulator()
    prefill_refused = ""  # why a link's ?queue= or ?like= is refused (the page is then a 400)
    like: Job | None = None  # the job whose request fills the form (?like=)
    action = request.POST.get("action", "submit") if request.method == "POST" else "view"
    data = request.POST if request.method == "POST" else None
    est_form = EstimatorForm(data if action in ("estimate", "fill") else None, prefix="est")
    if data is not None and action not in ("estimate", "fill"):
        est_form = EstimatorForm(initial=_initial(data, "est-"), prefix="est")
    recommendation = None
    if action in ("estimate", "fill") and est_form.is_valid():
        recommendation = estimator.recommend(est_form.estimate_input(), gpu_options())

    if action == "submit":
        form = JobSubmitForm(data, queues=queues, simulator=simulator)
        if form.is_valid():
            try:
                return submitted(request, form)
            except ValidationError as exc:
                form.add_service_errors(exc)
    else:
        initial = _initial(data, "") if data is not None else {}
        if request.method == "GET" and request.GET.get("like"):
            like, prefill_refused = job_asked(request.user, request.GET["like"])
            if like is not None:
                initial = initial_like(like, cluster_shape()[0] or limits.GPUS_PER_NODE_MAX)
                if not any(str(q.pk) == initial["queue"] for q in queues):
                    initial["queue"] = ""
        if request.method == "GET" and request.GET.get("queue"):
            initial["queue"], refused = queue_asked(request.GET["queue"], queues)
            prefill_refused = prefill_refused or refused
        if action == "fill" and recommendation is not None and recommendation.fits:
            initial.update(
                gpus=recommendation.gpus,
                gpus_per_node="",
                gpu_memory_gb=recommendation.breakdown.needed_memory_gb,
            )
        form = JobSubmitForm(initial=initial, queues=queues, simulator=simulator)

    feasibility = None
    if data is not None or initial_has_shape(form):
        probe = JobSubmitForm(
            data if action == "submit" else _as_data(form.initial),
            queues=queues,
            simulator=simulator,
        )
        req = probe.feasibility_request()
        if req is not None:
            feasibility = ask_engine(request.user, req, probe.feasibility_array())
    context = {
        "form": form,
        "est_form": est_form,
        "recommendation": recommendation,
        "feasibility": feasibility,
        "queue_info": _queue_info(queues),
        "gpu_options": gpu_options(),
        "usable_percent": round(estimator.USABLE_FRACTION * 100),
        "prefill_refused": prefill_refused,
        "like": like,
        "like_queue_refused": like is not None and not form.initial.get("queue"),
    }
    return render(
        request, "scheduling/submit.html", context, status=400 if prefill_refused else 200
    )


def submitted(request: HttpRequest, form: JobSubmitForm) -> HttpResponse:
    """Submit the valid form's job, or its array when it gives a spec (``submit_array``):
    the new job's or array's page, with a message. The service's refusal: ValidationError."""
    spec = form.cleaned_data.get("array")
    if spec:
        array = submit_array(request.user, form.job_request(), spec)
        messages.success(
            request,
            f"Array {array.pk} submitted: {count(array.size, 'task')} "
            f"{verb(array.size, 'waits', 'wait')} for the next cycle.",
        )
        return redirect("scheduling:array-detail", array_id=array.pk)
    job = submit_job(request.user, form.job_request())
    messages.success(request, f"Job #{job.pk} submitted: it waits for the next cycle.")
    return redirect("scheduling:job-detail", job_id=job.pk)


def queue_asked(value: str, queues: list[Queue]) -> tuple[str, str]:
    """A link's ``?queue=`` (an id or a name) as the form's choice, and why not when it is
    none of ``queues`` (those the user may submit to): then nothing is chosen and the page
    says so, where it showed "Choose a queue…" as if no queue had been asked."""
    for q in queues:
        if value in (str(q.pk), q.name):
            return str(q.pk), ""
    return "", f"“{value[:80]}” is not a queue you may submit to; choose one below"


def job_asked(user: Any, value: str) -> tuple[Job | None, str]:
    """A link's ``?like=`` as the job to copy, and why not when it is no job ``user`` may
    see (not told apart from one that does not exist)."""
    job = get_job_for_user(user, int(value)) if value.isascii() and value.isdigit() else None
    if job is None:
        return None, f"“{value[:80]}” is not a job you may see; the form starts empty"
    return job, ""


def initial_has_shape(form: JobSubmitForm) -> bool:
    return bool(form.initial.get("queue")) and bool(form.initial.get("gpus"))


def _initial(data: Any, prefix: str) -> dict[str, Any]:
    """Field values of a posted form, to show again unvalidated."""
    if data is None:
        return {}
    return {
        key[len(prefix) :]: value
        for key, value in data.items()
        if key.startswith(prefix)
        and key not in ("csrfmiddlewaretoken", "action")
        and (prefix or not key.startswith("est-"))
    }


def _as_data(initial: dict[str, Any]) -> dict[str, str]:
    return {k: "" if v is None else str(v) for k, v in initial.items()}


def _flat_errors(exc: ValidationError) -> list[str]:
    if hasattr(exc, "error_dict"):
        return [f"{field}: {m}" for field, msgs in exc.message_dict.items() for m in msgs]
    return list(exc.messages)


def _errors_json(errors: dict) -> JsonResponse:
    return JsonResponse({"errors": errors}, status=400)


@login_required
@require_GET
@takes_query(*EstimatorForm.base_fields, json=True)
def estimate(request: HttpRequest) -> JsonResponse:
    """``GET /jobs/estimate/?params=7B&precision=bf16…``: the breakdown and a recommendation.

    Missing fields take the form's defaults (bf16, AdamW, no sharding, 4096 tokens…). Bad input: 400 ``{"errors": {field: [messages]}}``.
    """
    data = {
        name: f.initial for name, f in EstimatorForm.base_fields.items() if f.initial is not None
    }
    data.update(request.GET.dict())
    form = EstimatorForm(data)
    if not form.is_valid():
        return _errors_json(_messages(form.errors))
    try:
        rec = estimator.recommend(form.estimate_input(), gpu_options())
    except estimator.EstimateError as exc:
        return _errors_json(exc.errors)
    return JsonResponse(rec.as_dict())


def _messages(errors: Any) -> dict[str, list[str]]:
    return {field: [str(m) for m in msgs] for field, msgs in errors.items()}


@login_required
@require_GET
@takes_query(*JobSubmitForm.FEASIBILITY_QUERY, json=True)
def feasibility(request: HttpRequest) -> JsonResponse:
    """``GET /jobs/feasibility/?queue=…&gpus=…``: would this job start now, and when?

    The engine's what-if (``scheduling.whatif``): ``status`` (``fits_now``, ``would_wait``,
    ``never_fits``), ``code``, ``title``, ``message``, ``details``/``detail_rows``,
    ``remedy``, ``estimated_start`` (ISO, cluster time, or null) with its words, ``position``,
    ``borrowed``, ``nodes`` and ``as_of``. A request the service would refuse: 400 naming
    the fields, ``{"errors": {field: [messages]}}``; the cluster unreadable now: 503,
    ``{"errors": {"cluster": [message]}}``.
    """
    queues = list(list_queues_for_submit(request.user))
    form = JobSubmitForm(request.GET, queues=queues, simulator=_is_simulator())
    req = form.feasibility_request()
    if req is None:
        wanted = {k: v for k, v in _messages(form.errors).items() if k in form.FEASIBILITY_FIELDS}
        for name in ("queue", "gpus"):
            if not request.GET.get(name):
                wanted.setdefault(name, ["This field is required."])
        return _errors_json(wanted)
    try:
        result = whatif.what_if(request.user, req, form.feasibility_array())
    except ValidationError as exc:
        errors = exc.message_dict if hasattr(exc, "error_dict") else {"request": exc.messages}
        return _errors_json(errors)
    except whatif.ClusterUnavailable as exc:
        return JsonResponse({"errors": {"cluster": [str(exc)]}}, status=503)
    return JsonResponse(whatif_answer(result))


# -- jobs -----------------------------------------------------------------------------------


@login_required
@require_GET
def job_list(request: HttpRequest) -> HttpResponse:
    """Jobs the user may see, newest first, filtered and paginated (a fixed few queries).

    A bad filter or page number: 400, the form naming it, and no jobs (as the audit page)."""
    user = request.user
    queues = list(
        Queue.objects.select_related("business_line")
        if sees_all_jobs(user)
        else list_queues_for_submit(user)
    )
    params = request.GET.copy()
    if "mine" not in params:  # an array's tasks: whoever's they are
        params["mine"] = "0" if sees_all_jobs(user) or params.get("array") else "1"
    filters = JobFilterForm(params, queues=queues, arrays=list_arrays_for_user(user))
    jobs = list_jobs_for_user(user)
    status = 200
    if not filters.is_valid():  # the form says which filter and why; nothing is listed
        jobs, status = jobs.none(), 400
    chosen = filters.cleaned_data
    array = chosen.get("array")
    if array is not None:
        jobs = jobs.filter(array=array)
    if chosen.get("state"):
        jobs = jobs.filter(state=chosen["state"])
    if chosen.get("queue"):
        jobs = jobs.filter(queue_id=chosen["queue"])
    if chosen.get("mine", params["mine"]) == "1":
        jobs = jobs.filter(owner=user)
    if chosen.get("held"):
        jobs = jobs.filter(held_filter(chosen["held"] == "1"))
    if chosen.get("name"):
        jobs = jobs.filter(name=chosen["name"])
    jobs = jobs.only(
        "id",
        "name",
        "state",
        "tier",
        "gpus",
        "pending_code",
        "pending_message",
        "queue_position",
        "estimated_start",
        "submitted_at",
        "started_at",
        "preemption_count",
        "owner__username",
        "queue__name",
        "queue__business_line__name",
        "array_index",
        "after_condition",
    ).order_by(*(("array_index",) if array is not None else ("-submitted_at", "-id")))
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(chosen.get("page"))
    for job in page:
        job.code_title = code_titles(job.after_condition).get(job.pending_code, job.pending_code)
    query = params.copy()
    query.pop("page", None)
    context = {
        "filters": filters,
        "page": page,
        "query": query.urlencode(),
        "array": array,
    }
    return render(request, "scheduling/job_list.html", context, status=status)


def visible_job(request: HttpRequest, job_id: int) -> Job:
    """The job if the user may see it, else 404 (whether or not it exists)."""
    job = get_job_for_user(request.user, job_id)
    if job is None:
        raise Http404("no such job")
    return job


def say_refused(request: HttpRequest, prefix: str, exc: Exception) -> None:
    """Say on the page why an action on a job was refused, after ``prefix`` ("Not moved:
    "): a rule's words (a ``ValidationError``'s messages), or who may, or that the loop is
    busy (the exception's text)."""
    words = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
    messages.error(request, prefix + words)


@login_required
@require_GET
@takes_query()
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    """One job: state, placement, timeline, and for a pending job its verdict in words."""
    job = visible_job(request, job_id)
    events = list(job.events.all())
    allowed = may_cancel(request.user, job)
    progress = job.progress_at(clock.now())  # the header's clock reads the same instant
    pipeline = list_linked_jobs(request.user, job)
    titles = code_titles(job.after_condition)
    context = {
        "job": job,
        "events": events,
        "placement": build_placement(job),
        "progress_text": duration_text(progress),
        "detail_rows": detail_rows(job.pending_details),
        # the jobs and arrays its verdict names that the viewer may see: linked
        "linked": {
            "job": visible_job_ids(request.user, verdict_text.job_refs(job.pending_details)),
            "array": visible_array_ids(request.user, verdict_text.array_refs(job.pending_details)),
        },
        # the jobs it starts after and those waiting for it (``Job.after``), and the
        # arrays every task of which it starts after (``Job.after_arrays``)
        "starts_after": pipeline.starts_after,
        "starts_after_arrays": pipeline.starts_after_arrays,
        # the jobs waiting for it, by what they wait for it to do: [(after_condition, jobs)]
        "waiting_for_it": pipeline.waiting_by_condition,
        # what it waits for them to do: succeed, end whatever the outcome (Slurm's afterany),
        # or end without succeeding (afternotok)
        "after_condition": job.after_condition,
        "code_title": titles.get(job.pending_code, job.pending_code),
        "can_cancel": job.is_active and allowed,
        "may_cancel": allowed,
        # hold (a running job: suspend) and release (``scheduling.hold_views``)
        "can_hold": job.is_active and allowed and job.held_at is None,
        "can_release": job.is_active and job.held_at is not None and may_release(request.user, job),
        # an admin over a user hold of someone else's job: make it an admin hold (Slurm's)
        "can_make_admin_hold": job.is_active
        and job.held_at is not None
        and job.hold_kind == "user"
        and holds_as_admin(request.user, job),
        "may_read_output": may_read_output(request.user, job),
        # an admin may raise a time limit; others who may act on the job only lower it
        "raises_time_limits": may_raise_time_limit(request.user),
        # where it may move while it waits (``move_services``): the queues its owner may
        # submit to, but its own; none for an array's task (the form shows while it waits:
        # a running job requeued waits again)
        "move_queues": (
            list(list_queues_for_submit(job.owner).exclude(pk=job.queue_id).order_by("name"))
            if allowed and job.is_active and job.array_id is None
            else []
        ),
        # its earliest start as the form's datetime-local reads it, in the viewer's zone
        "begin_at_local": (
            timezone.localtime(job.begin_at).strftime("%Y-%m-%dT%H:%M") if job.begin_at else ""
        ),
        "hold_note": HOLD_NOTES["pending" if job.state == Job.State.PENDING else "running"],
        "live_config": {
            "hold_notes": HOLD_NOTES,
            "id": job.pk,
            "api": f"/api/v1/jobs/{job.pk}/",
            "titles": titles,
            "active_states": list(Job.ACTIVE_STATES),
            "progress_seconds": progress,  # at the cluster time the header's clock starts from
        },
    }
    return render(request, "scheduling/job_detail.html", context)


# Under the hold form of the job page, by the job's state (the page script switches them).
HOLD_NOTES = {
    "pending": "A held job stays pending and is not scheduled until released.",
    "running": "A running job is suspended: the next cycle checkpoints and stops it, and it "
    "waits, held, until released (without a checkpoint path it restarts from the "
    "beginning). The next page asks you to confirm.",
}


# A cancel loses work only once the job runs: then the page asks first (#15).
CONFIRM_CANCEL_STATES = (Job.State.RUNNING, Job.State.PREEMPTING)


def _cancel_confirmation(request: HttpRequest, job: Job) -> HttpResponse:
    """The second step of cancelling a running job: the work it loses, then confirm."""
    blast = job_blast_radius(job)
    at_risk = blast.jobs[0]
    since = (
        f"since its last checkpoint ({written(at_risk.since, viewer_zone(request))})"
        if at_risk.checkpointed
        else "since it started (no checkpoint since)"
        if at_risk.since
        else "(it has not started)"
    )
    figures = [
        (f"{blast.gpu_hours_at_risk:.1f} GPU-hours", f"of work {since} are lost"),
        (count(job.gpus, "GPU"), f"{verb(job.gpus, 'is', 'are')} released: the job ends for good"),
    ]
    if job.checkpoint_path:
        figures.append((job.checkpoint_path, "keeps the last checkpoint (a new job can resume)"))
    return render_confirmation(request, Confirmation(
        title=f"Cancel job #{job.pk} ({job.name})",
        what=f"Job #{job.pk} is {job.state} on {job.gpus:,} GPUs. Cancelling stops it and "
             "cannot be undone; its GPUs go back to the queue at the next cycle.",
        button=f"Yes, cancel job #{job.pk}",
        action_url=request.path, back_url=f"/jobs/{job.pk}/",
        figures=figures, jobs=blast.jobs, jobs_caption="The job cancelled",
        fingerprint=blast.fingerprint(), as_of=blast.now,
    ))  # fmt: skip


@login_required
@require_POST
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    """Cancel (POST with CSRF): owner, their team lead or an admin (the service decides).

    A running (or checkpointing) job is cancelled in two steps: a post without
    ``confirm=1`` answers with what the cancel loses and changes nothing (core.confirm).
    """
    job = visible_job(request, job_id)
    if (
        job.state in CONFIRM_CANCEL_STATES
        and may_cancel(request.user, job)
        and not is_confirmed(request.POST)
    ):
        return _cancel_confirmation(request, job)
    try:
        cancel_job(request.user, job.pk, source_ip=client_ip(request))
    except ValidationError as exc:
        messages.error(request, "Not cancelled: " + "; ".join(exc.messages))
    else:
        messages.success(request, f"Job #{job.pk} cancelled: its GPUs are released next cycle.")
    return redirect("scheduling:job-detail", job_id=job.pk)
