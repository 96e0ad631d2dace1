"""Fixtures of the security tests: the populated world, and clean rate-limit counters."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from core import security
from tests.security.pages import World, build_world
from tests.security.people import make_people


def clear_rate_limits() -> None:
    """Forget every failure counter (tests share 127.0.0.1 and one Redis)."""
    client = cache._cache.get_client(write=True)
    keys = list(client.scan_iter(match=f"*{cache.make_key('ratelimit:')}*"))
    if keys:
        client.delete(*keys)


@pytest.fixture(autouse=True)
def clean_rate_limits(monkeypatch):
    """Fresh counters, and no pause left by a test that took the cache away."""
    monkeypatch.setattr(security, "_cache_paused_until", 0.0)
    clear_rate_limits()
    yield
    clear_rate_limits()


@pytest.fixture
def world(api) -> World:
    return build_world(api)


@pytest.fixture
def people(db):
    """The personas of the permission tables (``tests/security/people.py``)."""
    return make_people()


@pytest.fixture
def signed_in(demo):
    """``signed_in("oncall")``: a page client with that demo user's session."""
    from django.test import Client

    def make(username: str) -> Client:
        client = Client()
        client.force_login(demo[username])
        return client

    return make
