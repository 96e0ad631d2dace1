"""``/usage/``: GPU-hours per business line, queue and person, one calendar month (UTC)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from core import clock
from core.query_forms import QueryForm
from core.security import bad_request_page
from quotas.usage import Usage, build_usage_report
from scheduling.permissions import sees_all_jobs

MONTH_PATTERN = r"^(2[0-9]{3})-(0[1-9]|1[0-2])$"  # 2000-01 to 2999-12 (the API schema says so too)
MONTH = re.compile(MONTH_PATTERN)


class MonthField(forms.Field):
    """A calendar month written ``YYYY-MM`` (ASCII digits), as a ``date`` of its first day."""

    RULE = "a month written YYYY-MM, e.g. 2026-11"

    def to_python(self, value: object) -> date | None:
        if value in (None, ""):
            return None
        match = MONTH.fullmatch(value) if isinstance(value, str) else None
        if not match:
            raise forms.ValidationError(self.RULE)
        return date(int(match[1]), int(match[2]), 1)


class UsageQuery(QueryForm):
    """The report's query string: ``month`` (default: the cluster's current month)."""

    month = MonthField(required=False)


def month_bounds(first: date) -> tuple[datetime, datetime]:
    """The month starting at ``first`` as ``[start, end)`` in UTC."""
    start = datetime(first.year, first.month, 1, tzinfo=UTC)
    after = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return start, datetime(after.year, after.month, 1, tzinfo=UTC)


def month_before(first: date) -> date:
    return date(first.year - (first.month == 1), (first.month - 2) % 12 + 1, 1)


def month_report(user: object, first: date | None) -> tuple[Usage, date]:
    """The report of the month starting at ``first`` (None: the cluster's current month)
    as ``user`` may see it, cut at the cluster's now; and that month's first day."""
    now = clock.now()
    first = first or now.date().replace(day=1)
    return build_usage_report(user, *month_bounds(first), now), first


@login_required
@require_GET
def usage(request: HttpRequest) -> HttpResponse:
    """The usage report of one month: what the viewer may see of the jobs, summed."""
    query = UsageQuery(request.GET)
    if not query.is_valid():
        why = "; ".join(m for ms in query.errors.values() for m in ms)
        return bad_request_page(request, f"the usage report {why}")
    report, first = month_report(request.user, query.cleaned_data["month"])
    end = report.end
    context = {
        "usage": report,
        "month": first,
        "ongoing": report.until < end,
        "future": report.until < report.start,  # now is before the month
        "before": month_before(first).strftime("%Y-%m")
        if first.year > 2000 or first.month > 1
        else "",
        "after": end.strftime("%Y-%m") if report.until == end else "",
        "perms_all": sees_all_jobs(request.user),
        "tables": [
            ("By business line", report.lines, "line", True),
            ("By queue", report.queues, "queue", True),
            ("By person", report.people, "person", False),
        ],
    }
    return render(request, "quotas/usage.html", context)
