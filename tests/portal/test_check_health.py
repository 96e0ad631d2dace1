"""``manage.py check_health`` (#17): /readyz's checks for processes without HTTP; compose's
``beat`` healthcheck is ``check_health beat``, failing (exit 1) until a health sweep ran
within 90 s, the same rule as /readyz."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from scheduling.models import SchedulingCycle

pytestmark = pytest.mark.django_db


def check(*names: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("check_health", *names, stdout=out, stderr=out)
    except SystemExit as stop:
        return int(stop.code), out.getvalue()
    return 0, out.getvalue()


def sweep(age_s: float) -> None:
    at = timezone.now() - timedelta(seconds=age_s)
    SchedulingCycle.objects.create(kind="sweep", started_at=at, cluster_time=at, duration_ms=1)


def test_beat_is_unhealthy_until_a_sweep_ran():
    code, out = check("beat")
    assert code == 1 and "beat: FAILED: no health sweep yet" in out


def test_beat_is_unhealthy_when_the_last_sweep_is_stale():
    sweep(95)
    code, out = check("beat")
    assert code == 1 and re.search(r"beat: FAILED: last health sweep 9\d s ago \(limit 90 s\)", out)


def test_beat_is_healthy_after_a_recent_sweep():
    sweep(20)
    code, out = check("beat")
    assert code == 0 and re.match(r"beat: ok: last health sweep 2\d s ago", out)


def test_every_check_runs_without_names_and_names_each():
    sweep(5)
    code, out = check()
    names = [line.split(":")[0] for line in out.splitlines()]
    assert names == ["database", "redis", "migrations", "last_cycle", "beat"]
    assert code == 1 and "last_cycle: FAILED: no cycle yet" in out  # no cycle ran here


def test_an_unknown_check_is_a_usage_error():
    code, out = check("bogus")
    assert code == 2 and "unknown check(s): bogus" in out
