"""Health endpoints for load balancers and orchestrators (API.md, "Health").

``/healthz``: the process answers; no database, no session, no redirect. ``/readyz``:
the portal can serve and its loop runs: PostgreSQL answers, Redis answers, every
migration is applied, the last scheduling cycle is recent and beat is alive (the health
sweep, a beat entry of its own, ran recently). 200 when every check passes, else 503;
the JSON body names each check, so an operator sees which one failed.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from scheduling.models import SchedulingCycle

# The health sweep runs every 30 s (portal/celery.py); three missed ones mean beat is gone.
SWEEP_PERIOD_S = 30.0
MISSED_PERIODS = 3


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """The process answers (liveness): nothing else is touched."""
    return JsonResponse({"status": "ok"})


def _database() -> str:
    with connections[DEFAULT_DB_ALIAS].cursor() as cur:
        cur.execute("SELECT 1")
    return "answers"


def _redis() -> str:
    cache.set("readyz", "1", timeout=10)
    if cache.get("readyz") != "1":
        raise RuntimeError("wrote a key and did not read it back")
    return "answers"


def _migrations() -> str:
    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    missing = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if missing:
        raise RuntimeError(f"{len(missing)} migration(s) not applied")
    return "all applied"


def _younger_than(kind: str, limit_s: float, what: str) -> str:
    last = (
        SchedulingCycle.objects.filter(kind=kind).order_by("-started_at")
        .values_list("started_at", flat=True).first()
    )  # fmt: skip
    if last is None:
        raise RuntimeError(f"no {what} yet")
    age = (timezone.now() - last).total_seconds()
    if age > limit_s:
        raise RuntimeError(f"last {what} {age:.0f} s ago (limit {limit_s:.0f} s)")
    return f"last {what} {age:.0f} s ago"


def _last_cycle() -> str:
    limit = max(MISSED_PERIODS * settings.SCHEDULER_CYCLE_SECONDS, 30.0)
    return _younger_than("cycle", limit, "cycle")


def _beat() -> str:
    return _younger_than("sweep", MISSED_PERIODS * SWEEP_PERIOD_S, "health sweep")


CHECKS: dict[str, Callable[[], str]] = {
    "database": _database,
    "redis": _redis,
    "migrations": _migrations,
    "last_cycle": _last_cycle,
    "beat": _beat,
}


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: every check of ``CHECKS``; 503 naming the ones that failed."""
    results = {}
    for name, check in CHECKS.items():
        try:
            results[name] = {"ok": True, "detail": check()}
        except Exception as exc:  # any failure is a finding, reported, never a 500
            results[name] = {"ok": False, "detail": str(exc)[:300] or type(exc).__name__}
    ready = all(r["ok"] for r in results.values())
    return JsonResponse(
        {"status": "ready" if ready else "not ready", "checks": results},
        status=200 if ready else 503,
    )
