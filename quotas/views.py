"""Quota pages: lines and their contracts, a lead's request form, the admins' review.

Thin: each view reads through ``quotas.selectors`` and writes through one
``quotas.services`` call; a request the user may not see is a 404, an action they
may not take a 403 (the services decide, the pages only hide buttons).
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from core.api import client_ip
from core.confirm import Confirmation, is_confirmed, render_confirmation
from core.query_forms import takes_query
from core.roles import led_line_ids, line_ids
from core.security import is_ascii_number
from monitoring.metrics import ratio_text
from monitoring.rollup import EvictionFigures, get_eviction_figures
from quotas import ledger, permissions, services
from quotas.forms import (
    DecisionForm,
    QuotaRequestForm,
    RejectForm,
    RequestFilterForm,
    WithdrawForm,
    add_service_errors,
)
from quotas.models import BusinessLine, Queue, QuotaChange, QuotaPolicy, QuotaRequest
from quotas.selectors import (
    build_contracts,
    build_recent_use,
    build_request_impact,
    build_suggestions,
    get_request_for_user,
    healthy_gpus,
    list_line_history,
    list_requests_for_user,
)
from scheduling.blast import waiting_in
from scheduling.clock import cluster_now
from scheduling.engine.explain import count, verb
from scheduling.permissions import sees_all_jobs
from scheduling.selectors import QueueUsage, build_usage, people_of_line


def _line_rows(lines, line_usage, contracts: ledger.Contracts) -> list[dict]:
    return [
        {
            "line": line,
            "usage": line_usage.get(line.pk, QueueUsage()),
            "effective_guarantee": ledger.effective_guarantee(
                contracts.line(line.name), contracts.queues_of(line.name)
            ),
        }
        for line in lines
    ]


def why_parts(reason: str, request_id: int | None) -> tuple[str, str, str]:
    """A contract change's reason split around its one mention of its request, so the line
    page links those words rather than repeat them after the reason: ``"request #12 by
    alice takes effect: Q3"`` -> ``("", "request #12", " by alice takes effect: Q3")``. A
    reason that does not name its request (or a change without one): ``(reason, "", "")``."""
    if request_id is not None:
        found = re.search(rf"\brequest #{request_id}(?!\d)", reason)
        if found:
            return reason[: found.start()], found.group(), reason[found.end() :]
    return reason, "", ""


def _history(line: BusinessLine) -> list[QuotaChange]:
    """The line's latest 200 contract changes, each with ``why`` (``why_parts``)."""
    changes = list(list_line_history(line)[:200])
    for change in changes:
        change.why = why_parts(change.reason, change.request_id)
    return changes


@login_required
@takes_query()
def index(request: HttpRequest) -> HttpResponse:
    """Every line's contract and use, and the sum of guarantees against capacity."""
    contracts = build_contracts()
    lines = BusinessLine.objects.all()
    policy = QuotaPolicy.load()
    context = {
        "rows": _line_rows(lines, build_usage().lines, contracts),
        "guarantee_total": ledger.guarantee_total(contracts),
        "healthy_gpus": healthy_gpus(),
        "reserve_gpus": policy.reserve_gpus,
        "may_request": permissions.may_request(request.user),
        "pending_count": list_requests_for_user(request.user)
        .filter(state=QuotaRequest.State.PENDING)
        .count(),
    }
    return render(request, "quotas/index.html", context)


@login_required
@takes_query()
def line_detail(request: HttpRequest, name: str) -> HttpResponse:
    """A line's contract (and its queues'), use, suggestions, history and requests."""
    line = get_object_or_404(BusinessLine, name=name)
    now = cluster_now()
    policy = QuotaPolicy.load()
    contracts = build_contracts()
    usage = build_usage()
    eviction = get_eviction_figures()
    queues = [
        {
            "queue": q,
            "usage": usage.queues.get(q.pk, QueueUsage()),
            **_eviction_cell(eviction, q.pk),
        }
        for q in line.queues.order_by("name")
    ]
    sees_history = permissions.may_see_line_history(request.user, line)
    # who uses it: for those who see its jobs (its people, on-call, admins), as /usage/ shows
    sees_people = sees_all_jobs(request.user) or line.pk in line_ids(request.user)
    context = {
        "line": line,
        "usage": usage.lines.get(line.pk, QueueUsage()),
        "eviction": eviction,
        "effective_guarantee": ledger.effective_guarantee(
            contracts.line(line.name), contracts.queues_of(line.name)
        ),
        "queues": queues,
        "recent": {
            **build_recent_use(line, None, now, policy.usage_days).as_dict(),
            "days": policy.usage_days,
        },
        "usage_days": policy.usage_days,
        "suggestions": build_suggestions(line, eviction),
        "policy": policy,
        "eviction_target_text": ratio_text(policy.eviction_target),
        "suggestion_coverage_text": f"{policy.suggestion_coverage:.0%}",
        "sees_history": sees_history,
        "history": _history(line) if sees_history else [],
        "requests": list_requests_for_user(request.user).filter(business_line=line)[:100],
        "is_lead": permissions.may_request_for_line(request.user, line.pk),
        "people": people_of_line(line.pk) if sees_people else None,
    }
    return render(request, "quotas/line_detail.html", context)


