"""Single-flight locks for loop tasks, held in Redis with an expiry.

A task that cannot take its lock is skipped, not queued: a slow cycle is never
stacked behind another. The expiry is shorter than the task's period so a
worker that dies holding the lock blocks at most one period.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cache

import redis
from django.conf import settings


@cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)


def redis_client() -> redis.Redis:
    return _client(settings.REDIS_URL)


@contextlib.contextmanager
def single_flight(name: str, ttl_seconds: float) -> Iterator[bool]:
    """Yield True when this process holds ``name`` (released on exit), else False."""
    lock = redis_client().lock(f"lock:{name}", timeout=ttl_seconds, blocking=False)
    acquired = lock.acquire(blocking=False)
    try:
        yield bool(acquired)
    finally:
        if acquired:
            with contextlib.suppress(redis.exceptions.LockError):
                lock.release()
