"""Shared fixtures: a small seeded demo (lines, queues, users per role, 4 uniform nodes)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

DEMO_PASSWORD = "demo-pass-123"
# The environment of a production process (DEBUG off, a real secret), for tests that
# start one: settings are read at start-up, so they run in a subprocess.
PRODUCTION_ENV = {
    "PATH": "/usr/bin:/bin",
    "DEBUG": "0",
    "SECRET_KEY": "p" * 20 + "rod-secret-key-with-enough-entropy-0123456789abcdef",
    "ALLOWED_HOSTS": "portal.example.org",
    "DATABASE_URL": "postgres://u:p@127.0.0.1:1/portal",
    "REDIS_URL": "redis://127.0.0.1:1/0",
}


@pytest.fixture
def demo(db, monkeypatch):
    """The demo seed on a small uniform cluster (4 nodes x 8 GPUs, one rack), no workload."""
    monkeypatch.setenv("DEMO_PASSWORD", DEMO_PASSWORD)
    call_command(
        "seed_demo", nodes=4, nodes_per_rack=4, uniform=True, no_workload=True, stdout=None
    )
    from django.contrib.auth import get_user_model

    return {u.username: u for u in get_user_model().objects.all()}


@pytest.fixture
def celery_eager():
    """Celery tasks run in the test process when queued (as a worker would run them): the
    mail and alert tasks that services queue after their commit."""
    from portal.celery import app

    before = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = before


@pytest.fixture
def api(demo):
    """An API client factory: ``api("researcher")`` is authenticated as that demo user."""

    from rest_framework.test import APIClient

    def make(username: str | None) -> APIClient:
        client = APIClient()
        if username:
            client.force_authenticate(demo[username])
        return client

    return make


@pytest.fixture(scope="session", autouse=True)
def _no_connection_left_at_the_end(request):
    """Before the throw-away database is dropped, end the sessions still on it: connections
    a test's thread took from the pool and never gave back (the pool closes only those it
    holds), which made every run end with "database test_portal_gwN is being accessed by
    other users" and left the database behind. Nothing without pytest-django (``-p
    no:django``: the engine's tests alone, docs/engine.md)."""
    if not request.config.pluginmanager.hasplugin("django"):
        yield
        return
    request.getfixturevalue("django_db_setup")
    django_db_blocker = request.getfixturevalue("django_db_blocker")
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