@login_required
def request_list(request: HttpRequest) -> HttpResponse:
    """Requests the user may see (admins: all, pending first: the review list).

    ``?state=`` empty or absent: any; a bad filter (``RequestFilterForm``): 400, the filter
    saying why, and no requests listed (as the audit page)."""
    form = RequestFilterForm(request.GET)
    qs = list_requests_for_user(request.user)
    status, state_error = 200, ""
    if not form.is_valid():
        qs, status = qs.none(), 400
        state_error = " ".join(str(m) for msgs in form.errors.values() for m in msgs)
    elif state := form.cleaned_data["state"]:
        qs = qs.filter(state=state)
    pending = [r for r in qs if r.state == QuotaRequest.State.PENDING]
    decided = [r for r in qs[:300] if r.state != QuotaRequest.State.PENDING]
    context = {
        "pending": pending,
        "decided": decided,
        "state": request.GET.get("state", ""),
        "state_error": state_error,
        "states": QuotaRequest.State.values,
        "may_request": permissions.may_request(request.user),
        "may_decide": permissions.may_decide(request.user),
    }
    return render(request, "quotas/request_list.html", context, status=status)


def _request_form_context(request: HttpRequest, form: QuotaRequestForm, lines) -> dict:
    contracts = build_contracts()
    usage = build_usage()
    return {
        "form": form,
        "rows": _line_rows(lines, usage.lines, contracts),
        "queue_rows": [
            {"queue": q, "usage": usage.queues.get(q.pk, QueueUsage())}
            for line in lines
            for q in line.queues.all()
        ],
        "now": cluster_now(),
    }


@login_required
@takes_query("business_line", "queue", "quota_gpus", "guarantee_gpus")
def request_new(request: HttpRequest) -> HttpResponse:
    """The lead's form: current contract and use, quota vs guarantee explained."""
    permissions.ensure_may_request(request.user)
    lines = list(
        BusinessLine.objects.filter(pk__in=led_line_ids(request.user)).prefetch_related("queues")
    )
    if request.method == "POST":
        form = QuotaRequestForm(request.POST, lines=lines)
        if form.is_valid():
            data = form.cleaned_data
            try:
                req = services.create_quota_request(
                    request.user,
                    services.QuotaRequestInput(
                        business_line=data["business_line"],
                        queue=data["queue"] or None,
                        quota_gpus=data["quota_gpus"],
                        guarantee_gpus=data["guarantee_gpus"],
                        reason=data["reason"],
                        starts_at=data["starts_at"],
                        ends_at=data["ends_at"],
                    ),
                    source_ip=client_ip(request),
                )
            except ValidationError as exc:
                add_service_errors(form, exc)
            else:
                messages.success(request, f"Request #{req.pk} sent to the cluster admins.")
                return redirect("quotas:request-detail", pk=req.pk)
        context = _request_form_context(request, form, lines)
        return render(request, "quotas/request_form.html", context, status=400)
    initial, refused = prefill(request.GET, lines)
    form = QuotaRequestForm(initial=initial, lines=lines)
    context = {**_request_form_context(request, form, lines), "prefill_refused": refused}
    return render(request, "quotas/request_form.html", context, status=400 if refused else 200)


