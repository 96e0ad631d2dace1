"""Rate limits on failed sign-ins (per username and address, and per username; portal and
admin login forms alike) and on failed API token use; authenticated API use is not throttled."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.security import Limit, login_limits, token_limits
from tests.conftest import DEMO_PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_counts_from_earlier_tests():
    """Counts live in Redis, which outlives a test: another test's failed sign-ins for the
    same username, minutes before, had started a window that could end midway through
    this one (a lock that never came, seen when tests ran in another order)."""
    redis = cache._cache.get_client()
    for key in redis.scan_iter(match=cache.make_key("ratelimit:*")):
        redis.delete(key)


def sign_in(client: Client, username: str, password: str, path: str = "/accounts/login/"):
    return client.post(path, {"username": username, "password": password})


def test_ten_failures_lock_the_username_and_then_even_the_right_password_is_refused(demo):
    client = Client()
    for _ in range(10):
        assert sign_in(client, "researcher", "wrong").status_code == 200
    locked = sign_in(client, "researcher", DEMO_PASSWORD)
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) == 300
    text = locked.content.decode()
    assert "Too many failed sign-in attempts" in text and "Wait 5 minutes" in text
    assert "_auth_user_id" not in client.session  # not signed in
    # The lock is per username (spelled any way), and per username only at this count.
    assert sign_in(Client(), "  RESEARCHER ", DEMO_PASSWORD).status_code == 429
    assert sign_in(Client(), "lead", DEMO_PASSWORD).status_code == 302


@pytest.mark.parametrize("spelling", ["\uff52esearcher2", "researcher\uff12"])
def test_full_width_or_other_spellings_of_a_locked_name_are_locked_too(demo, spelling):
    """Django signs ``ｒesearcher2`` in as ``researcher2`` (NFKC): the limiter counts it so."""
    client = Client()
    assert sign_in(client, spelling, DEMO_PASSWORD).status_code == 302, "Django's reading"
    for _ in range(10):
        assert sign_in(Client(), "researcher2", "wrong").status_code == 200
    assert sign_in(Client(), spelling, DEMO_PASSWORD).status_code == 429
    assert sign_in(Client(), spelling, DEMO_PASSWORD, "/admin/login/").status_code == 429


def test_the_lock_lasts_one_window_from_the_first_failure(demo):
    by_user_ip, by_user = login_limits()
    sign_in(Client(), "researcher", "wrong")
    redis = cache._cache.get_client()
    ttl = redis.ttl(cache.make_key(by_user._key("researcher")))
    assert 0 < ttl <= 300
    assert 0 < redis.ttl(cache.make_key(by_user_ip._key("researcher\x00127.0.0.1"))) <= 300
    for limit, value in ((by_user, "researcher"), (by_user_ip, "researcher\x00127.0.0.1")):
        redis.delete(cache.make_key(limit._key(value)))  # the window ended
    assert sign_in(Client(), "researcher", DEMO_PASSWORD).status_code == 302


def test_a_successful_sign_in_clears_the_accounts_counts(demo):
    by_user_ip, by_user = login_limits()
    for _ in range(9):
        sign_in(Client(), "researcher", "wrong")
    assert sign_in(Client(), "researcher", DEMO_PASSWORD).status_code == 302
    assert cache.get(by_user._key("researcher")) is None
    assert cache.get(by_user_ip._key("researcher\x00127.0.0.1")) is None


def test_many_usernames_from_one_address_lock_nobody_out(demo):
    """Behind a proxy or NAT an address is everyone: failures under other names from it
    must not lock out the right password (nor a valid token: see below)."""
    client = Client(REMOTE_ADDR="203.0.113.7")
    for i in range(60):
        assert sign_in(client, f"guess{i}", "wrong").status_code == 200
    assert sign_in(client, "admin", DEMO_PASSWORD).status_code == 302


def test_one_address_cannot_lock_the_owner_out_elsewhere(demo):
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(10):
        assert sign_in(attacker, "lead", "wrong").status_code == 200
    assert sign_in(attacker, "lead", DEMO_PASSWORD).status_code == 429
    owner = Client(REMOTE_ADDR="198.51.100.20")
    assert sign_in(owner, "lead", DEMO_PASSWORD).status_code == 302


def test_the_django_admin_login_is_limited_too(demo):
    client = Client()
    for _ in range(10):
        assert sign_in(client, "admin", "wrong", "/admin/login/").status_code == 200
    assert sign_in(client, "admin", DEMO_PASSWORD, "/admin/login/").status_code == 429
    assert sign_in(Client(), "admin", DEMO_PASSWORD).status_code == 429  # same username


def test_refused_csrf_and_get_requests_are_not_counted(demo):
    strict = Client(enforce_csrf_checks=True)
    for _ in range(15):
        assert sign_in(strict, "researcher", "wrong").status_code == 403
        assert Client().get("/accounts/login/").status_code == 200
    assert sign_in(Client(), "researcher", DEMO_PASSWORD).status_code == 302


@override_settings(LOGIN_FAILURES_PER_USERNAME_AND_IP=2, LOGIN_FAILURES_PER_USERNAME=3)
def test_the_limits_come_from_settings(demo):
    sign_in(Client(), "researcher", "wrong")
    sign_in(Client(), "researcher", "wrong")
    assert sign_in(Client(), "researcher", DEMO_PASSWORD).status_code == 429
    other = Client(REMOTE_ADDR="198.51.100.30")
    assert sign_in(other, "researcher", "wrong").status_code == 200  # the username: 3
    assert sign_in(other, "researcher", DEMO_PASSWORD).status_code == 429


def test_sign_in_works_when_the_cache_is_down(demo, monkeypatch):
    """Fail open: a Redis outage must not lock everybody out, and after the first failure
    the cache is left alone for a while (a frozen Redis costs one request, not each:
    tests/reliability/test_redis_outage.py freezes a real one)."""
    calls = []

    def down(*args, **kwargs):
        calls.append(args)
        raise ConnectionError("redis is down")

    for name in ("get", "add", "incr", "set", "delete"):
        monkeypatch.setattr(cache, name, down)
    for _ in range(12):
        assert sign_in(Client(), "researcher", "wrong").status_code == 200
    assert sign_in(Client(), "researcher", DEMO_PASSWORD).status_code == 302
    assert len(calls) == 1
    assert settings.CACHES["default"]["OPTIONS"]["socket_timeout"] <= 2


def token_client(key: str, ip: str = "127.0.0.1") -> APIClient:
    client = APIClient(REMOTE_ADDR=ip)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_bad_tokens_get_429_but_never_lock_out_a_valid_token(demo):
    good = Token.objects.create(user=demo["researcher"]).key
    for i in range(30):  # distinct prefixes: only the address's count grows
        assert token_client(f"{i:08x}" * 5).get("/api/v1/jobs/").status_code == 401
    refused = token_client("f" * 40).get("/api/v1/jobs/")
    assert refused.status_code == 429
    assert "Too many failed token attempts" in str(refused.data)
    assert int(refused["Retry-After"]) == 300
    # A valid token from that very address still works, as do sessions.
    assert token_client(good).get("/api/v1/jobs/").status_code == 200
    session = APIClient()
    session.force_login(demo["researcher"])
    assert session.get("/api/v1/jobs/").status_code == 200


def test_bad_tokens_with_a_valid_tokens_prefix_do_not_lock_it(demo):
    good = Token.objects.create(user=demo["researcher"]).key
    for i in range(15):
        forged = good[:8] + f"{i:032x}"
        token_client(forged, f"198.51.100.{i}").get("/api/v1/jobs/")
    assert (
        token_client(good[:8] + "0" * 32, "198.51.100.99").get("/api/v1/jobs/").status_code == 429
    )
    assert token_client(good, "198.51.100.99").get("/api/v1/jobs/").status_code == 200


def test_valid_tokens_are_not_counted_and_authenticated_use_is_not_throttled(demo):
    """The 200 submissions/s benchmark must not meet a throttle: none applies to
    authenticated callers (REST_FRAMEWORK sets no DEFAULT_THROTTLE_CLASSES)."""
    from django.conf import settings

    assert not settings.REST_FRAMEWORK.get("DEFAULT_THROTTLE_CLASSES")
    client = token_client(Token.objects.create(user=demo["researcher"]).key)
    statuses = {client.get("/api/v1/queues/").status_code for _ in range(300)}
    assert statuses == {200}
    by_ip, _ = token_limits()
    assert cache.get(by_ip._key("127.0.0.1")) is None


def test_a_limit_counts_within_its_window():
    limit = Limit("test", failures=2, window=60)
    limit.reset("k")
    assert not limit.blocked("k")
    assert limit.hit("k") == 1 and not limit.blocked("k")
    assert limit.hit("k") == 2 and limit.blocked("k")
    limit.reset("k")
    assert not limit.blocked("k")
