"""Fixtures of the bench tests: the benchmark endpoints mounted as ``BENCH_ENDPOINTS=1`` does."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest
from django.urls import clear_url_caches


def _reload_urls() -> None:
    import portal.urls

    importlib.reload(portal.urls)
    clear_url_caches()


@pytest.fixture
def bench_endpoints(monkeypatch) -> Iterator[None]:
    """The URLconf as a web server started with ``BENCH_ENDPOINTS=1`` builds it (the route
    is decided when ``portal.urls`` is imported), then as without it again."""
    monkeypatch.setenv("BENCH_ENDPOINTS", "1")
    _reload_urls()
    try:
        yield
    finally:
        monkeypatch.delenv("BENCH_ENDPOINTS")
        _reload_urls()