def prefill(query: Any, lines: list[BusinessLine]) -> tuple[dict[str, str], list[str]]:
    """The form's values from a link (the line page's "Request this guarantee":
    ``?business_line=llm&queue=llm-core&guarantee_gpus=4``; empty: not given) and, for each
    value the form cannot show as given, why. Such a value is left out and the page is a
    400 saying so: left in, a line the lead does not lead showed their first line chosen,
    a queue not in it "the whole line", and a count that is not digits an empty box."""
    given = {k: query.get(k, "") for k in ("business_line", "queue", "quota_gpus",
                                           "guarantee_gpus")}  # fmt: skip
    queues = {ln.name: {q.name for q in ln.queues.all()} for ln in lines}
    line = given["business_line"]
    refused: dict[str, str] = {}
    if line and line not in queues:
        refused["business_line"] = f"“{line}” is not a line you lead"
    queue = given["queue"]
    in_lines = queues[line] if line in queues else set().union(*queues.values())
    if queue and queue not in in_lines:
        refused["queue"] = f"“{queue}” is not a queue of " + (
            f"line {line}" if line in queues else "the lines you lead"
        )
    for key in ("quota_gpus", "guarantee_gpus"):
        if given[key] and not is_ascii_number(given[key]):
            refused[key] = f"“{given[key]}” is not a number of GPUs (digits 0-9)"
    initial = {k: v for k, v in given.items() if v and k not in refused}
    return initial, [f"{k}: {why}" for k, why in refused.items()]


def _visible_request(request: HttpRequest, pk: int) -> QuotaRequest:
    req = get_request_for_user(request.user, pk)
    if req is None:
        raise Http404("no such quota request")
    return req


def _render_detail(
    request: HttpRequest, req: QuotaRequest, *, forms: dict | None = None, status: int = 200
) -> HttpResponse:
    now = cluster_now()
    pending = req.state == QuotaRequest.State.PENDING
    impact = build_request_impact(req, now) if pending else None
    context = {
        "req": req,
        "impact": impact,
        "impact_rows": _impact_rows(req, impact),
        "changes": req.changes.select_related("changed_by", "queue"),
        "may_decide": pending and permissions.may_decide(request.user),
        "may_withdraw": pending and permissions.may_withdraw(request.user, req),
        "may_request": permissions.may_request(request.user),
        "approve_form": DecisionForm(),
        "reject_form": RejectForm(prefix="reject"),
        "withdraw_form": WithdrawForm(prefix="withdraw"),
        **(forms or {}),
    }
    return render(request, "quotas/request_detail.html", context, status=status)


def _impact_rows(req: QuotaRequest, impact: dict | None) -> list[tuple[str, dict]]:
    """The before/after rows of the impact table: the target's, and its line's too when
    the target is a queue (the line's numbers are the ones the line tables show)."""
    if impact is None:
        return []
    if req.queue_id is None:
        name = f"line {req.business_line.name}"
        return [(f"{name} now", impact["before"]), (f"{name} after", impact["after"])]
    queue, line = f"queue {req.queue.name}", f"line {req.business_line.name}"
    return [(f"{queue} now", impact["before"]), (f"{queue} after", impact["after"]),
            (f"{line} now", impact["line_before"]),
            (f"{line} after", impact["line_after"])]  # fmt: skip


