"""/healthz and /readyz (API.md, "Health"): liveness without auth or redirect; readiness
naming each check, 503 when one fails."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from portal import health
from scheduling.models import SchedulingCycle

pytestmark = pytest.mark.django_db


def ran(kind: str, seconds_ago: float) -> None:
    at = timezone.now() - timedelta(seconds=seconds_ago)
    SchedulingCycle.objects.create(kind=kind, started_at=at, cluster_time=at, duration_ms=1)


def test_healthz_answers_anonymously_without_touching_the_database(django_assert_num_queries):
    with django_assert_num_queries(0):
        response = Client().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


@override_settings(SECURE_SSL_REDIRECT=True, SECURE_REDIRECT_EXEMPT=[r"^healthz$", r"^readyz$"])
def test_the_probes_are_not_redirected_to_https_while_pages_are():
    client = Client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code in (200, 503)
    assert client.get("/accounts/login/").status_code == 301


def test_readyz_names_each_check_and_is_503_until_the_loop_runs():
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    assert list(body["checks"]) == ["database", "redis", "migrations", "last_cycle", "beat"]
    checks = body["checks"]
    assert checks["database"]["ok"] and checks["redis"]["ok"] and checks["migrations"]["ok"]
    assert checks["last_cycle"] == {"ok": False, "detail": "no cycle yet"}
    assert checks["beat"] == {"ok": False, "detail": "no health sweep yet"}


def test_readyz_is_200_with_a_recent_cycle_and_sweep():
    ran("cycle", 2)
    ran("sweep", 20)
    response = Client().get("/readyz")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "ready"
    assert response.json()["checks"]["last_cycle"]["detail"].startswith("last cycle ")


@override_settings(SCHEDULER_CYCLE_SECONDS=5)
def test_a_stale_cycle_or_a_silent_beat_is_named():
    ran("cycle", 31)  # more than max(3 x 5 s, 30 s)
    ran("sweep", 91)  # more than 3 x 30 s
    response = Client().get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert not checks["last_cycle"]["ok"] and "limit 30 s" in checks["last_cycle"]["detail"]
    assert not checks["beat"]["ok"] and "limit 90 s" in checks["beat"]["detail"]


def test_a_failing_dependency_is_a_503_not_a_500(monkeypatch):
    ran("cycle", 1)
    ran("sweep", 1)

    def down(*args, **kwargs):
        raise ConnectionError("redis is down")

    monkeypatch.setattr(health.cache, "set", down)
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["redis"] == {"ok": False, "detail": "redis is down"}
    assert response.json()["checks"]["database"]["ok"]


@pytest.mark.parametrize("stale", ["cycle", "sweep"])
def test_one_stale_loop_alone_turns_readyz_503(stale):
    ran("cycle", 1)
    ran("sweep", 1)
    SchedulingCycle.objects.filter(kind=stale).update(
        started_at=timezone.now() - timedelta(hours=1)
    )
    response = Client().get("/readyz")
    assert response.status_code == 503
    failed = [name for name, check in response.json()["checks"].items() if not check["ok"]]
    assert failed == ["last_cycle" if stale == "cycle" else "beat"]


def test_the_database_down_is_a_503_naming_it(monkeypatch):
    from django.db import OperationalError

    ran("cycle", 1)
    ran("sweep", 1)
    connection = health.connections[health.DEFAULT_DB_ALIAS]

    def refused(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "cursor", refused)
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == {"ok": False, "detail": "connection refused"}


def test_a_migration_not_applied_is_a_503_naming_it():
    """A real unapplied migration: its row taken out of django_migrations (rolled back with
    the test), as on a database an upgrade's new code reaches before ``migrate`` ran."""
    from django.db.migrations.recorder import MigrationRecorder

    ran("cycle", 1)
    ran("sweep", 1)
    assert Client().get("/readyz").status_code == 200
    latest = MigrationRecorder.Migration.objects.filter(app="scheduling").latest("id")
    latest.delete()
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == {
        "ok": False, "detail": "1 migration(s) not applied"
    }  # fmt: skip
