"""The page ``/jobs/<id>/output/``: the end of a job's output, server-rendered.

No script: a ``<pre>`` with the tail (escaped by the template, never marked safe), a form
(GET) choosing the run and how much, and a refresh link. The reading and its rules are
``scheduling/output.py``.
"""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from core.query_forms import PageNumberField, QueryForm
from core.security import bad_request_page
from scheduling.output import DEFAULT_BYTES, OutputUnavailable, read_job_output
from scheduling.selectors import get_job_for_user

SIZES = ((16 * 1024, "16 KiB"), (DEFAULT_BYTES, "64 KiB"), (256 * 1024, "256 KiB"),
         (1024 * 1024, "1 MiB"))  # fmt: skip


class OutputQueryForm(QueryForm):
    """``?attempt=N&bytes=N`` of the page (a number of bytes among :data:`SIZES`)."""

    attempt = PageNumberField(widget=forms.NumberInput, label="Run",
                              error_messages={"invalid": "a run number: 1, 2, …",
                                              "min_value": "runs start at 1"})  # fmt: skip
    bytes = forms.TypedChoiceField(choices=SIZES, coerce=int, required=False, label="Show the last")


@login_required
@require_GET
def job_output(request: HttpRequest, job_id: int) -> HttpResponse:
    """The tail of run ``attempt`` (default the latest) of a job the user may see (else 404);
    403 for one they may see but not troubleshoot; 503 when the cluster cannot answer."""
    job = get_job_for_user(request.user, job_id)
    if job is None:
        raise Http404("no such job")
    form = OutputQueryForm(request.GET)
    if not form.is_valid():
        return bad_request_page(request, "; ".join(m for ms in form.errors.values() for m in ms))
    attempt = form.cleaned_data.get("attempt")
    size = form.cleaned_data.get("bytes") or DEFAULT_BYTES
    context = {"job": job, "form": form, "size": size, "attempt": attempt}
    try:
        context["out"] = read_job_output(request.user, job, attempt=attempt, max_bytes=size)
    except ValidationError as exc:
        return bad_request_page(request, "; ".join(exc.messages))
    except OutputUnavailable as exc:
        context["unavailable"] = str(exc)
        return render(request, "scheduling/job_output.html", context, status=503)
    context["runs"] = range(context["out"].attempts, 0, -1)
    return render(request, "scheduling/job_output.html", context)
