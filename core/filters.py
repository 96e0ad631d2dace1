"""Shared API filters (django-filter) for the apps' list endpoints."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet

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
