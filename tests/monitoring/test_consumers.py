"""The websocket consumer: auth on connect, permission on subscribe, read-only, events pushed."""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

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


def as_user(user):
    """The consumer with ``user`` in the scope, as the session middleware would set it."""
    router = URLRouter(websocket_urlpatterns)

    async def app(scope, receive, send):
        return await router({**scope, "user": user}, receive, send)

    return app


async def _open(app) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(app, "/ws/live/")
    connected, _ = await comm.connect()
    assert connected
    return comm


async def _send(comm, payload) -> dict:
    await comm.send_to(text_data=payload if isinstance(payload, str) else json.dumps(payload))
    return json.loads(await comm.receive_from(timeout=5))


def test_anonymous_connections_are_closed():
    async def run():
        comm = WebsocketCommunicator(as_user(AnonymousUser()), "/ws/live/")
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
    async def run():
        comm = await _open(as_user(demo["researcher"]))
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
    async def run():
        comm = await _open(as_user(demo["oncall"]))
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

    async def run():
        other = await _open(as_user(demo["researcher2"]))
        owner = await _open(as_user(demo["researcher"]))
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
