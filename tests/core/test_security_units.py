"""core.security piece by piece, without a server: the headers middleware, the failure
counters and their fail-open cache guard, the sign-in limiter around a stand-in view, the
token limiter, and the two API inputs the stock DRF classes turned into 500s.

The counters run on an in-process cache here (``locmem``), so these tests need no Redis
and share no counts with other tests.
"""

from __future__ import annotations

import json
import uuid
from io import BytesIO

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.cache.backends.locmem import LocMemCache
from django.http import HttpResponse, HttpResponseRedirect
from django.test import RequestFactory, override_settings
from rest_framework import exceptions
from rest_framework.request import Request

from core import security
from core.security import (
    CONTENT_SECURITY_POLICY,
    PERMISSIONS_POLICY,
    BoundedLimitOffsetPagination,
    Limit,
    LoginRateLimitMiddleware,
    RateLimitedTokenAuthentication,
    SafeJSONParser,
    SecurityHeadersMiddleware,
    login_limits,
    normalize_username,
    token_limits,
)

rf = RequestFactory()


@pytest.fixture(autouse=True)
def local_cache(monkeypatch) -> LocMemCache:
    """A private cache for the counters, and no pause left over from another test."""
    # A fresh name each time: LocMemCache instances of one name share their storage, and
    # id(monkeypatch) is reused once an earlier test's fixture has been collected.
    cache = LocMemCache(f"security-units-{uuid.uuid4()}", {})
    monkeypatch.setattr(security, "cache", cache)
    monkeypatch.setattr(security, "_cache_paused_until", 0.0)
    return cache


# -- headers ----------------------------------------------------------------------------------


