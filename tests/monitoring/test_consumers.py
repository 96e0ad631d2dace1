"""The websocket consumer: auth on connect, permission on subscribe, read-only, events pushed."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import sync_to_async
from channels.auth import AuthMiddleware
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client

from core.realtime import publish
from monitoring.routing import websocket_urlpatterns
from portal.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def async_to_sync(fn):
    """Run ``fn()`` on a fresh event loop in its own thread (Playwright may own this thread's loop)."""

    def call():
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, fn()).result()

    return call


def signed_in(user) -> tuple[Client, object]:
    """A browser's session signed in as ``user``, and the consumer behind that session, its
    person read from the session at each connection as the auth middleware does."""
    client = Client()
    session = SessionStore()
    if user.is_authenticated:
        client.force_login(user)
        session = SessionStore(client.cookies[settings.SESSION_COOKIE_NAME].value)
    app = AuthMiddleware(URLRouter(websocket_urlpatterns))

    async def with_session(scope, receive, send):
        return await app({**scope, "session": session}, receive, send)

    return client, with_session


def as_user(user):
    """The consumer behind a session signed in as ``user`` (none for an anonymous one)."""
    return signed_in(user)[1]


async def _open(app) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(app, "/ws/live/")
    connected, _ = await comm.connect()
    assert connected
    return comm


async def _send(comm, payload) -> dict:
    await comm.send_to(text_data=payload if isinstance(payload, str) else json.dumps(payload))
    return json.loads(await comm.receive_from(timeout=5))


def test_anonymous_connections_are_closed():
    app = as_user(AnonymousUser())

    async def run():
        comm = WebsocketCommunicator(app, "/ws/live/")
        return await comm.connect()

    connected, code = async_to_sync(run)()
    assert not connected and code == 4401


def test_the_full_stack_refuses_a_connection_without_a_session():
    async def run():
        comm = WebsocketCommunicator(application, "/ws/live/", headers=[(b"host", b"127.0.0.1")])
        connected, _ = await comm.connect()
        await comm.disconnect()
        return connected

    assert async_to_sync(run)() is False


def test_subscribe_rules_and_bad_messages(demo):
    app = as_user(demo["researcher"])

    async def run():
        comm = await _open(app)
        results = [
            await _send(comm, {"subscribe": "queues"}),
            await _send(comm, {"subscribe": "alerts"}),
            await _send(comm, {"subscribe": "secrets"}),
            await _send(comm, {"subscribe": "job.999999"}),
            await _send(comm, "{not json"),
            await _send(comm, [1, 2]),
            await _send(comm, {"subscribe": 5}),
            await _send(comm, "x" * 5000),
            # 4 KiB on the wire: 2,049 characters of two bytes each are over it
            await _send(comm, json.dumps({"subscribe": "é" * 2040}, ensure_ascii=False)),
            await _send(comm, json.dumps({"subscribe": "é" * 2030}, ensure_ascii=False)),
        ]
        await comm.disconnect()
        return results

    ok, alerts, unknown, job, bad_json, array, number, huge, wide, fits = async_to_sync(run)()
    assert "at most 4 KiB" in wide["error"], "2,040 characters, 4,097 bytes"
    assert "unknown topic" in fits["error"], "4,077 bytes: read, and refused as a topic"
    assert ok == {"subscribed": "queues"}
    assert "no permission" in alerts["error"]
    assert "unknown topic" in unknown["error"]
    assert "no such job" in job["error"]
    assert all("error" in r for r in (bad_json, array, number, huge))


def test_oncall_follows_alerts_and_events_arrive_through_redis(demo):
    app = as_user(demo["oncall"])

    async def run():
        comm = await _open(app)
        subscribed = await _send(comm, {"subscribe": "alerts"})
        await sync_to_async(publish)("alerts", "alert.raised", {"id": 1, "subject": "r000-n00"})
        message = json.loads(await comm.receive_from(timeout=5))
        await comm.disconnect()
        return subscribed, message

    subscribed, message = async_to_sync(run)()
    assert subscribed == {"subscribed": "alerts"}
    assert message == {"type": "alert.raised", "topic": "alerts",
                       "data": {"id": 1, "subject": "r000-n00"}}  # fmt: skip


def test_a_job_topic_is_only_for_those_who_may_see_the_job(demo, api):
    job_id = (
        api("researcher")
        .post("/api/v1/jobs/", {"name": "x", "queue": "llm-core", "gpus": 1}, format="json")
        .data["id"]
    )

    other_app, owner_app = as_user(demo["researcher2"]), as_user(demo["researcher"])

    async def run():
        other = await _open(other_app)
        owner = await _open(owner_app)
        denied = await _send(other, {"subscribe": f"job.{job_id}"})
        allowed = await _send(owner, {"subscribe": f"job.{job_id}"})
        # Python's "$" also matches before a final newline: a topic no event is sent to
        trailing = await _send(owner, {"subscribe": f"job.{job_id}\n"})
        # and a leading zero named the job but is a topic of its own: "subscribed", then silence
        zero = await _send(owner, {"subscribe": f"job.0{job_id}"})
        await other.disconnect()
        await owner.disconnect()
        return denied, allowed, trailing, zero

    denied, allowed, trailing, zero = async_to_sync(run)()
    assert "no such job" in denied["error"]
    assert allowed == {"subscribed": f"job.{job_id}"}
    assert "unknown topic" in trailing["error"]
    assert "unknown topic" in zero["error"]


# -- a connection follows its session and its person's access (core.realtime) --------------


