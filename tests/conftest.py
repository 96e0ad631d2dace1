"""Shared fixtures: a small seeded demo (lines, queues, users per role, 4 uniform nodes)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

DEMO_PASSWORD = "demo-pass-123"


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
def api(demo):
    """An API client factory: ``api("researcher")`` is authenticated as that demo user."""

    from rest_framework.test import APIClient

    def make(username: str | None) -> APIClient:
        client = APIClient()
        if username:
            client.force_authenticate(demo[username])
        return client

    return make
