"""The live websocket through the full ASGI stack: a signed-in session connects from the
portal's own origin only (cross-site websocket hijacking is refused before auth)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connections
from django.test import Client

from portal.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def connects(headers: list[tuple[bytes, bytes]]) -> bool:
    async def run() -> bool:
        comm = WebsocketCommunicator(application, "/ws/live/", headers=headers)
        connected, _ = await comm.connect(timeout=5)
        await comm.disconnect()
        await sync_to_async(connections.close_all)()  # the auth lookup's thread
        return connected

    with ThreadPoolExecutor(1) as pool:  # a fresh event loop, away from any test loop
        return pool.submit(asyncio.run, run()).result()


def test_only_the_portals_own_origin_may_open_the_live_socket(demo):
    client = Client()
    client.force_login(demo["researcher"])
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    base = [(b"host", b"127.0.0.1"), (b"cookie", cookie.encode())]
    assert connects(base + [(b"origin", b"http://127.0.0.1")]) is True
    assert connects(base + [(b"origin", b"https://evil.example")]) is False
    assert connects(base + [(b"origin", b"http://127.0.0.1.evil.example")]) is False
    assert connects(base) is False  # no Origin header at all
    assert connects([(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")]) is False


def test_a_header_with_a_control_character_is_refused_before_the_session_lookup(demo):
    client = Client()
    client.force_login(demo["researcher"])
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    base = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")]
    assert connects(base + [(b"cookie", cookie.encode())]) is True
    # a NUL in the session key reached PostgreSQL, which refuses it: an error, not a refusal
    assert connects(base + [(b"cookie", cookie.encode() + b"\x00x")]) is False
    assert connects(base + [(b"cookie", cookie.encode()), (b"user-agent", b"a\x1bb")]) is False


@pytest.mark.parametrize(
    "origin",
    [b"http://localhost:3000", b"http://127.0.0.1:1", b"https://127.0.0.1:8000",
     b"http://127.0.0.1", b"null", b"ws://127.0.0.1:8000", b"http://127.0.0.1:8000/x\x00"],
)  # fmt: skip
def test_another_port_or_scheme_on_the_same_host_is_another_origin(demo, origin):
    client = Client()
    client.force_login(demo["researcher"])
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    base = [(b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())]
    assert connects(base + [(b"origin", b"http://127.0.0.1:8000")]) is True
    assert connects(base + [(b"origin", origin)]) is False


@pytest.mark.parametrize(
    "origin,host,scheme,allowed",
    [("http://a.example:8000", "a.example:8000", "ws", True),
     ("HTTP://A.EXAMPLE:8000", "a.example:8000", "ws", True),
     ("http://a.example", "a.example:80", "ws", True),
     ("https://a.example", "a.example", "wss", True),
     ("https://a.example", "a.example", "ws", False),
     ("http://a.example", "a.example", "wss", False),
     ("http://a.example:8001", "a.example:8000", "ws", False),
     ("https://portal.example.org", "web:8000", "ws", True),  # trusted (behind the proxy)
     ("https://portal.example.org:444", "web:8000", "ws", False),
     ("", "a.example", "ws", False), ("http://a.example", "", "ws", False),
     ("http://a.example:99999", "a.example", "ws", False), ("file:///etc", "a.example", "ws", False)],
)  # fmt: skip
def test_the_origin_rule(settings, origin, host, scheme, allowed):
    from core.security import websocket_origin_allowed

    settings.CSRF_TRUSTED_ORIGINS = ["https://portal.example.org"]
    assert websocket_origin_allowed(origin, host, scheme) is allowed


def test_a_deeply_nested_message_is_answered_with_an_error(demo):
    client = Client()
    client.force_login(demo["researcher"])
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    headers = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1"),
               (b"cookie", cookie.encode())]  # fmt: skip

    async def run() -> str:
        comm = WebsocketCommunicator(application, "/ws/live/", headers=headers)
        connected, _ = await comm.connect(timeout=5)
        assert connected
        try:
            await comm.send_to(text_data="{not json")  # the harness gets ordinary errors back
            assert '"error"' in await comm.receive_from(timeout=5)
            await comm.send_to(text_data="[" * 4000)
            return await comm.receive_from(timeout=5)
        finally:
            await comm.disconnect()
            await sync_to_async(connections.close_all)()

    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(asyncio.run, run()).result()
    assert '"error"' in answer
