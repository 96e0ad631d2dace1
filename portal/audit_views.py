"""The audit log page (``/audit/``): cluster admins only, filtered and paginated.

Read-only over ``AuditRecord`` (written by the services through ``core.audit.record``);
nothing here writes. One COUNT and one page query per view, whatever the filters, and one
query per kind of target on the page to name them (``portal.audit_targets``).
"""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import FieldDoesNotExist, PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.text import capfirst
from django.views.decorators.http import require_GET

from core.models import AuditRecord
from core.query_forms import PageNumberField, QueryForm
from core.roles import is_admin
from portal import audit_targets

RECORDS_PER_PAGE = 50


class AuditFilterForm(QueryForm):
    """Filters of the audit page; all optional, all bounded."""

    actor = forms.CharField(required=False, max_length=150, label="Who (username)")
    action = forms.CharField(
        required=False,
        max_length=64,
        label="What (action)",
        help_text="an action, or its start: node. matches node.cordon, node.drain, …",
    )
    target = forms.CharField(
        required=False,
        max_length=130,
        label="Target",
        help_text="type:id (scheduling.job:42), an id, a node, line, queue or user name "
        "(r003-n07), or a type",
    )
    since = forms.DateField(required=False, label="From (date)")
    until = forms.DateField(required=False, label="To (date, inclusive)")
    # Not drawn (Filter starts again at page 1); only checked: "abc" read as page 1. Past
    # the last page is the last page (the log only grows; a link stays good).
    page = PageNumberField()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        zone = timezone.get_current_timezone_name()  # the viewer's, as the records' times
        self.fields["since"].label = f"From (date, {zone})"
        self.fields["until"].label = f"To (date, {zone}, inclusive)"

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            raise forms.ValidationError("“From” must not be after “To”.")
        return data


def filter_records(records: QuerySet[AuditRecord], data: dict[str, Any]) -> QuerySet:
    """``records`` narrowed by the cleaned filter values."""
    if actor := (data.get("actor") or "").strip():
        records = records.filter(actor_name__iexact=actor)
    if action := (data.get("action") or "").strip():
        records = records.filter(action__startswith=action)
    if target := (data.get("target") or "").strip():
        kind, sep, ident = target.rpartition(":")
        if sep and kind:
            records = records.filter(target_type__iexact=kind, target_id=ident)
        else:
            records = records.filter(
                Q(target_id=target) | Q(target_type__iexact=target) | audit_targets.named(target)
            )
    if (since := data.get("since")) and since > date.min:
        records = records.filter(at__gte=_midnight(since))
    if (until := data.get("until")) and until < date.max:  # 9999-12-31 had no next day: a 500
        records = records.filter(at__lt=_midnight(until + timedelta(days=1)))
    return records


def _midnight(day: date) -> datetime:
    """The start of ``day`` in the viewer's zone (the active one), in which the page shows
    the records' times."""
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


def _shown(value: Any) -> str:
    return "—" if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def field_label(model: type[Model] | None, key: Any) -> str:
    """What the before/after table calls ``key``: the model field's ``verbose_name``
    (``state_reason`` of a node: "State reason"), as the admin names it; a key that is no
    field of the model (``fault``, ``value``) in the same plain form."""
    name = str(key)
    if model is not None:
        try:
            field = model._meta.get_field(name)
        except FieldDoesNotExist:
            pass
        else:
            name = str(getattr(field, "verbose_name", name))
    return capfirst(name.replace("_", " "))


def changes(before: Any, after: Any, model: type[Model] | None = None) -> list[dict[str, Any]]:
    """Field by field: ``{"field", "before", "after", "changed"}`` (values as JSON text;
    ``field`` in words: ``field_label`` of ``model``, the record's target's)."""
    before = before if isinstance(before, dict) else {"value": before}
    after = after if isinstance(after, dict) else {"value": after}
    return [
        {
            "field": field_label(model, key),
            "before": _shown(before.get(key)),
            "after": _shown(after.get(key)),
            "changed": before.get(key) != after.get(key),
        }
        for key in sorted(set(before) | set(after), key=str)
    ]


@login_required
@require_GET
def audit_log(request: HttpRequest) -> HttpResponse:
    """Who did what, when, from where, with before/after and reason (admins only)."""
    if not is_admin(request.user):
        raise PermissionDenied("cluster admins only")
    form = AuditFilterForm(request.GET or None)
    records = AuditRecord.objects.all()
    status = 200
    if form.is_bound:
        if form.is_valid():
            records = filter_records(records, form.cleaned_data)
        else:
            records, status = records.none(), 400
    number = form.cleaned_data.get("page") if status == 200 and form.is_bound else None
    page = Paginator(records, RECORDS_PER_PAGE).get_page(number)
    targets = audit_targets.describe(page.object_list)
    rows = [
        {
            "record": r,
            "target": targets.get(r.pk),
            "changes": changes(r.before, r.after, audit_targets.target_model(r.target_type)),
        }
        for r in page.object_list
    ]
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "rows": rows, "query": query.urlencode()}
    return render(request, "portal/audit.html", context, status=status)