@login_required
@takes_query()
def request_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The request, and for a pending one its impact (the admins' approval page)."""
    return _render_detail(request, _visible_request(request, pk))


_ACTIONS = {
    # action: (form class, prefix, past tense)
    "approve": (DecisionForm, None, "approved"),
    "reject": (RejectForm, "reject", "rejected"),
    "withdraw": (WithdrawForm, "withdraw", "withdrawn"),
}


def _decide(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    req = _visible_request(request, pk)  # 404 before 403: unseen requests stay unseen
    if action == "withdraw":
        if not permissions.may_withdraw(request.user, req):
            raise PermissionDenied("only the requester or the line's lead may withdraw it")
    elif not permissions.may_decide(request.user):
        raise PermissionDenied("only cluster admins decide quota requests")
    form_class, prefix, done = _ACTIONS[action]
    form = form_class(request.POST, prefix=prefix)
    if form.is_valid():
        note, ip = form.cleaned_data["note"], client_ip(request)
        try:
            if action == "approve":
                services.approve_quota_request(
                    request.user, req.pk, note,
                    override_reserve=form.cleaned_data["override_reserve"], source_ip=ip,
                )  # fmt: skip
            elif action == "reject":
                services.reject_quota_request(request.user, req.pk, note, source_ip=ip)
            else:
                services.withdraw_quota_request(request.user, req.pk, note, source_ip=ip)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, f"Request #{req.pk} {done}.")
            return redirect("quotas:request-detail", pk=req.pk)
    req.refresh_from_db()
    return _render_detail(request, req, forms={f"{action}_form": form}, status=400)


@login_required
@require_POST
def request_approve(request: HttpRequest, pk: int) -> HttpResponse:
    return _decide(request, pk, "approve")


def _reject_confirmation(request: HttpRequest, req: QuotaRequest, note: str) -> HttpResponse:
    """The second step of a rejection: what the request would have given, and who waits."""
    target = f"queue {req.queue.name}" if req.queue_id else f"line {req.business_line.name}"
    contract = req.queue if req.queue_id else req.business_line
    waiting = waiting_in(req.business_line_id, req.queue_id)
    figures = []
    if req.quota_gpus is not None:
        now_quota = contract.quota_gpus
        figures.append((f"quota {count(req.quota_gpus, 'GPU')}",
                        f"for {target} is not granted (it stays {f'{now_quota:,}' if now_quota is not None else 'the line’s'})"))  # fmt: skip
    if req.guarantee_gpus is not None:
        figures.append((f"guarantee {count(req.guarantee_gpus, 'GPU')}",
                        f"for {target} is not granted (it stays {contract.guarantee_gpus:,})"))  # fmt: skip
    held = waiting.quota_jobs
    figures += [
        (f"{count(held, 'waiting job')} ({count(waiting.quota_gpus, 'GPU')})",
         f"of {target} {verb(held, 'is', 'are')} held by its quota now and "
         f"{verb(held, 'keeps', 'keep')} waiting"),
        (f"{count(waiting.jobs, 'job')} ({count(waiting.gpus, 'GPU')})",
         f"{verb(waiting.jobs, 'waits', 'wait')} in {target} in all"),
        ("No running job", "is stopped by a rejection"),
    ]  # fmt: skip
    return render_confirmation(request, Confirmation(
        title=f"Reject quota request #{req.pk}",
        what=f"{req.requester.username} asked for {target}: “{req.reason[:200]}”. Rejecting is "
             "final: your note is mailed to them, and asking again takes a new request.",
        button=f"Yes, reject request #{req.pk}",
        action_url=request.path, back_url=f"/quotas/requests/{req.pk}/",
        figures=figures, hidden=[("reject-note", note)], as_of=cluster_now(),
    ))  # fmt: skip


@login_required
@require_POST
def request_reject(request: HttpRequest, pk: int) -> HttpResponse:
    """Reject in two steps on the page (the API stays one call): a valid post without
    ``confirm=1`` shows what the rejection leaves undone and changes nothing."""
    req = _visible_request(request, pk)
    if req.state == QuotaRequest.State.PENDING and permissions.may_decide(request.user):
        form = RejectForm(request.POST, prefix="reject")
        # A missing note goes straight to the service's refusal (nothing to confirm).
        if form.is_valid() and form.cleaned_data["note"].strip() and not is_confirmed(request.POST):
            return _reject_confirmation(request, req, form.cleaned_data["note"])
    return _decide(request, pk, "reject")


@login_required
@require_POST
def request_withdraw(request: HttpRequest, pk: int) -> HttpResponse:
    return _decide(request, pk, "withdraw")


# -- queues ---------------------------------------------------------------------------------


def _usage_row(used: int, quota: int | None) -> dict[str, Any]:
    percent = round(100 * used / quota) if quota else None
    return {"percent": percent, "bar": min(100, percent or 0), "over": bool(quota and used > quota)}


def _eviction_cell(eviction: EvictionFigures, queue_id: int) -> dict[str, Any]:
    """A queue's eviction ratio as the pages print it ("12.5%" or "no data yet")."""
    row = eviction.by_queue.get(queue_id, {})
    return {
        "eviction_text": ratio_text(row.get("eviction_ratio")),
        "evictions": row.get("evictions", 0),
    }


@login_required
@require_GET
@takes_query()
def queue_list(request: HttpRequest) -> HttpResponse:
    """Every line and its queues: contract, use, borrowing, waiting work, eviction ratio."""
    usage = build_usage()
    eviction = get_eviction_figures()
    by_line: dict[int, list[dict]] = {}
    for q in Queue.objects.select_related("business_line").order_by("business_line__name", "name"):
        u = usage.queues.get(q.pk, QueueUsage())
        by_line.setdefault(q.business_line_id, []).append(
            {
                "queue": q,
                "usage": u,
                **_eviction_cell(eviction, q.pk),
                **_usage_row(u.used_gpus, q.quota_gpus),
            }
        )
    lines = []
    for line in BusinessLine.objects.all():
        u = usage.lines.get(line.pk, QueueUsage())
        lines.append(
            {
                "line": line,
                "usage": u,
                "queues": by_line.get(line.pk, []),
                **_usage_row(u.used_gpus, line.quota_gpus),
            }
        )
    return render(request, "quotas/queues.html", {"lines": lines, "eviction": eviction})
