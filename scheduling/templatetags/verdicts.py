"""A waiting job's verdict on the job page, formatted as the API formats it for ``gpuctl``
and the page's live updates (``scheduling.verdict_text``).

``{% load verdicts %}``, then ``{% verdict_facts job.pending_details as facts %}`` (rows
``{key, label, text}``) and ``{% verdict_estimate job %}`` (``2026-12-01 00:30 UTC`` or
``unknown: <why>``).
"""

from __future__ import annotations

from typing import Any

from django import template

from scheduling import verdict_text

register = template.Library()


@register.simple_tag
def verdict_facts(details: Any) -> list[dict[str, str]]:
    return verdict_text.facts(details)


@register.simple_tag
def verdict_estimate(job: Any) -> str:
    return verdict_text.estimate(job.estimated_start, job.pending_details)
