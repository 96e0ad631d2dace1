"""A waiting job's verdict on the job page, formatted as the API formats it for ``gpuctl``
and the page's live updates (``scheduling.verdict_text``).

``{% load verdicts %}``, then ``{% verdict_facts job.pending_details as facts %}`` (rows
``{key, label, text}``) and ``{% verdict_estimate job %}`` (``2026-12-01 00:30 UTC`` or
``unknown: <why>``); ``text|job_links:linked`` links the jobs ``text`` names ("job 7905",
"#7905") and the arrays ("array 42") whose ids are in ``linked`` (``{"job": ids, "array":
ids}``: those the viewer may see) to their pages.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from django import template
from django.urls import reverse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from scheduling import verdict_text

register = template.Library()


@register.filter
def job_links(text: Any, linked: Mapping[str, Collection[int]] | None) -> SafeString:
    """``text`` escaped, with each job (array) it names that is in ``linked["job"]``
    (``linked["array"]``) a link to its page, as the job list links its jobs; any other
    it names stays plain text."""
    text = "" if text is None else str(text)
    linked = linked or {}
    out, start = [], 0
    for match in verdict_text.REFERENCE.finditer(text):
        kind, ref = ("job", match[1]) if match[1] else ("array", match[2])
        if int(ref) not in linked.get(kind, ()):
            continue
        url = reverse(f"scheduling:{kind}-detail", args=[int(ref)])
        out += [
            escape(text[start : match.start()]),
            format_html('<a href="{}">{}</a>', url, match[0]),
        ]
        start = match.end()
    return mark_safe("".join([*out, escape(text[start:])]))  # every piece escaped above


@register.simple_tag
def verdict_facts(details: Any) -> list[dict[str, str]]:
    return verdict_text.facts(details)


@register.simple_tag
def verdict_estimate(job: Any) -> str:
    return verdict_text.estimate(job.estimated_start, job.pending_details)
