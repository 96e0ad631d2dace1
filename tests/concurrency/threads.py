"""Threads for the concurrency tests: each on its own database connection, its errors
collected for the test to assert there are none."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection


def in_thread(errors: list[str], fn: Callable[[], object]) -> threading.Thread:
    """Start ``fn`` in a thread; an exception it raises is appended to ``errors``."""

    def run() -> None:
        try:
            fn()
        except Exception as exc:  # collected: the test asserts there are none
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread
