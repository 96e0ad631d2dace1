"""``gpuctl maintenance list|create|cancel`` against a live portal: the body it sends, the
table it prints, refusals as one line with exit 1, usage errors with exit 2."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from core import clock
from core.models import AuditRecord
from scheduling.models import MaintenanceWindow
from tests.cli.test_gpuctl import one_line_error

pytestmark = pytest.mark.django_db(transaction=True)

NODE = "r000-n01"


def at(hours: float) -> str:
    moment = (clock.now() + timedelta(hours=hours)).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def test_create_list_and_cancel(gpuctl):
    assert gpuctl("researcher", "maintenance").out == ""
    start, end = at(3), at(5)
    run = gpuctl("oncall", "maintenance", "create", NODE, "r000-n02", "--starts-at", start,
                 "--ends-at", end, "--reason", "firmware")  # fmt: skip
    assert run.code == 0, run.err
    window = MaintenanceWindow.objects.get()
    shown = f"{window.starts_at:%Y-%m-%d %H:%M}"
    assert run.out.startswith(f"scheduled maintenance {window.pk} (2 nodes, {shown} to ")
    assert run.out.rstrip().endswith(f"gpuctl maintenance cancel {window.pk}")
    assert AuditRecord.objects.filter(action="maintenance.create", actor_name="oncall").exists()

    listing = gpuctl("researcher", "maintenance")
    assert listing.code == 0
    header, row = listing.out.splitlines()
    assert header.split() == ["ID", "STATE", "STARTS(UTC)", "ENDS(UTC)", "NODES", "BY", "REASON"]
    assert row.split()[:2] == [str(window.pk), "scheduled"]
    assert f"{NODE},r000-n02" in row and "firmware" in row and shown in row
    as_json = json.loads(gpuctl("researcher", "maintenance", "list", "--json").out)
    assert [(w["id"], w["starts_at"], w["ends_at"]) for w in as_json] == [(window.pk, start, end)]
    assert gpuctl("researcher", "maintenance", "list", "--node", "r000-n03").out == ""

    cancelled = gpuctl("admin", "maintenance", "cancel", str(window.pk))
    assert cancelled.code == 0 and cancelled.out.rstrip().endswith(": cancelled")
    assert gpuctl("researcher", "maintenance").out == ""
    assert str(window.pk) in gpuctl("researcher", "maintenance", "list", "--all").out


def test_a_whole_rack_open_ended(gpuctl):
    run = gpuctl("admin", "maintenance", "create", "--rack", "r000", "--starts-at", at(1),
                 "--reason", "PDU swap", "--json")  # fmt: skip
    assert run.code == 0, run.err
    created = json.loads(run.out)
    assert created["ends_at"] is None and len(created["nodes"]) == 4


def test_refusals_are_one_line_and_store_nothing(gpuctl):
    run = gpuctl("researcher", "maintenance", "create", NODE, "--starts-at", at(2),
                 "--reason", "curious")  # fmt: skip
    assert run.code == 1 and "on-call engineers and admins only" in one_line_error(run)
    run = gpuctl("oncall", "maintenance", "create", NODE, "--starts-at", "tomorrow",
                 "--reason", "fw")  # fmt: skip
    assert run.code == 1 and "starts_at" in one_line_error(run)
    run = gpuctl("oncall", "maintenance", "create", NODE, "--starts-at", at(3),
                 "--ends-at", at(2), "--reason", "fw")  # fmt: skip
    assert run.code == 1 and "must be after starts_at" in one_line_error(run)
    assert gpuctl("oncall", "maintenance", "create", NODE, "--starts-at", at(2)).code == 2
    assert gpuctl("oncall", "maintenance", "cancel").code == 2
    assert not MaintenanceWindow.objects.exists()
    assert gpuctl("oncall", "maintenance", "cancel", "999999").code == 1
