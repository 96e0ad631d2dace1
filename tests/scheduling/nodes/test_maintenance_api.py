"""``/api/v1/maintenance/``: the fields, times in ISO 8601 UTC, who may schedule and cancel
(403 before anything is read), bad bodies a 400 naming the field with nothing stored, a
second cancel a 409."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core import clock
from core.models import AuditRecord
from scheduling.models import MaintenanceWindow

pytestmark = pytest.mark.django_db

NODE = "r000-n01"
FIELDS = {"id", "nodes", "starts_at", "ends_at", "reason", "state", "note", "created_by",
          "created_at"}  # fmt: skip
URL = "/api/v1/maintenance/"


def at(hours: float) -> str:
    moment = (clock.now() + timedelta(hours=hours)).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def body(**changes) -> dict:
    return {"nodes": [NODE], "starts_at": at(2), "ends_at": at(4), "reason": "firmware",
            **changes}  # fmt: skip


def rows(response) -> list[dict]:
    data = response.json()
    return data["results"] if isinstance(data, dict) else data


def test_oncall_schedules_a_window_and_everyone_signed_in_sees_it(api):
    sent = body()
    created = api("oncall").post(URL, sent, format="json")
    assert created.status_code == 201, created.json()
    data = created.json()
    assert set(data) == FIELDS
    assert (data["nodes"], data["reason"], data["state"]) == ([NODE], "firmware", "scheduled")
    assert (data["starts_at"], data["ends_at"]) == (sent["starts_at"], sent["ends_at"])
    assert data["created_by"] == "oncall"
    assert data["created_at"].endswith("Z")
    listed = api("researcher").get(URL)
    assert listed.status_code == 200 and [r["id"] for r in rows(listed)] == [data["id"]]
    assert rows(api("researcher").get(URL, {"node": NODE}))[0]["id"] == data["id"]
    assert rows(api("researcher").get(URL, {"node": "r000-n02"})) == []
    assert rows(api("researcher").get(URL, {"state": "done"})) == []
    assert api("researcher").get(URL, {"colour": "red"}).status_code == 400
    assert api(None).get(URL).status_code in (401, 403)


def test_an_open_ended_window_on_a_rack(api):
    created = api("admin").post(URL, {"rack": "r000", "starts_at": at(1), "reason": "power"},
                                format="json")  # fmt: skip
    assert created.status_code == 201, created.json()
    assert created.json()["ends_at"] is None
    assert len(created.json()["nodes"]) == 4


@pytest.mark.parametrize("who", ["researcher", "researcher2", "lead"])
def test_others_get_403_and_nothing_is_stored(api, who):
    assert api(who).post(URL, body(), format="json").status_code == 403
    assert api(who).post(URL, {"bad": 1}, format="json").status_code == 403, "before the body"
    window = api("oncall").post(URL, body(), format="json").json()
    assert api(who).post(f"{URL}{window['id']}/cancel/").status_code == 403
    assert MaintenanceWindow.objects.get().state == "scheduled"


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"ends_at": "2020-01-01T00:00:00Z"}, "ends_at"),
        ({"starts_at": "2020-01-01T00:00:00Z"}, "starts_at"),
        ({"starts_at": "next tuesday"}, "starts_at"),
        ({"starts_at": "2026-12-01T14:00:00"}, "starts_at"),  # no zone
        ({"starts_at": 1_800_000_000}, "starts_at"),
        ({"nodes": ["nope"]}, "nodes"),
        ({"nodes": [f"n{i}" for i in range(300)]}, "nodes"),
        ({"reason": ""}, "reason"),
        ({"reason": "x" * 301}, "reason"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_bodies_are_a_400_naming_the_field_and_store_nothing(api, changes, field):
    response = api("oncall").post(URL, body(**changes), format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"], response.json()
    assert not MaintenanceWindow.objects.exists()
    assert not AuditRecord.objects.filter(action__startswith="maintenance.").exists()


def test_control_characters_are_refused(api):
    response = api("oncall").post(URL, body(reason="fw\x00"), format="json")
    assert response.status_code == 400
    assert not MaintenanceWindow.objects.exists()


def test_cancel_answers_the_window_then_409_then_404_for_an_unknown_one(api):
    window = api("oncall").post(URL, body(), format="json").json()
    cancelled = api("admin").post(f"{URL}{window['id']}/cancel/")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    again = api("admin").post(f"{URL}{window['id']}/cancel/")
    assert again.status_code == 409 and "state" in again.json()["errors"]
    assert api("admin").post(f"{URL}999999/cancel/").status_code == 404
    assert AuditRecord.objects.filter(action="maintenance.cancel").count() == 1
