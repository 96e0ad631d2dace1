"""Counts as people read them, with thousands separators (``2,943``): ``{% load counts %}``,
then ``{{ n|count }}``. The one rule is ``scheduling.engine.explain.num``, which the
verdicts and the dashboard's charts use too, and ``Dom.count`` (static/js/dom.js) for the
live parts' rewrites, so the same number reads the same wherever it shows. Identifiers
(job ids, node names) and what machines read (the API's numbers, ``data-`` attributes,
URLs) stay bare."""

from __future__ import annotations

from typing import Any

from django import template

from scheduling.engine.explain import num

register = template.Library()


@register.filter
def count(n: Any) -> Any:
    """An integer as ``2,943``, a float as it is with separators (an average: ``1,860.7``);
    anything else (``None``, text) unchanged, so ``{{ n|count|default_if_none:"—" }}``
    still works."""
    if isinstance(n, bool):
        return n
    if isinstance(n, int):
        return num(n)
    if isinstance(n, float):
        return f"{n:,}"
    return n
