"""``{% csv_url "/api/v1/jobs.csv" query %}``: a page's "Download CSV" link with its filters.

``query`` is the page's url-encoded filters; empty values and ``page`` are dropped (the
API answers 400 to an empty choice such as ``?state=``, and exports every page), and a
filter given twice keeps its last value, the one the page used (the API refuses two).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from django import template

register = template.Library()


@register.simple_tag
def csv_url(path: str, query: str = "") -> str:
    """``path`` with the non-empty filters of ``query`` (escaped by the template engine)."""
    # one value a filter, the last, as the page read it (the API refuses a repeated one)
    pairs = [(k, v) for k, v in dict(parse_qsl(query or "")).items() if v and k != "page"]
    return f"{path}?{urlencode(pairs)}" if pairs else path
