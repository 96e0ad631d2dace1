"""The second step of actions that destroy work (#15): a confirmation page from the server.

A page form that cancels a running job, drains or cordons a node, or rejects a quota
request posts once without ``confirm=1``: the view answers with the confirmation page
(``templates/confirm.html``): what will be lost, the jobs hit, and a form carrying the
same fields plus ``confirm=1``; nothing is changed. Posting that form acts. It works
without JavaScript; the API stays one call (it never asks).

The form also carries ``seen``, the fingerprint of what the page showed (the jobs hit):
when the second step finds a different one, the page is shown again with the new figures
instead of acting on a blast radius nobody saw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

CONFIRM = "confirm"
SEEN = "seen"


def is_confirmed(post: Mapping[str, Any], fingerprint: str | None = None) -> bool:
    """True when the post is the second step and (when it says what it saw) still sees it."""
    if post.get(CONFIRM) != "1":
        return False
    seen = post.get(SEEN)
    return fingerprint is None or seen is None or seen == fingerprint


def saw_something_else(post: Mapping[str, Any], fingerprint: str | None) -> bool:
    """A second step whose page showed other figures than those of now."""
    seen = post.get(SEEN)
    return post.get(CONFIRM) == "1" and fingerprint is not None and seen not in (None, fingerprint)


@dataclass
class Confirmation:
    """What the confirmation page shows and what its form posts again.

    ``figures``: (value, words) lines of what will be lost; ``jobs``: the jobs hit
    (``scheduling.blast.JobAtRisk``), with ``jobs_caption`` above them; ``hidden``: the
    fields of the first post to send again; ``fingerprint``: what the page shows (``seen``).
    """

    title: str
    what: str
    button: str
    action_url: str
    back_url: str
    figures: Sequence[tuple[str, str]] = ()
    jobs: Sequence[Any] = ()
    jobs_caption: str = ""
    show_here: bool = False
    hidden: Sequence[tuple[str, str]] = ()
    fingerprint: str | None = None
    as_of: Any = None
    notes: Sequence[str] = field(default_factory=list)


def render_confirmation(request: HttpRequest, confirmation: Confirmation) -> HttpResponse:
    """The confirmation page (200); when the second step saw other figures, it says so.
    In the viewer's zone, as every page (``core.timezones``)."""
    changed = saw_something_else(request.POST, confirmation.fingerprint)
    context = {"confirm": confirmation, "changed": changed}
    return render(request, "confirm.html", context, status=409 if changed else 200)
