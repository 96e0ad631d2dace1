"""Web security plumbing: security headers on every response, rate limits on sign-in and
on API token use, and API input the standard DRF classes crash on (a 500) made harmless:
too deeply nested JSON and out-of-range ``limit``/``offset`` query parameters.

Headers: ``SecurityHeadersMiddleware`` adds the Content-Security-Policy, Permissions-Policy
and Cross-Origin-Resource-Policy; Django's own middleware sets the rest (Referrer-Policy,
X-Content-Type-Options and Cross-Origin-Opener-Policy from ``SecurityMiddleware``,
X-Frame-Options from ``XFrameOptionsMiddleware``, HSTS in production). The middleware
sets each of those too when absent, so a response that bypassed Django's middleware
still carries them.

Rate limits (docs/security.md, "Rate limits"): failed sign-ins are counted per
(username, client address) and per username, with the username normalized as Django
normalizes it (NFKC, so full-width letters are the same name) and case-folded; failed
``Authorization: Token`` attempts per client address and per token prefix. Counts live
in the Django cache (Redis), so every web worker shares them. One address can never lock
anybody else out: nothing is counted per address alone for sign-ins (behind a proxy or NAT
an address is everyone), the per-username limit is above what one address may reach, and
a valid token is never refused. Past a sign-in limit the caller gets 429 with a
Retry-After header until the window ends, and nothing is checked meanwhile, so a correct
guess inside a locked window does not get through either.

When the cache is unreachable the limits fail open (and log it): a Redis outage must not
lock everyone out of the portal. The cache has 1 s socket timeouts (settings.CACHES), and
after a failure this process leaves the cache alone for ``CACHE_PAUSE_S``, so a frozen
Redis costs one request a second rather than every request.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import logging
import re
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import engines
from django.urls import NoReverseMatch, reverse
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json as drf_json

logger = logging.getLogger(__name__)

# -- headers ----------------------------------------------------------------------------

# Same origin only. The pages load their scripts and styles from /static/ and embed data
# with ``json_script`` (type="application/json": data, never executed, so script-src
# needs no 'unsafe-inline' and no nonce). Styles likewise: no <style> element and no
# style="…" attribute (the vendored Plotly's rules are linked from vendor/plotly.css, the
# queue usage bars are <progress>); scripts may still set element.style (CSSOM, which CSP
# does not restrict). 'self' in connect-src covers the same-origin websocket.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",  # Swagger UI's icons (/api/docs/) are data: SVGs
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
PERMISSIONS_POLICY = ", ".join(
    f"{feature}=()"
    for feature in (
        "accelerometer",
        "camera",
        "display-capture",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "payment",
        "usb",
    )
)


class SecurityHeadersMiddleware:
    """Adds the security headers to every response (pages, API, static files, errors)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.headers = {
            "Content-Security-Policy": getattr(
                settings, "CONTENT_SECURITY_POLICY", CONTENT_SECURITY_POLICY
            ),
            "Permissions-Policy": getattr(settings, "PERMISSIONS_POLICY", PERMISSIONS_POLICY),
            "Cross-Origin-Resource-Policy": "same-origin",
            "Cross-Origin-Opener-Policy": settings.SECURE_CROSS_ORIGIN_OPENER_POLICY
            or "same-origin",
            "Referrer-Policy": settings.SECURE_REFERRER_POLICY or "same-origin",
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": settings.X_FRAME_OPTIONS,
        }

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        for name, value in self.headers.items():
            response.setdefault(name, value)
        return response


# -- rate limits ------------------------------------------------------------------------


CACHE_PAUSE_S = 10.0
_cache_paused_until = 0.0


def _cache_call(what: str, fn: Callable, default):
    """``fn()``, or ``default`` when the cache fails or failed less than CACHE_PAUSE_S ago."""
    global _cache_paused_until
    if time.monotonic() < _cache_paused_until:
        return default
    try:
        return fn()
    except Exception:  # any cache failure: fail open
        _cache_paused_until = time.monotonic() + CACHE_PAUSE_S
        logger.warning("rate limits: cache unavailable (%s); not enforced for %.0f s", what,
                       CACHE_PAUSE_S)  # fmt: skip
        return default