async def _closed_with(comm) -> int | None:
    """The close code the server sent within 5 s (None: none came; the communicator has then
    cancelled the consumer). Frames before it are skipped: an event another test published
    to a topic this connection follows may come first."""
    deadline = asyncio.get_running_loop().time() + 5
    while (left := deadline - asyncio.get_running_loop().time()) > 0:
        try:
            message = await comm.receive_output(timeout=left)
        except TimeoutError:
            return None
        if message["type"] == "websocket.close":
            return message.get("code")
    return None


def test_an_offboarded_person_is_signed_out_of_every_live_connection(demo):
    from core.people import offboard

    _, app = signed_in(demo["researcher"])
    _, bystander_app = signed_in(demo["researcher2"])

    async def run():
        comm, bystander = await _open(app), await _open(bystander_app)
        await _send(comm, {"subscribe": "queues"})
        await _send(bystander, {"subscribe": "queues"})
        await database_sync_to_async(offboard)(
            demo["researcher"], managed_lines=[], source="LDAP", reason="gone from the directory"
        )
        code = await _closed_with(comm)
        await comm.disconnect()
        await sync_to_async(publish)("queues", "queues.updated", {})
        bystander_frame = json.loads(await bystander.receive_from(timeout=5))
        await bystander.disconnect()
        return code, bystander_frame

    code, bystander_frame = async_to_sync(run)()
    assert code == 4401, "signed out: the page says so and does not reconnect"
    assert bystander_frame["type"] == "queues.updated", "nobody else's connection is touched"


def test_a_demoted_on_call_engineer_reconnects_without_the_alerts(demo):
    from core.models import Role
    from core.people import sync_identity

    oncall = demo["oncall"]
    _, app = signed_in(oncall)

    async def run():
        comm = await _open(app)
        first = await _send(comm, {"subscribe": "alerts"})
        await database_sync_to_async(sync_identity)(
            oncall, role=Role.RESEARCHER, lines={}, managed_lines=[], source="LDAP"
        )
        code = await _closed_with(comm)
        await comm.disconnect()
        again = await _open(app)  # what the page does at once on that code
        refused = await _send(again, {"subscribe": "alerts"})
        await again.disconnect()
        return first, code, refused

    first, code, refused = async_to_sync(run)()
    assert first == {"subscribed": "alerts"}
    assert code == 4000, "the session is still valid: reconnect"
    assert "no permission" in refused["error"]


def test_signing_out_closes_that_sessions_connections_only(demo):
    client, app = signed_in(demo["researcher"])
    _, other_tab_app = signed_in(demo["researcher"])  # a second browser of the same person

    async def run():
        comm, other = await _open(app), await _open(other_tab_app)
        await database_sync_to_async(client.post)("/accounts/logout/")
        code = await _closed_with(comm)
        await comm.disconnect()
        other_quiet = await other.receive_nothing(timeout=2)
        still = await _send(other, {"subscribe": "queues"})
        await other.disconnect()
        return code, other_quiet, still

    code, other_quiet, still = async_to_sync(run)()
    assert code == 4401
    assert other_quiet, "the other session stays signed in, and so does its connection"
    assert still == {"subscribed": "queues"}


def test_a_connection_closes_when_its_session_expires(demo):
    from datetime import timedelta

    from django.contrib.sessions.models import Session
    from django.utils import timezone

    client, app = signed_in(demo["researcher"])
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    Session.objects.filter(session_key=key).update(
        expire_date=timezone.now() + timedelta(seconds=2)
    )

    async def run():
        comm = await _open(app)
        subscribed = await _send(comm, {"subscribe": "queues"})
        code = await _closed_with(comm)
        await comm.disconnect()
        return subscribed, code

    subscribed, code = async_to_sync(run)()
    assert subscribed == {"subscribed": "queues"}
    assert code == 4401


def test_a_role_changed_in_the_django_admin_reconnects_the_person(demo):
    from core.models import Profile, Role

    admin_client = Client()
    admin_client.force_login(demo["admin"])
    profile = Profile.objects.get(user=demo["oncall"])
    _, app = signed_in(demo["oncall"])

    async def run():
        comm = await _open(app)
        await _send(comm, {"subscribe": "alerts"})
        response = await database_sync_to_async(admin_client.post)(
            f"/admin/portal/profile/{profile.pk}/change/",
            {"user": demo["oncall"].pk, "role": Role.RESEARCHER},
        )
        code = await _closed_with(comm)
        await comm.disconnect()
        return response.status_code, code

    status, code = async_to_sync(run)()
    assert status == 302, "saved"
    assert Profile.objects.get(pk=profile.pk).role == Role.RESEARCHER
    assert code == 4000


def test_a_page_left_open_longer_than_the_layers_group_expiry_keeps_receiving(demo, monkeypatch):
    """channels-redis drops a group member it has not seen joined for ``group_expiry`` (a
    day): an on-call console left open on a wall display went quiet after a day while its
    badge said "live". Scaled down: an expiry of 2 s, a refresh every second."""
    from channels.layers import get_channel_layer

    from monitoring import consumers

    monkeypatch.setattr(consumers, "GROUP_REFRESH_S", 1.0)
    layer = get_channel_layer()
    monkeypatch.setattr(layer, "group_expiry", 2)
    app = as_user(demo["oncall"])

    async def run():
        comm = await _open(app)
        await _send(comm, {"subscribe": "alerts"})
        await asyncio.sleep(3.5)  # past the expiry: only a member joined again is kept
        await sync_to_async(publish)("alerts", "alert.raised", {"id": 2, "subject": "r000-n01"})
        frame = json.loads(await comm.receive_from(timeout=5))
        await comm.disconnect()
        return frame

    assert async_to_sync(run)()["data"] == {"id": 2, "subject": "r000-n01"}
