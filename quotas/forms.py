"""Forms of the quota pages: types only; the rules (and their messages) are the services'."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from core.query_forms import QueryForm
from quotas.models import QuotaRequest
from quotas.services import NOTE_MAX, REASON_MAX

DATETIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"]


class DateTimeLocalInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs) -> None:
        super().__init__(format="%Y-%m-%dT%H:%M", **kwargs)


class ZonedDateTimeField(forms.DateTimeField):
    """A time typed and shown in the viewer's zone (the active one, ``core.timezones``), as
    every time on the page is; the form's labels name the zone. A time the zone skips or
    repeats (a DST change) and one outside what UTC can hold are errors in words."""

    def to_python(self, value: Any) -> datetime | None:
        try:
            result = super().to_python(value)
            if result is not None:
                result.astimezone(UTC)  # year 1 in a zone east of UTC is before year 1 in UTC
        except (OverflowError, ValueError):
            raise ValidationError("Enter a time between the years 2 and 9998.") from None
        return result


class QuotaRequestForm(forms.Form):
    """A lead's request. ``lines``: the lines they lead, with their queues."""

    business_line = forms.CharField(label="Business line", widget=forms.Select)
    queue = forms.CharField(
        label="Queue (optional: leave empty to change the whole line's contract)",
        required=False,
        widget=forms.Select,
    )
    quota_gpus = forms.IntegerField(
        label="New quota (GPUs, the most it may hold; empty: unchanged)",
        required=False,
        widget=forms.NumberInput(attrs={"min": 0}),
    )
    guarantee_gpus = forms.IntegerField(
        label="New guarantee (GPUs never preempted; empty: unchanged)",
        required=False,
        widget=forms.NumberInput(attrs={"min": 0}),
    )
    reason = forms.CharField(
        label="Reason (shown to the admins who decide)",
        required=False,
        max_length=REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 4}),
    )
    starts_at = ZonedDateTimeField(
        label="Starts at (cluster time; empty: as soon as approved)",
        required=False,
        input_formats=DATETIME_FORMATS,
        widget=DateTimeLocalInput(),
    )
    ends_at = ZonedDateTimeField(
        label="Ends at (cluster time; empty: until changed again)",
        required=False,
        input_formats=DATETIME_FORMATS,
        widget=DateTimeLocalInput(),
    )

    def __init__(self, *args, lines=(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        zone = timezone.get_current_timezone_name()
        for name, when in (("starts_at", "Starts at"), ("ends_at", "Ends at")):
            field = self.fields[name]
            field.label = field.label.replace(when + " (", f"{when} ({zone}, ", 1)
        lines = list(lines)
        self.fields["business_line"].widget.choices = [(ln.name, ln.display_name) for ln in lines]
        self.fields["queue"].widget.choices = [("", "— the whole line —")] + [
            (ln.display_name, [(q.name, q.name) for q in ln.queues.all()]) for ln in lines
        ]


def _note_field(label: str, rows: int = 3) -> forms.CharField:
    """A decision's note: optional for the form (the service says when one is required)."""
    return forms.CharField(
        label=label,
        required=False,
        max_length=NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": rows}),
    )


class RequestFilterForm(QueryForm):
    """The request list's ``?state=`` (empty or absent: any). An unknown state, or a
    parameter the list does not take, is an error the page shows with a 400 and nothing
    listed, never the whole list as if unfiltered."""

    state = forms.ChoiceField(
        required=False,
        choices=[("", "any"), *QuotaRequest.State.choices],
        error_messages={
            "invalid_choice": "unknown state “%(value)s”; one of "
            + ", ".join(QuotaRequest.State.values)
            + ", or any"
        },
    )


class DecisionForm(forms.Form):
    note = _note_field("Note to the requester (optional)")
    override_reserve = forms.BooleanField(
        label="Approve even if the guarantees eat into the admins' reserve", required=False
    )


class RejectForm(forms.Form):
    """Rendered with ``prefix="reject"`` next to the approval form."""

    note = _note_field("Note to the requester (required)")


class WithdrawForm(forms.Form):
    """Rendered with ``prefix="withdraw"``."""

    note = _note_field("Why withdraw (optional)", rows=2)


def add_service_errors(form: forms.Form, exc: ValidationError) -> None:
    """Show a service's field errors on the form (unknown fields become form-wide)."""
    errors = exc.message_dict if hasattr(exc, "error_dict") else {None: exc.messages}
    for name, messages in errors.items():
        field = name if name in form.fields else None
        for message in messages:
            form.add_error(field, message)