@dataclass(frozen=True)
class Limit:
    """At most ``failures`` failures per ``window`` seconds per key, counted in the cache.

    The window starts at the first failure and is not extended by later ones.
    """

    name: str
    failures: int
    window: int

    def _key(self, value: str) -> str:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"ratelimit:{self.name}:{digest}"

    def blocked(self, value: str) -> bool:
        key = self._key(value)
        return (_cache_call("read", lambda: cache.get(key), 0) or 0) >= self.failures

    def hit(self, value: str) -> int:
        """Count one failure; returns the count in the current window (0: not counted)."""
        key = self._key(value)

        def count() -> int:
            cache.add(key, 0, timeout=self.window)
            try:
                return cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.set(key, 1, timeout=self.window)
                return 1

        return _cache_call("count", count, 0)

    def reset(self, value: str) -> None:
        key = self._key(value)
        _cache_call("reset", lambda: cache.delete(key), None)


def _setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def login_limits() -> tuple[Limit, Limit]:
    """(per username and client address, per username) limits on failed sign-ins.

    The per-username limit is the larger: one address alone reaches only the first, so it
    can lock itself out of that account but not the account's owner elsewhere.
    """
    window = _setting("LOGIN_FAILURE_WINDOW_SECONDS", 300)
    return (
        Limit("login-user-ip", _setting("LOGIN_FAILURES_PER_USERNAME_AND_IP", 10), window),
        Limit("login-user", _setting("LOGIN_FAILURES_PER_USERNAME", 50), window),
    )


def token_limits() -> tuple[Limit, Limit]:
    """(per client address, per token prefix) limits on failed API token attempts."""
    window = _setting("TOKEN_FAILURE_WINDOW_SECONDS", 300)
    return (
        Limit("token-ip", _setting("TOKEN_FAILURES_PER_IP", 30), window),
        Limit("token-prefix", _setting("TOKEN_FAILURES_PER_PREFIX", 10), window),
    )


def _client_ip(request) -> str:
    # Imported here: core.api imports rest_framework.views, which imports the
    # authentication classes named in settings, this module among them.
    from core.api import client_ip

    return client_ip(request) or "unknown"


def normalize_username(raw: str) -> str:
    """The name a sign-in attempt is counted under: what Django's login form makes of it
    (``UsernameField``: NFKC, so ``ｒesearcher2`` is ``researcher2``), stripped and
    case-folded, at most 150 characters."""
    return unicodedata.normalize("NFKC", raw or "").strip().casefold()[:150]


def _per_user_and_address(username: str, ip: str) -> str:
    return f"{username}\x00{ip}"


LOCKED_OUT_PAGE = """{% extends "base.html" %}
{% block title %}Too many attempts{% endblock %}
{% block content %}
<section class="card narrow">
  <h1>Too many failed sign-in attempts</h1>
  <p class="error" role="alert">Too many failed sign-in attempts for this account or from
  your address. Nothing was checked this time. Wait {{ minutes }} minute{{ minutes|pluralize }}
  and try again, or ask a cluster admin to reset your password.</p>
  <p><a href="{{ login_url }}">Back to the sign-in page</a></p>
</section>
{% endblock %}"""


