"""The query string of a list page, read by a form: every parameter known, every page number
a number.

The API refuses a query parameter it does not know (``core.filters``); a page ignored it, so
``/jobs/?owner=alice`` listed everyone's jobs as if filtered by owner. ``QueryForm`` makes
an unknown parameter an error naming it and the parameters the page takes (the page answers
400 with nothing listed, as for a bad value). ``PageNumberField`` takes digits 0-9 only:
Django's ``IntegerField`` read ``?page=٧`` (an Arabic-Indic seven) as page 7.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse, JsonResponse

from core.security import bad_request_page, is_ascii_number

View = Callable[..., HttpResponse]


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
        problems = query_problems(self.data, known)
        unknown = sorted(name for name, why in problems.items() if why == UNKNOWN)
        if unknown:
            names = ", ".join(f"“{key[:40]}”" for key in unknown[:5])
            raise forms.ValidationError(
                f"this page has no filter {names}; it takes {', '.join(known)}",
                code="unknown_parameter",
            )
        if problems:
            name, why = sorted(problems.items())[0]
            raise forms.ValidationError(f"“{name}” {why}", code="repeated_parameter")
        return data


UNKNOWN = "is not a parameter of this address"


def query_problems(query: Any, takes: Collection[str]) -> dict[str, str]:
    """Why each refused parameter of ``query`` (a ``QueryDict`` or a plain dict) is refused:
    one the address does not take (``UNKNOWN``), or one given more than once (the view
    reads one value, so the other would be silently dropped)."""
    lists = query.lists() if hasattr(query, "lists") else ((k, [v]) for k, v in query.items())
    problems: dict[str, str] = {}
    for name, values in lists:
        if name not in takes:
            problems[name[:40]] = UNKNOWN
        elif len(values) > 1:
            problems[name] = f"is given {len(values)} times; give it once"
    return problems


def takes_query(*names: str, json: bool = False) -> Callable[[View], View]:
    """A view whose address takes only ``names`` as query parameters, each at most once.
    Anything else answers 400 naming the parameter and what the address takes, and the
    view does not run: ``/oncall/alerts/?severity=critical`` listed every alert as if
    filtered, and ``/queues/?window=1h`` showed the usual page as if for the last hour.
    ``json``: the answer is ``{"errors": {name: [why]}}``, the API's shape; else the
    portal's 400 page."""
    takes = ", ".join(names) if names else "no parameters"

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            problems = query_problems(request.GET, names)
            if not problems:
                return view(request, *args, **kwargs)
            if json:
                errors = {name: [f"{why}; it takes {takes}"] for name, why in problems.items()}
                return JsonResponse({"errors": errors}, status=400)
            name, why = sorted(problems.items())[0]
            return bad_request_page(request, f"“{name}” {why} (it takes {takes})")

        return checked

    return decorator
