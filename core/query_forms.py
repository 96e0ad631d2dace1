"""The query string of a list page, read by a form: every parameter known, every page number
a number.

The API refuses a query parameter it does not know (``core.filters``); a page ignored it, so
``/jobs/?owner=alice`` listed everyone's jobs as if filtered by owner. ``QueryForm`` makes
an unknown parameter an error naming it and the parameters the page takes (the page answers
400 with nothing listed, as for a bad value). ``PageNumberField`` takes digits 0-9 only:
Django's ``IntegerField`` read ``?page=٧`` (an Arabic-Indic seven) as page 7.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import forms

from core.security import is_ascii_number


class PageNumberField(forms.IntegerField):
    """A page number: 1, 2, … in ASCII digits (past the last page is the page's business)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("widget", forms.HiddenInput)
        kwargs.setdefault(
            "error_messages",
            {"invalid": "a page number: 1, 2, …", "min_value": "pages start at 1"},
        )
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> int | None:
        digits = value.strip().removeprefix("-") if isinstance(value, str) else ""
        if digits and not is_ascii_number(digits):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)


class QueryForm(forms.Form):
    """A form over a page's query string: a parameter that is none of its fields (nor of
    ``also_known``, parameters the page reads itself) is a non-field error naming it."""

    also_known: Iterable[str] = ()

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        known = [*self.fields, *self.also_known]
        unknown = sorted(key for key in self.data if key not in known)
        if unknown:
            names = ", ".join(f"“{key[:40]}”" for key in unknown[:5])
            raise forms.ValidationError(
                f"this page has no filter {names}; it takes {', '.join(known)}",
                code="unknown_parameter",
            )
        return data
