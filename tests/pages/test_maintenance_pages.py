"""Scheduled maintenance in the browser: the form on the node page and the console, the
times in the viewer's zone, the upcoming window on both pages, refusals with the field's
message and nothing stored, cancelling, and the roles."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from core import clock
from core.models import AuditRecord, Profile
from scheduling.models import MaintenanceWindow
from scheduling.nodes.maintenance import create_window

pytestmark = pytest.mark.django_db

NODE = "r000-n01"


def local(moment) -> str:
    """What a datetime-local input sends (minutes, no zone)."""
    return moment.strftime("%Y-%m-%dT%H:%M")


def login(client, demo, who="oncall"):
    client.force_login(demo[who])
    return client


def form(hours=3, until=5, **changes) -> dict:
    now = clock.now()
    return {"nodes": NODE, "back": NODE, "starts_at": local(now + timedelta(hours=hours)),
            "ends_at": local(now + timedelta(hours=until)), "reason": "firmware", **changes}  # fmt: skip


def test_scheduled_from_the_node_page_and_shown_there_and_on_the_console(client, demo):
    login(client, demo)
    page = client.get(f"/oncall/nodes/{NODE}/").content.decode()
    assert "No maintenance is scheduled on this node." in page
    assert 'id="maintenance-form"' in page and f'value="{NODE}"' in page
    response = client.post("/oncall/maintenance/", form(), follow=True)
    assert response.redirect_chain[-1][0] == f"/oncall/nodes/{NODE}/#maintenance"
    window = MaintenanceWindow.objects.get()
    body = response.content.decode()
    assert f"Maintenance #{window.pk} scheduled on 1 node" in body
    shown = window.starts_at.strftime("%Y-%m-%d %H:%M UTC")
    # relative to the cluster clock, which the simulator runs 60 times faster than the wall
    assert re.search(rf"Maintenance from {shown}</strong> \(in [23] h( \d+ min)?, until ", body)
    assert ": firmware" in body
    console = client.get("/oncall/").content.decode()
    assert f"Maintenance from {shown}" in console
    assert f'<a href="/oncall/nodes/{NODE}/">{NODE}</a>' in console
    assert AuditRecord.objects.filter(action="maintenance.create", actor=demo["oncall"]).exists()


def test_the_form_reads_and_the_page_writes_times_in_the_viewers_zone(client, demo):
    Profile.objects.filter(user=demo["oncall"]).update(time_zone="Asia/Tokyo")
    login(client, demo)
    now = clock.now()
    tokyo = now + timedelta(hours=9 + 3)  # three hours from now, on a clock in Tokyo
    client.post("/oncall/maintenance/", form(starts_at=local(tokyo), ends_at=""))
    window = MaintenanceWindow.objects.get()
    assert abs((window.starts_at - (now + timedelta(hours=3))).total_seconds()) < 120
    assert window.ends_at is None
    page = client.get(f"/oncall/nodes/{NODE}/").content.decode()
    assert f"Maintenance from {tokyo:%Y-%m-%d %H:%M} JST" in page
    assert "open-ended" in page


def test_a_whole_rack_from_the_console(client, demo):
    login(client, demo, "admin")
    response = client.post("/oncall/maintenance/", form(nodes="", back="", rack="r000"))
    assert response.status_code == 302 and response["Location"] == "/oncall/#maintenance"
    assert MaintenanceWindow.objects.get().nodes.count() == 4


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"hours": 3, "until": 2}, "must be after starts_at"),
        ({"hours": -1}, "in the past"),
        ({"starts_at": "soon"}, "not a date and time"),
        ({"nodes": "nope-1"}, "unknown node"),
        ({"reason": ""}, "say why"),
    ],
)
def test_bad_input_is_refused_with_the_fields_message_and_nothing_stored(
    client, demo, changes, message
):
    login(client, demo)
    hours, until = changes.pop("hours", 3), changes.pop("until", 5)
    response = client.post("/oncall/maintenance/", form(hours, until, **changes))
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not MaintenanceWindow.objects.exists()


@pytest.mark.parametrize("who", ["researcher", "researcher2", "lead"])
def test_others_may_not_schedule_or_cancel(client, demo, who):
    window = create_window(demo["oncall"], nodes=[NODE], reason="fw",
                           starts_at=clock.now() + timedelta(hours=2))  # fmt: skip
    login(client, demo, who)
    assert client.post("/oncall/maintenance/", form()).status_code == 403
    assert client.post(f"/oncall/maintenance/{window.pk}/cancel/").status_code == 403
    assert MaintenanceWindow.objects.get().state == "scheduled"


def test_cancel_from_the_page_then_again(client, demo):
    window = create_window(demo["oncall"], nodes=[NODE], reason="fw",
                           starts_at=clock.now() + timedelta(hours=2))  # fmt: skip
    login(client, demo)
    response = client.post(f"/oncall/maintenance/{window.pk}/cancel/", {"back": NODE}, follow=True)
    assert (
        f"Maintenance #{window.pk} cancelled: cancelled before its start"
        in response.content.decode()
    )
    assert "No maintenance is scheduled on this node." in response.content.decode()
    again = client.post(f"/oncall/maintenance/{window.pk}/cancel/", {"back": NODE})
    assert again.status_code == 409 and "already cancelled" in again.content.decode()
    assert client.post("/oncall/maintenance/999999/cancel/").status_code == 404