class LoginRateLimitMiddleware:
    """Limits failed sign-ins on every login form (the portal's and the Django admin's).

    A POST to a login page that answers 200 re-rendered the form: a failure, counted
    against the client address and the username, unless the password could not be checked
    (``request.credentials_unchecked``: the directory was down for a directory account). A redirect is a success and clears the
    username's count (not the address's: one good account must not unlock guessing at
    others). While either count is at its limit, POSTs get 429 without being checked.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self._paths: frozenset[str] | None = None

    def login_paths(self) -> frozenset[str]:
        if self._paths is None:
            paths = set()
            for name in ("login", "admin:login"):
                with contextlib.suppress(NoReverseMatch):
                    paths.add(reverse(name))
            self._paths = frozenset(paths)
        return self._paths

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST" or request.path_info not in self.login_paths():
            return self.get_response(request)
        username = normalize_username(request.POST.get("username", ""))
        if not username:  # nothing can sign in under an empty name: nothing to count
            return self.get_response(request)
        by_user_ip, by_user = login_limits()
        mine = _per_user_and_address(username, _client_ip(request))
        if by_user_ip.blocked(mine) or by_user.blocked(username):
            logger.warning("sign-in refused: too many failures for one username")
            return self.locked_out(request, max(by_user_ip.window, by_user.window))
        response = self.get_response(request)
        if response.status_code == 200 and not getattr(request, "credentials_unchecked", False):
            by_user_ip.hit(mine)
            by_user.hit(username)
        elif 300 <= response.status_code < 400:
            by_user_ip.reset(mine)
            by_user.reset(username)
        return response

    def locked_out(self, request: HttpRequest, window: int) -> HttpResponse:
        template = engines["django"].from_string(LOCKED_OUT_PAGE)
        body = template.render(
            {"minutes": max(1, -(-window // 60)), "login_url": request.path_info}, request
        )
        response = HttpResponse(body, status=429)
        response["Retry-After"] = str(window)
        return response


class RateLimitedTokenAuthentication(TokenAuthentication):
    """DRF token authentication that answers 429 instead of 401 once an address, or one
    token prefix, has failed too often.

    The token is always checked first: a valid token is never refused, whatever others
    sent from its address or with its prefix. Only failures are counted (two cache
    writes); session requests and valid tokens touch no counter. A 40-hex-digit token
    cannot be guessed, so the limit does not defend the keys: it tells a client that
    loops on a revoked or mistyped token to stop, and logs it.
    """

    def authenticate(self, request):
        auth = get_authorization_header(request).split()
        if not auth or auth[0].lower() != self.keyword.lower().encode():
            return None
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            by_ip, by_prefix = token_limits()
            prefix = auth[1][:8].decode("latin-1") if len(auth) > 1 else ""
            over_ip = by_ip.hit(_client_ip(request)) > by_ip.failures
            over_prefix = by_prefix.hit(prefix) > by_prefix.failures
            if over_ip or over_prefix:
                logger.warning("API token refused: too many failed attempts (prefix %r)", prefix)
                raise exceptions.Throttled(
                    wait=max(by_ip.window, by_prefix.window),
                    detail="Too many failed token attempts; check the token, then try again later.",
                ) from None
            raise

    def authenticate_credentials(self, key: str):
        """DRF's check, with the user's profile (their role) loaded in the same query.
        Self-service tokens (``gpt_…``, stored hashed) are checked by ``core.tokens``."""
        from core import tokens  # core.tokens imports this module

        if tokens.is_portal_token(key):
            try:
                found = tokens.authenticate(key)
            except tokens.TokenError as exc:
                raise exceptions.AuthenticationFailed(exc.errors["detail"][0]) from None
            return (found.user, found)
        token = tokens.legacy_token(key)  # DRF's table, one query compiled once (#16)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return (token.user, token)


# -- control characters -----------------------------------------------------------------

# Cc: C0 controls, DEL and C1 controls. A path or a query parameter never needs one, and
# PostgreSQL refuses NUL in text outright (a 500 on any lookup that reached it).
_CONTROLS = frozenset(chr(c) for c in (*range(0x20), *range(0x7F, 0xA0)))


def has_control_characters(text: str, allowed: frozenset[str] = frozenset()) -> bool:
    """Whether ``text`` holds a control character (C0, DEL, C1) not in ``allowed``."""
    return not (_CONTROLS - allowed).isdisjoint(text)


# Invisible format characters (Unicode category Cf) of the Basic Multilingual Plane:
# bidi embeddings, overrides and isolates, zero-width spaces, the BOM, soft hyphens. In a
# name they make it read as another ("\u202egnp.exe" shows as "exe.png") or two names look
# the same. The joiners (U+200C, U+200D) stay: scripts and emoji sequences need them, and
# so do the tag characters beyond the BMP (U+E0020-E007F: the flags of Scotland or
# Wales). The API schema's name pattern lists these same characters (``core.api``).
INVISIBLE_CHARACTERS = frozenset(
    ch
    for ch in map(chr, range(0x10000))
    if unicodedata.category(ch) == "Cf" and ch not in "\u200c\u200d"
)


def invisible_character_error(text: str, what: str = "a name") -> str | None:
    """The message refusing a name (or ``what`` text) that holds an invisible format
    character (naming the first as ``U+XXXX``), or None."""
    for ch in text:
        if ch in INVISIBLE_CHARACTERS:
            return (
                f"Invisible formatting characters are not allowed in {what} (U+{ord(ch):04X}: "
                f"bidi controls and zero-width spaces make {what} read as another)."
            )
    return None


# -- other people's text shown to people ---------------------------------------------------

# Terminal escape sequences: CSI (colours, cursor moves; ESC [ or the C1 byte), OSC (window
# titles, hyperlinks; ended by BEL or ESC \\) and the two-character ones (ESC c resets).
_ANSI = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]"
)
_SEPARATORS = frozenset("\u2028\u2029")  # line and paragraph separators (Zl, Zp)
_SHOWN_ESCAPED = (_CONTROLS - frozenset("\n\t")) | INVISIBLE_CHARACTERS | _SEPARATORS


def displayable_text(text: str) -> str:
    """``text`` (a job's output, anything a program printed) made safe to show as text:
    terminal escape sequences removed, line ends as ``\\n`` (a lone carriage return, a
    progress bar redrawing itself, starts a line), and every other control character
    and invisible format character (bidi overrides, zero-width spaces) written out as
    an escape (``\\x07``, ``\\u202e``), as ``gpuctl`` prints them. Newlines and tabs stay.
    HTML escaping is the template's (never mark this safe)."""
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    if _SHOWN_ESCAPED.isdisjoint(text):
        return text
    return "".join(ascii(ch)[1:-1] if ch in _SHOWN_ESCAPED else ch for ch in text)


BAD_REQUEST_PAGE = """{% extends "base.html" %}
{% block title %}Bad request{% endblock %}
{% block content %}
<section class="card narrow">
  <h1>Bad request</h1>
  <p class="error" role="alert">Nothing was done: {{ message }}.</p>
  <p><a href="/">Back to the start page</a></p>
</section>
{% endblock %}"""


def bad_request_page(request: HttpRequest, message: str) -> HttpResponse:
    """A 400 page in the portal's layout: "Nothing was done: <message>." """
    body = engines["django"].from_string(BAD_REQUEST_PAGE).render({"message": message}, request)
    return HttpResponse(body, status=400)


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class ControlCharacterMiddleware:
    """Refuses with 400, before any view runs, a request whose path, query string, form
    fields or headers hold control characters (form fields may hold tabs and line breaks,
    headers tabs). API paths get the JSON error envelope of API.md, pages a short
    plain-text answer.

    Headers: HTTP servers refuse most controls in them already (uvicorn's parsers do), but
    a NUL in the ``Cookie`` or ``Authorization`` header that reached the session or token
    lookup would be a 500 (PostgreSQL refuses NUL), so this does not rely on the server.
    Header text is the raw bytes read as Latin-1, so UTF-8 shows as C1 codes there: only
    C0 controls and DEL are refused in headers.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        where = self.offending_part(request)
        if where is None:
            return self.get_response(request)
        message = f"control characters are not allowed in the {where}"
        if request.path_info.startswith("/api/"):
            return JsonResponse({"errors": {"non_field_errors": [message]}}, status=400)
        return bad_request_page(request, message)

    @staticmethod
    def offending_part(request: HttpRequest) -> str | None:
        if has_control_characters(request.path_info):
            return "path"
        for key, values in request.GET.lists():
            if has_control_characters(key) or any(map(has_control_characters, values)):
                return "query string"
        if request.method == "POST" and request.content_type in FORM_TYPES:
            for key, values in request.POST.lists():
                if has_control_characters(key) or any(
                    has_control_characters(v, _FORM_ALLOWED) for v in values
                ):
                    return "form"
        for key, value in request.META.items():
            if key.startswith("HTTP_") and header_has_controls(str(value)):
                return f"{key[5:].replace('_', '-').title()} header"
        return None


# The API's list fields (a job submission's ``after``, ``after_arrays``, ``after_corresponding``):
# a form body gives a list by giving the field once per item, and the serializer reads them all.
API_LIST_FIELDS = frozenset({"after", "after_arrays", "after_corresponding"})


class ApiFieldOnceMiddleware:
    """Refuses with 400, in the API's error envelope, an API POST whose form body gives a
    field twice: a serializer reads the last value, where a proxy, a log or a reviewer may
    read the first (``SafeJSONParser`` refuses a JSON key given twice the same way); but a
    list field (``API_LIST_FIELDS``), which a form can only give so. Here, not in DRF's form
    parsers: ``ControlCharacterMiddleware`` has read a multipart body by then, and DRF takes
    Django's ``request.POST`` without its parsers."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (
            request.method == "POST"
            and request.path_info.startswith("/api/")
            and request.content_type in FORM_TYPES
        ):
            for name, values in request.POST.lists():
                if len(values) > 1 and name not in API_LIST_FIELDS:
                    message = f"the field {name[:50]!r} is given {len(values)} times"
                    return JsonResponse({"errors": {"non_field_errors": [message]}}, status=400)
        return self.get_response(request)


