"""Shared API filters (django-filter) for the apps' list endpoints."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import exceptions

YES = ("1", "true")
MINE_CHOICES = [("1", "yes"), ("true", "yes"), ("0", "no"), ("false", "no")]


class MineFilter(django_filters.ChoiceFilter):
    """``mine=1`` (or ``true``): only the caller's rows, those whose ``field_name`` is the
    requesting user; ``mine=0`` (or ``false``): no restriction; anything else is a 400.

    A method filter, so the schema documents it as the string choices it takes.
    """

    def __init__(self, field_name: str, **kwargs: Any) -> None:
        super().__init__(field_name=field_name, choices=MINE_CHOICES, method=self.only_mine,
                         **kwargs)  # fmt: skip

    def only_mine(self, qs: QuerySet, name: str, value: str) -> QuerySet:
        return qs.filter(**{name: self.parent.request.user}) if value in YES else qs


def _choices(choice_filter: django_filters.ChoiceFilter) -> list[str]:
    choices = choice_filter.extra.get("choices") or []
    return list(
        dict.fromkeys(str(value) for value, _ in (choices() if callable(choices) else choices))
    )


# Query parameters every list endpoint takes besides its filters.
PAGING_PARAMS = frozenset({"limit", "offset", "format"})
# The words a yes/no filter takes (any case, spaces around), as django-filter's
# BooleanWidget reads them: it knows only true/false/1/0 and reads anything else as
# "no filter", so ``?rdma=no`` listed every node.
BOOLEAN_WORDS = {"true": "true", "1": "true", "yes": "true",
                 "false": "false", "0": "false", "no": "false"}  # fmt: skip


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter, with nothing silently ignored: an unknown query parameter, a yes/no
    filter given anything but true/false/1/0/yes/no, an empty choice or text
    (``?state=``, ``?owner=``) or a parameter given twice is a 400 naming it (``?rdma=maybe`` used to list every node)."""

    def filter_queryset(self, request, queryset, view):
        filterset_class = self.get_filterset_class(view, queryset)
        filters = filterset_class.base_filters if filterset_class else {}
        takes = ", ".join(sorted(filters)) or "no filters"
        errors: dict[str, list[str]] = {}
        for name, values in request.query_params.lists():
            if len(values) > 1:
                # each takes one value and django-filter reads the last: in
                # ``?state=bogus&state=running`` the bogus one was silently dropped
                errors[name] = [f"given {len(values)} times; give it once"]
        for name, value in request.query_params.items():
            if name in errors:
                continue
            if name not in filters and name not in PAGING_PARAMS:
                errors[name] = [f"unknown filter; this list takes: {takes}"]
            elif isinstance(filters.get(name), django_filters.BooleanFilter) and (
                value.strip().lower() not in BOOLEAN_WORDS
            ):
                errors[name] = ["true or false"]
            elif isinstance(filters.get(name), django_filters.ChoiceFilter) and not value:
                # django-filter reads an empty choice as "no filter": a typo'd script
                # (``?state=$STATE``) would list everything.
                errors[name] = [f"one of: {', '.join(_choices(filters[name]))}"]
            elif isinstance(filters.get(name), django_filters.CharFilter) and not value:
                # the same for text: ``?owner=$USER`` with USER unset listed everyone's jobs
                errors[name] = ["give a value, or leave the filter out"]
        if errors:
            raise exceptions.ValidationError(errors)
        return super().filter_queryset(request, queryset, view)

    def get_filterset_kwargs(self, request, queryset, view):
        kwargs = super().get_filterset_kwargs(request, queryset, view)
        filterset_class = self.get_filterset_class(view, queryset)
        data = kwargs["data"].copy()
        for name, value in kwargs["data"].items():
            if isinstance(filterset_class.base_filters.get(name), django_filters.BooleanFilter):
                data[name] = BOOLEAN_WORDS.get(value.strip().lower(), value)  # see filter_queryset
        kwargs["data"] = data
        return kwargs
