"""Fixtures of the integration tests (real Alertmanager, Prometheus, workers)."""

from __future__ import annotations

import pytest


@pytest.fixture
def celery_eager():
    """Celery tasks run in the test process when queued (as a worker would run them)."""
    from portal.celery import app

    before = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = before