_FORM_ALLOWED = frozenset("\t\n\r")
_HEADER_ALLOWED = frozenset(chr(c) for c in (0x09, *range(0x80, 0xA0)))


def header_has_controls(text: str) -> bool:
    """Whether a header's text (its bytes read as Latin-1) holds a C0 control but tab, or
    DEL. Its C1 codes stay: they are UTF-8 read as Latin-1."""
    return has_control_characters(text, _HEADER_ALLOWED)


# -- websocket origin -------------------------------------------------------------------


def _origin_key(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin, the port filled in from the scheme; None if it
    is not an http(s) origin."""
    try:
        parsed = urlsplit(origin.strip().lower())
        port = parsed.port
    except ValueError:
        return None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return None
    if parsed.path or parsed.query or parsed.fragment or "@" in parsed.netloc:
        return None  # an Origin is scheme://host[:port] and nothing else
    return parsed.scheme, parsed.hostname, port or (443 if parsed.scheme == "https" else 80)


def websocket_origin_allowed(origin: str, host: str, scheme: str) -> bool:
    """Whether a websocket from page ``origin`` may connect to this site at ``host``.

    Exact same origin, as a browser means it: the scheme (``wss`` pairs with ``https``),
    the host and the port must all be this site's, or the origin is listed in
    ``CSRF_TRUSTED_ORIGINS`` (what a TLS-terminating proxy in front needs, as Django's
    CSRF check does). ``AllowedHostsOriginValidator`` alone compared host names only, so
    a page on ``http://localhost:3000`` could open the portal's socket with its session.
    """
    own = _origin_key(f"{'https' if scheme == 'wss' else 'http'}://{host}")
    got = _origin_key(origin)
    if got is None or own is None:
        return False
    trusted = {_origin_key(o) for o in getattr(settings, "CSRF_TRUSTED_ORIGINS", [])}
    return got == own or got in trusted


class SameOriginWebsocket:
    """ASGI middleware: refuses (403 before the handshake) a websocket whose Origin is not
    exactly this site's (``websocket_origin_allowed``), or whose headers hold a C0 control
    or DEL (as ``ControlCharacterMiddleware`` does for HTTP: a NUL in the session cookie
    would reach PostgreSQL), before any authentication."""

    def __init__(self, application: Callable) -> None:
        self.application = application

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        pairs = scope.get("headers", [])
        headers = {name: value for name, value in pairs}
        origin = headers.get(b"origin", b"").decode("latin-1")
        host = headers.get(b"host", b"").decode("latin-1")
        clean = not any(header_has_controls(value.decode("latin-1")) for _, value in pairs)
        if clean and websocket_origin_allowed(origin, host, scope.get("scheme", "ws")):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)


# -- input ------------------------------------------------------------------------------


# In JSON text (keys and values): control characters but tab and line breaks, as in forms,
# and lone surrogates (``"\\ud800"`` parses, but is no text: an unknown field named so was a
# 500 when its name was written into the 400's UTF-8 answer).
_BAD_JSON_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def _bad_text_in(document: object) -> str | None:
    """What is wrong with the first bad string in a parsed JSON document, if any."""
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and (found := _BAD_JSON_TEXT.search(item)):
            if "\ud800" <= found.group() <= "\udfff":
                return "text must be valid Unicode (a lone surrogate is not)"
            return "control characters are not allowed in the body"
    return None


def _once_each(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are each given once: ``json`` keeps the last of
    ``{"gpus": 1, "gpus": 900}``, where a proxy or a log may read the first."""
    document = dict(pairs)
    if len(document) < len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"the key {twice[:50]!r} is given twice")
    return document


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, with too deeply nested documents and text no field may hold refused
    as bad input (400).

    ``json.load`` raises RecursionError (not ValueError) on a body such as 5,000 ``[``;
    DRF only turns ValueError into a 400, so that body was a 500 on every JSON endpoint.
    A key given twice in one object is refused too. Text with control characters (tab
    and line breaks aside) is refused anywhere in the body, as
    ``ControlCharacterMiddleware`` refuses it in forms (API.md: text fields refuse NUL and
    control characters): an escape sequence in a job name reached the operator's terminal.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        # DRF's JSONParser.parse, with keys given twice refused (object_pairs_hook)
        text = codecs.getreader(get_encoding(parser_context or {}))(stream)
        constant = drf_json.strict_constant if self.strict else None
        try:
            document = drf_json.load(text, parse_constant=constant, object_pairs_hook=_once_each)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply") from None
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        problem = _bad_text_in(document)
        if problem is not None:
            raise exceptions.ParseError(problem)
        return document


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """DRF's limit/offset paging with both numbers bounded.

    Unbounded, ``?limit=10**30`` or ``?offset=10**30`` reach PostgreSQL as a LIMIT/OFFSET
    beyond bigint: a 500 on every list endpoint. ``max_limit`` clamps the page size (the
    ``next`` link carries on from there; gpuctl asks for 500 at a time), and an offset past
    any table's size is clamped to one that is still past it (an empty page).
    """

    max_limit = 1000
    max_offset = 2**31

    def paginate_queryset(self, queryset, request, view=None):
        for name in (self.limit_query_param, self.offset_query_param):
            value = request.query_params.get(name)
            if value is not None and not is_ascii_number(value):
                raise exceptions.ValidationError({name: ["a whole number (digits 0-9)"]})
        limit = request.query_params.get(self.limit_query_param)
        if limit is not None and not limit.lstrip("0"):  # DRF took 0 for "the default"
            raise exceptions.ValidationError({self.limit_query_param: ["at least 1"]})
        return super().paginate_queryset(queryset, request, view)

    def get_offset(self, request) -> int:
        return min(super().get_offset(request), self.max_offset)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        """DRF's two parameters, with the least each takes (less is a 400). No maximum:
        larger values are clamped, not refused."""
        parameters = super().get_schema_operation_parameters(view)
        least = {self.limit_query_param: 1, self.offset_query_param: 0}
        for parameter in parameters:
            parameter["schema"]["minimum"] = least[parameter["name"]]
        return parameters


def is_ascii_number(text: str) -> bool:
    """Digits 0-9 only: ``str.isdigit`` and ``int`` also take ``"٧"`` and ``"２"``."""
    return text.isascii() and text.isdigit()
