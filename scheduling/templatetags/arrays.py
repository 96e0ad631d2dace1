"""Job arrays as the pages name them: ``{% load arrays %}``, then ``{{ array|spec_now }}``
(``0-99%4``: the indices as asked, with the bound in force now, which its owner may have
changed since) and ``{{ array|bound_text }}`` (``at most 4 at once`` or ``no bound``)."""

from __future__ import annotations

from typing import Any

from django import template

from scheduling.engine.explain import num

register = template.Library()


@register.filter
def spec_now(array: Any) -> str:
    """The array's spec as Slurm writes it, with its bound of now (``JobArray.spec`` keeps
    the one it was submitted with)."""
    indices = array.spec.partition("%")[0]
    return indices if array.max_running is None else f"{indices}%{array.max_running}"


@register.filter
def bound_text(array: Any) -> str:
    """``at most 4 at once`` or ``no bound``."""
    return "no bound" if array.max_running is None else f"at most {num(array.max_running)} at once"