def test_the_policy_allows_only_the_portals_own_origin_and_no_inline_code():
    directives = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["object-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert directives["img-src"] == "'self' data:"
    assert "unsafe" not in CONTENT_SECURITY_POLICY
    assert PERMISSIONS_POLICY.startswith("accelerometer=(), camera=()")
    assert all(part.endswith("=()") for part in PERMISSIONS_POLICY.split(", "))


def test_every_response_gets_the_headers_that_it_does_not_set_itself():
    def view(request):
        response = HttpResponse("ok")
        response["X-Frame-Options"] = "SAMEORIGIN"  # the view's own choice stays
        return response

    response = SecurityHeadersMiddleware(view)(rf.get("/"))
    assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert response["Permissions-Policy"] == PERMISSIONS_POLICY
    assert response["Cross-Origin-Resource-Policy"] == "same-origin"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "SAMEORIGIN"
    assert response["Referrer-Policy"] and response["Cross-Origin-Opener-Policy"]


@override_settings(
    CONTENT_SECURITY_POLICY="default-src 'none'",
    SECURE_REFERRER_POLICY=None,
    SECURE_CROSS_ORIGIN_OPENER_POLICY=None,
    X_FRAME_OPTIONS="DENY",
)
def test_settings_choose_the_policy_and_missing_settings_fall_back_to_same_origin():
    response = SecurityHeadersMiddleware(lambda r: HttpResponse())(rf.get("/"))
    assert response["Content-Security-Policy"] == "default-src 'none'"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"


# -- counters ---------------------------------------------------------------------------------


def test_a_limit_blocks_at_its_count_and_a_reset_clears_it():
    limit = Limit("t", failures=3, window=60)
    assert [limit.hit("ann") for _ in range(2)] == [1, 2]
    assert not limit.blocked("ann")
    assert limit.hit("ann") == 3 and limit.blocked("ann")
    assert not limit.blocked("bob"), "each value counts on its own"
    limit.reset("ann")
    assert not limit.blocked("ann") and limit.hit("ann") == 1


def test_counter_keys_hide_the_value_and_differ_per_limit_name(local_cache):
    a, b = Limit("login-user", 10, 60), Limit("token-ip", 10, 60)
    a.hit("alice@example.org")
    (key,) = [k for k in local_cache._cache]  # noqa: SLF001 - the only key written
    assert "alice" not in key and "ratelimit:login-user:" in key
    assert a._key("x") != b._key("x") and a._key("x") == Limit("login-user", 1, 1)._key("x")
    assert len(a._key("x").rsplit(":", 1)[1]) == 32


def test_a_value_that_is_not_valid_unicode_is_still_counted():
    limit = Limit("t", 1, 60)
    assert limit.hit("\udc80bad") == 1 and limit.blocked("\udc80bad")


def test_a_count_that_expires_between_add_and_incr_starts_again_at_one(monkeypatch):
    class Expiring(LocMemCache):
        def incr(self, key, delta=1, version=None):
            raise ValueError("expired")

    cache = Expiring("expiring", {})
    monkeypatch.setattr(security, "cache", cache)
    assert Limit("t", 5, 60).hit("x") == 1
    assert cache.get(Limit("t", 5, 60)._key("x")) == 1


class Broken:
    """A cache that fails every call, counting the calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            self.calls += 1
            raise ConnectionError("redis is down")

        return fail


def test_a_failing_cache_fails_open_and_is_left_alone_for_the_pause(monkeypatch):
    broken = Broken()
    monkeypatch.setattr(security, "cache", broken)
    clock = [1000.0]
    monkeypatch.setattr(security.time, "monotonic", lambda: clock[0])
    limit = Limit("t", 1, 60)
    assert limit.blocked("x") is False and broken.calls == 1
    assert limit.hit("x") == 0 and limit.reset("x") is None
    assert broken.calls == 1, "paused: the cache is not asked again"
    clock[0] += security.CACHE_PAUSE_S - 0.01
    assert limit.blocked("x") is False and broken.calls == 1
    clock[0] += 0.02
    assert limit.hit("x") == 0 and broken.calls == 2, "after the pause it is tried again"


@override_settings(
    LOGIN_FAILURE_WINDOW_SECONDS=120, LOGIN_FAILURES_PER_USERNAME_AND_IP=2,
    LOGIN_FAILURES_PER_USERNAME=7, TOKEN_FAILURES_PER_IP=4, TOKEN_FAILURES_PER_PREFIX=3,
    TOKEN_FAILURE_WINDOW_SECONDS=30,
)  # fmt: skip
def test_the_limits_are_read_from_settings_each_time():
    assert login_limits() == (Limit("login-user-ip", 2, 120), Limit("login-user", 7, 120))
    assert token_limits() == (Limit("token-ip", 4, 30), Limit("token-prefix", 3, 30))


def test_by_default_one_address_cannot_reach_the_usernames_own_limit():
    by_user_ip, by_user = login_limits()
    assert by_user.failures > by_user_ip.failures and by_user_ip.window == by_user.window == 300


@pytest.mark.parametrize(
    "raw,name",
    [("researcher2", "researcher2"), ("\uff52esearcher2", "researcher2"),
     ("researcher\uff12", "researcher2"), ("  RESEARCHER2 ", "researcher2"),
     ("Re\u0301sume\u0301", "r\u00e9sum\u00e9"), ("\u212b", "\u00e5"), ("", ""),
     ("x" * 400, "x" * 150)],
)  # fmt: skip
def test_usernames_are_counted_as_django_reads_them(raw, name):
    from django.contrib.auth.forms import UsernameField

    assert normalize_username(raw) == name
    assert normalize_username(raw) == UsernameField().to_python(raw).strip().casefold()[:150]


# -- the sign-in limiter ----------------------------------------------------------------------


class LoginView:
    """Stands in for a login view: answers with the status it is given, counts its calls."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.calls = 0

    def __call__(self, request):
        self.calls += 1
        return HttpResponseRedirect("/") if self.status == 302 else HttpResponse(status=self.status)


def sign_in(
    middleware, username: str = "ann", path: str = "/accounts/login/", ip: str = "10.0.0.1"
):
    request = rf.post(path, {"username": username, "password": "x"}, REMOTE_ADDR=ip)
    request.user = AnonymousUser()
    return middleware(request)


@pytest.fixture
def login_paths(monkeypatch):
    monkeypatch.setattr(
        LoginRateLimitMiddleware, "login_paths", lambda self: frozenset({"/accounts/login/"})
    )


@override_settings(LOGIN_FAILURES_PER_USERNAME_AND_IP=2, LOGIN_FAILURES_PER_USERNAME=50)
def test_failures_lock_a_username_however_it_is_spelled_and_the_view_is_not_asked(login_paths):
    view = LoginView(200)
    middleware = LoginRateLimitMiddleware(view)
    assert sign_in(middleware, "Ann").status_code == 200
    assert sign_in(middleware, "  \uff21NN  ").status_code == 200  # full-width A
    locked = sign_in(middleware, "ann")
    assert locked.status_code == 429 and view.calls == 2
    assert locked["Retry-After"] == "300"
    assert "Wait 5 minutes" in locked.content.decode()
    assert sign_in(middleware, "bob").status_code == 200, "other accounts are not locked"


@override_settings(LOGIN_FAILURES_PER_USERNAME_AND_IP=2, LOGIN_FAILURES_PER_USERNAME=3)
def test_one_address_locks_only_itself_out_of_one_account(login_paths):
    middleware = LoginRateLimitMiddleware(LoginView(200))
    for name in ("a", "b", "c", "d", "e"):  # spraying usernames locks no address
        assert sign_in(middleware, name).status_code == 200
    sign_in(middleware, "ann")
    assert sign_in(middleware, "ann").status_code == 200
    assert sign_in(middleware, "ann").status_code == 429, "this address, this account"
    assert sign_in(middleware, "ann", ip="10.0.0.2").status_code == 200, "owner elsewhere"
    assert sign_in(middleware, "ann", ip="10.0.0.3").status_code == 429, "then: everywhere"


@override_settings(LOGIN_FAILURES_PER_USERNAME_AND_IP=2, LOGIN_FAILURES_PER_USERNAME=5)
def test_a_success_clears_the_accounts_counts(login_paths):
    failing = LoginRateLimitMiddleware(LoginView(200))
    by_user_ip, by_user = login_limits()
    sign_in(failing, "ann")
    sign_in(failing, "ann", ip="10.0.0.2")
    assert sign_in(LoginRateLimitMiddleware(LoginView(302)), "ANN").status_code == 302
    assert by_user.hit("ann") == 1, "the username starts again from nothing"
    assert by_user_ip.hit("ann\x0010.0.0.1") == 1
    assert by_user_ip.hit("ann\x0010.0.0.2") == 2, "another address's count is its own"


@override_settings(LOGIN_FAILURES_PER_USERNAME_AND_IP=1, LOGIN_FAILURES_PER_USERNAME=1)
def test_gets_other_paths_and_server_errors_are_not_counted(login_paths):
    view = LoginView(200)
    middleware = LoginRateLimitMiddleware(view)
    request = rf.get("/accounts/login/", REMOTE_ADDR="10.0.0.1")
    for _ in range(3):
        assert middleware(request).status_code == 200
        assert sign_in(middleware, path="/jobs/").status_code == 200
    assert sign_in(LoginRateLimitMiddleware(LoginView(500)), "ann").status_code == 500
    assert sign_in(LoginRateLimitMiddleware(LoginView(403)), "ann").status_code == 403
    by_user_ip, by_user = login_limits()
    assert not by_user_ip.blocked("ann\x0010.0.0.1") and not by_user.blocked("ann")


@override_settings(LOGIN_FAILURES_PER_USERNAME_AND_IP=1, LOGIN_FAILURES_PER_USERNAME=1)
def test_an_empty_username_is_not_counted(login_paths, local_cache):
    view = LoginView(200)
    middleware = LoginRateLimitMiddleware(view)
    for blank in ("", "   ", "", "\u3000"):  # U+3000 is a space to NFKC
        assert sign_in(middleware, blank).status_code == 200
    assert view.calls == 4 and not local_cache._cache


@pytest.mark.parametrize(
    "window,words", [(30, "Wait 1 minute "), (60, "Wait 1 minute "), (61, "Wait 2 minutes"),
                     (3600, "Wait 60 minutes")],
)  # fmt: skip
def test_the_locked_page_rounds_the_wait_up_to_whole_minutes(window, words):
    request = rf.post("/accounts/login/")
    request.user = AnonymousUser()
    response = LoginRateLimitMiddleware(LoginView()).locked_out(request, window)
    text = " ".join(response.content.decode().split())
    assert response.status_code == 429 and response["Retry-After"] == str(window)
    assert words in text + " "
    assert '<a href="/accounts/login/">Back to the sign-in page</a>' in text


def test_the_login_paths_are_the_portals_and_the_admins():
    paths = LoginRateLimitMiddleware(LoginView()).login_paths()
    assert paths == frozenset({"/accounts/login/", "/admin/login/"})


# -- the token limiter ------------------------------------------------------------------------


def drf_request(authorization: str | None = None, ip: str = "10.0.0.9") -> Request:
    extra = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    return Request(rf.get("/api/v1/jobs/", REMOTE_ADDR=ip, **extra))


@pytest.mark.parametrize("header", [None, "Bearer abc", "Basic dXNlcjpwYXNz", "Tokens abc"])
def test_requests_without_a_token_header_are_left_to_other_authentication(header, local_cache):
    assert RateLimitedTokenAuthentication().authenticate(drf_request(header)) is None
    assert not local_cache._cache


@override_settings(TOKEN_FAILURES_PER_IP=1)
def test_a_token_header_without_a_token_is_a_counted_failure():
    auth = RateLimitedTokenAuthentication()
    with pytest.raises(exceptions.AuthenticationFailed, match="No credentials provided"):
        auth.authenticate(drf_request("Token"))
    with pytest.raises(exceptions.Throttled):
        auth.authenticate(drf_request("Token"))


@pytest.mark.django_db
@override_settings(TOKEN_FAILURES_PER_IP=2, TOKEN_FAILURES_PER_PREFIX=100)
def test_bad_tokens_from_one_address_are_answered_429_once_over_its_limit():
    auth = RateLimitedTokenAuthentication()
    for i in range(2):
        with pytest.raises(exceptions.AuthenticationFailed, match="Invalid token."):
            auth.authenticate(drf_request(f"Token nope{i}"))
    with pytest.raises(exceptions.Throttled) as info:
        auth.authenticate(drf_request("Token nope9"))
    assert info.value.wait == 300
    assert "Too many failed token attempts" in str(info.value.detail)
    with pytest.raises(exceptions.AuthenticationFailed):
        auth.authenticate(drf_request("Token nope", ip="10.0.0.10"))


@pytest.mark.django_db
@override_settings(TOKEN_FAILURES_PER_IP=100, TOKEN_FAILURES_PER_PREFIX=2)
def test_bad_tokens_sharing_a_prefix_are_limited_whatever_their_address():
    auth = RateLimitedTokenAuthentication()
    for i in range(2):
        with pytest.raises(exceptions.AuthenticationFailed):
            auth.authenticate(drf_request(f"Token abcdefgh{i}", ip=f"10.0.1.{i}"))
    with pytest.raises(exceptions.Throttled):
        auth.authenticate(drf_request("Token abcdefghZ", ip="10.0.1.9"))
    with pytest.raises(exceptions.AuthenticationFailed):
        auth.authenticate(drf_request("Token zzzzzzzz", ip="10.0.1.9"))


@pytest.mark.django_db
@override_settings(TOKEN_FAILURES_PER_IP=1, TOKEN_FAILURES_PER_PREFIX=1)
def test_a_valid_token_is_never_refused_by_others_failures(django_user_model, local_cache):
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user("tok")
    key = Token.objects.create(user=user).key
    auth = RateLimitedTokenAuthentication()
    for bad in (key[:8] + "x" * 32, key[:8] + "y" * 32):  # its prefix, its address
        with pytest.raises(exceptions.APIException):
            auth.authenticate(drf_request(f"Token {bad}"))
    counted = dict(local_cache._cache)
    got_user, token = auth.authenticate(drf_request(f"Token {key}"))
    assert got_user == user and token.key == key
    assert dict(local_cache._cache) == counted, "a valid token is not counted"
    user.is_active = False
    user.save()
    local_cache.clear()
    with pytest.raises(exceptions.AuthenticationFailed, match="User inactive or deleted."):
        auth.authenticate(drf_request(f"Token {key}", ip="10.0.0.77"))


# -- API input --------------------------------------------------------------------------------


def parse(body: bytes):
    return SafeJSONParser().parse(BytesIO(body), "application/json", {})


def test_deeply_nested_json_is_a_parse_error_not_a_crash():
    with pytest.raises(exceptions.ParseError, match="JSON parse error - nested too deeply"):
        parse(b"[" * 100_000 + b"]" * 100_000)
    assert parse(json.dumps({"a": [[[1]]]}).encode()) == {"a": [[[1]]]}
    with pytest.raises(exceptions.ParseError):
        parse(b"{not json")


@pytest.mark.parametrize(
    "query,limit,offset",
    [
        ("", 100, 0),
        ("limit=10&offset=20", 10, 20),
        (f"limit={10**30}&offset={10**30}", 1000, 2**31),
        ("limit=1000&offset=2147483647", 1000, 2**31 - 1),
        ("limit=-5&offset=-5", 100, 0),
        ("limit=abc&offset=xyz", 100, 0),
    ],
)
def test_paging_numbers_are_bounded_whatever_the_query_says(query, limit, offset):
    paging = BoundedLimitOffsetPagination()
    request = Request(rf.get(f"/api/v1/jobs/?{query}"))
    assert (paging.get_limit(request), paging.get_offset(request)) == (limit, offset)
