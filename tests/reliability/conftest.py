"""Real processes for fault drills: a dedicated Redis, the web server, Celery, run_cycle subprocesses.

The shared test PostgreSQL and Redis (``tests/settings.py``) serve every test in
this process, so a drill never stops them: it starts its own Redis (or its own
PostgreSQL) and points the processes under test at it. Tests that use the shared
test database from a subprocess need committed data: ``django_db(transaction=True)``.

Once a browser test has run, Playwright (session-scoped) keeps an event loop running
in the main thread, where ``async_to_sync`` (publishing live events) and ``asyncio.run``
refuse to work. So the tests here that are not browser tests run in a thread of their
own (``pytest_pyfunc_call`` below), as the loop does in a Celery worker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from django.conf import settings

from portal.devservices import Redis, free_port
from tests.drills import make_quotas_roomy

ROOT = Path(__file__).resolve().parents[2]


def scratch_dir(prefix: str) -> Path:
    """A throw-away folder the ``postgres`` user can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def shared_database_url() -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def child_env(**overrides: str) -> dict[str, str]:
    """Environment of a portal subprocess: the test database and Redis unless overridden."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=shared_database_url(),
        REDIS_URL=settings.REDIS_URL,
        DEBUG="1",
        SIMULATOR_SPEED="0",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


def wait_until(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.1):
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
    """Stop a process started with ``start_new_session=True`` and everything it forked
    (waiting for its children too, so none still holds a test-database session)."""
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start ``python <args>`` from the checkout in its own session, output to ``log``."""
    out = open(log, "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


@contextmanager
def web_server(env: dict[str, str], log: Path) -> Iterator[str]:
    """The portal's web server (portal/web.py, one process: HTTP + websockets); yields its URL."""
    port = free_port()
    proc = spawn(["-m", "portal.web", "--port", str(port), "--workers", "1"], env, log)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"the web server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            return requests.get(base + "/accounts/login/", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_until(up, 30, "the web server to serve")
        yield base
    finally:
        stop_process(proc)


def in_a_thread(fn: Callable, *args, **kwargs):
    """Call ``fn`` in a fresh thread (no event loop), closing that thread's DB connections."""
    from django.db import connections

    def call():
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """Run the non-browser tests of this folder off the main thread (see the docstring)."""
    db = pyfuncitem.get_closest_marker("django_db")
    if pyfuncitem.get_closest_marker("browser") or (db and not db.kwargs.get("transaction")):
        return None  # (a rolled-back test's data is visible to the main thread's connection only)
    names = pyfuncitem._fixtureinfo.argnames
    in_a_thread(pyfuncitem.obj, **{name: pyfuncitem.funcargs[name] for name in names})
    return True


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = scratch_dir("portal-reliability-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def own_redis(scratch) -> Iterator[Redis]:
    """A Redis of this test's own, free to stop and restart (same port, empty again)."""
    redis = Redis(scratch / "redis", free_port()).start()
    yield redis
    redis.stop()


@pytest.fixture
def on_own_redis(own_redis: Redis, settings) -> Redis:
    """This process's channel layer and cache on the test's own Redis, as the portal's are."""
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [own_redis.url]},
        }
    }
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": own_redis.url,
        }
    }
    return own_redis


@pytest.fixture
def roomy(demo):
    """The demo with quotas far above the 32-GPU test cluster: placement is what is tested."""
    make_quotas_roomy()
    return demo


def session_cookie(user) -> str:
    """A real session (database-backed) for ``user``, as a browser would hold after login."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def celery_worker(
    env: dict[str, str], log: Path, *extra: str, preload: str = ""
) -> subprocess.Popen:
    """A Celery worker of the portal (the loop's tasks), logging at INFO to ``log``;
    ``preload`` names a module imported first (test instrumentation)."""
    start = ["-m", "celery"]
    if preload:
        start = ["-c", f"import {preload}; from celery.__main__ import main; main()"]
    return spawn([*start, "-A", "portal", "worker", "--without-heartbeat", "--without-mingle",
                  "--without-gossip", "-l", "info", *extra], env, log)  # fmt: skip


def celery_beat(env: dict[str, str], log: Path, schedule: Path) -> subprocess.Popen:
    """A Celery beat with its own schedule file (two beats must not share one)."""
    return spawn(["-m", "celery", "-A", "portal", "beat", "-l", "info", "-s", str(schedule)],
                 env, log)  # fmt: skip


def loop_env(redis_url: str, **overrides: str) -> dict[str, str]:
    """A worker's or beat's environment: production settings on the test database."""
    return child_env(
        DJANGO_SETTINGS_MODULE="portal.settings", REDIS_URL=redis_url,
        SCHEDULER_CYCLE_SECONDS="1", **overrides,
    )  # fmt: skip
