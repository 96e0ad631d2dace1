"""The one beat schedule (portal/celery.py): every entry names a real task, runs at its
cadence, and expires before (or when) the next run is due, so a busy worker drops stale
runs instead of working through a backlog."""

from __future__ import annotations

import importlib

import pytest

from portal.celery import beat_schedule

CADENCES = {
    "scheduling-cycle": (2.5, 2.5),
    "demo-workload": (5.0, 5.0),
    "metrics-rollup": (5.0, 5.0),  # writes once per cluster minute (sample_due)
    "health-sweep": (30.0, 25.0),
    "quota-activation": (60.0, 55.0),
    "job-mail": (60.0, 55.0),  # one digest a minute at most per person (scheduling.job_mail)
    "retention": (900.0, 840.0),
    "alerts-resend": (60.0, 55.0),  # a no-op unless ALERTMANAGER_URL is set
    "directory-sweep": (900.0, 810.0),  # LDAP_SWEEP_SECONDS; a no-op unless LDAP is set
    "provider-sweep": (900.0, 810.0),  # OIDC_SWEEP_SECONDS; a no-op unless OIDC is set
}


def test_the_schedule_has_exactly_the_documented_entries_in_order():
    assert list(beat_schedule(2.5)) == list(CADENCES)


@pytest.mark.parametrize("name", list(CADENCES))
def test_each_entry_runs_at_its_cadence_and_expires_by_the_next_run(name):
    entry = beat_schedule(2.5)[name]
    seconds, expires = CADENCES[name]
    assert entry == {"task": entry["task"], "schedule": seconds, "options": {"expires": expires}}
    assert expires <= seconds


@pytest.mark.parametrize("name", list(CADENCES))
def test_each_entry_names_a_task_that_exists(name):
    module, _, function = beat_schedule(2.5)[name]["task"].rpartition(".")
    task = getattr(importlib.import_module(module), function)
    assert task.name == beat_schedule(2.5)[name]["task"]


@pytest.mark.parametrize("cycle_seconds", [1.0, 2.5, 10.0])
def test_the_cycle_follows_the_configured_period(cycle_seconds):
    entry = beat_schedule(cycle_seconds)["scheduling-cycle"]
    assert (entry["schedule"], entry["options"]["expires"]) == (cycle_seconds, cycle_seconds)
    others = {k: v for k, v in beat_schedule(cycle_seconds).items() if k != "scheduling-cycle"}
    assert others == {k: v for k, v in beat_schedule(99.0).items() if k != "scheduling-cycle"}
