"""One Redis connection pool per process and server for Django's cache.

Django builds a cache client per request context, and under ASGI every request is a
new context: with redis-py's default pool each request opened (and dropped) its own
Redis connection. This pool class hands every client the same pool.
"""

from __future__ import annotations

import threading
from typing import Any

import redis


class SharedConnectionPool(redis.ConnectionPool):
    """``ConnectionPool.from_url`` that returns the process's pool for that URL and options."""

    _shared: dict[tuple, redis.ConnectionPool] = {}
    _lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> redis.ConnectionPool:
        key = (url, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
        with cls._lock:
            pool = cls._shared.get(key)
            if pool is None:
                pool = cls._shared[key] = super().from_url(url, **kwargs)
        return pool
