"""The portal's own error answers: 400, 403, 404 and 500 pages in the portal layout, with
the reason and a way back, and JSON (the API's shape) under ``/api/``.

Django's handlers are ``handler400``/``handler403``/``handler404``/``handler500`` in
``portal/urls.py``. With ``DEBUG`` on (``make run``) Django would answer a 404 and an
uncaught error with its technical pages instead (every URL pattern, the settings, the
stack); ``DebugErrorPagesMiddleware`` answers them with the same pages as production
and logs the error as Django does. The favicon is answered at ``/favicon.ico`` too, for
pages that name none (the admin, the API's HTML).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core import signals
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.log import log_response
from django.views.decorators.http import require_GET

from core.query_forms import takes_query

log = logging.getLogger("django.request")

API_PREFIX = "/api/"
# The words of each answer: title, what happened (when no reason is given).
PAGES: dict[int, tuple[str, str]] = {
    400: ("Bad request", "The request could not be read; nothing was changed."),
    403: ("Not allowed", "Your role does not allow this; nothing was changed."),
    404: ("Not found", "There is no page at this address (or you may not see it)."),
    405: (
        "Not a page to open",
        "This address only takes a form's submission; nothing was changed.",
    ),
    500: ("Something went wrong", "The portal hit an error; it is logged for the admins."),
}
# DRF's words, so an unrouted /api/ path answers like a routed one (API.md, Errors).
API_DETAIL = {
    400: "Bad request.",
    403: "You do not have permission to perform this action.",
    404: "Not found.",
    405: "Method not allowed.",
    500: "Server error.",
}
FAVICON = Path(settings.BASE_DIR) / "static" / "favicon.ico"


def is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def _reason(exception: BaseException | None, status: int) -> str:
    """The refusal's own words (``PermissionDenied("only cluster admins …")``), never an
    internal detail: 404s carry Django's resolver data, and 500s nothing for the visitor."""
    if status != 403 or exception is None:
        return ""
    text = str(exception).strip()
    return text[:300] if text and text != "Forbidden" else ""


def _back_link(request: HttpRequest) -> str | None:
    """The page the visitor came from, when it is one of ours (a way back without script)."""
    referer = request.META.get("HTTP_REFERER", "")
    parts = urlsplit(referer)
    if not referer or parts.netloc != request.get_host() or parts.path == request.path:
        return None
    return referer


def error_response(request: HttpRequest, status: int, exception: BaseException | None = None
                   ) -> HttpResponse:  # fmt: skip
    """The answer for ``status``: JSON under /api/, else the page in the portal layout."""
    reason = _reason(exception, status)
    if is_api(request):
        detail = reason or API_DETAIL[status]
        if status == 400:  # bad input has the envelope's shape (API.md, Errors; core.api)
            return JsonResponse({"errors": {"non_field_errors": [detail]}}, status=status)
        return JsonResponse({"detail": detail}, status=status)
    title, words = PAGES[status]
    context: dict[str, Any] = {
        "status": status, "title": title, "words": words, "reason": reason,
        "path": request.path[:200], "back": _back_link(request),
    }  # fmt: skip
    template = f"{status}.html"
    if status == 500:
        # No context processors: whatever failed (the database?) must not fail this too.
        return HttpResponse(render_to_string(template, context), status=status)
    try:
        body = render_to_string(template, context, request)
    except Exception:  # noqa: BLE001 - an error page must always answer
        log.exception("the %s page could not be rendered with the request", status)
        body = render_to_string(template, context)
    return HttpResponse(body, status=status)


def bad_request(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    return error_response(request, 400, exception)


def permission_denied(request: HttpRequest, exception: BaseException | None = None
                      ) -> HttpResponse:  # fmt: skip
    return error_response(request, 403, exception)


def page_not_found(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    return error_response(request, 404, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    return error_response(request, 500)


class DebugErrorPagesMiddleware:
    """With ``DEBUG`` on, 404s and uncaught errors get the portal's pages, not Django's
    technical ones (with ``DEBUG`` off Django calls the handlers itself). In both, the
    empty 405 of a GET on a form's address (``require_POST``) becomes the portal's page.

    Sits after the authentication and messages middleware (the pages show who is
    signed in). An unrouted path is a 404 Django answered before any view ran
    (``request.resolver_match`` is unset); a view's ``Http404`` and any other uncaught
    exception come through ``process_exception``. ``PermissionDenied`` always reaches
    ``handler403``, in DEBUG too.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code == 405 and not response.content and not is_api(request):
            page = error_response(request, 405)
            page["Allow"] = response.get("Allow", "")
            return page
        if (
            settings.DEBUG
            and response.status_code == 404
            and getattr(request, "resolver_match", None) is None
        ):
            return page_not_found(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not settings.DEBUG or isinstance(exception, PermissionDenied):
            return None
        if isinstance(exception, Http404):
            return page_not_found(request, exception)
        # As django.core.handlers.exception.handle_uncaught_exception: tell the listeners
        # (the test client re-raises from it), then log with the stack.
        signals.got_request_exception.send(sender=None, request=request)
        response = server_error(request)
        log_response(
            "%s: %s", response.reason_phrase, request.path, response=response,
            request=request, exception=exception,
        )  # fmt: skip
        return response


@cache
def _favicon_bytes() -> bytes:
    return FAVICON.read_bytes()


@require_GET
@takes_query()
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``: what browsers ask for when a page names no icon."""
    response = HttpResponse(_favicon_bytes(), content_type="image/x-icon")
    response["Cache-Control"] = "public, max-age=86400"
    return response
