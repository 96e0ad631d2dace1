"""A live page with nothing to show stays connected.

channels-redis waits for a web process's messages with ``BZPOPMIN ... 5`` (Redis
answers "nothing" after 5 s), and redis-py 8 gives every read a 5 s socket timeout by
default: the client gives up first, the consumer waiting dies with ``TimeoutError`` and
the server closes its socket (1011). So every 5 s without a single event on a web
process, one page drops, reconnects and refetches (a page alone: every ~5 s). The
channel layer's connections need a socket timeout above 5 s (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from tests.reliability.conftest import child_env, session_cookie, web_server

pytestmark = pytest.mark.django_db(transaction=True)

QUIET_S = 12


def layer_read_timeout() -> float | None:
    """The channel layer's socket timeout (redis-py's default is 5 s)."""
    host = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]
    return host.get("socket_timeout", 5.0) if isinstance(host, dict) else 5.0


def test_the_channel_layer_outwaits_its_own_blocking_read():
    timeout = layer_read_timeout()
    assert timeout is None or RedisChannelLayer.brpop_timeout < timeout


def test_a_quiet_live_socket_stays_open(demo, scratch):
    key = session_cookie(demo["researcher"])

    async def quiet_for(base: str) -> tuple[float, object]:
        headers = {"Cookie": f"sessionid={key}", "Origin": base}
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(base.replace("http", "ws", 1) + "/ws/live/", headers=headers) as ws,
        ):
            await ws.send_str(json.dumps({"subscribe": "cycles"}))
            assert json.loads((await ws.receive(timeout=10)).data) == {"subscribed": "cycles"}
            started = time.monotonic()
            try:
                message = await ws.receive(timeout=QUIET_S)
            except TimeoutError:
                message = None  # nothing happened, and the socket is still open
            return time.monotonic() - started, message

    with web_server(child_env(), scratch / "web.log") as base:
        waited, message = asyncio.run(quiet_for(base))
    assert message is None, f"closed after {waited:.1f} s of quiet: {message}"


def test_an_oversized_frame_closes_only_its_own_socket(demo, scratch):
    from portal.web import WS_MAX_BYTES

    key = session_cookie(demo["researcher"])

    async def oversized_then_normal(base: str) -> tuple[int | None, dict]:
        headers = {"Cookie": f"sessionid={key}", "Origin": base}
        url = base.replace("http", "ws", 1) + "/ws/live/"
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(url, headers=headers) as ws:
                await ws.send_str("x" * (WS_MAX_BYTES + 1))
                await ws.receive(timeout=10)  # the close frame
                code = ws.close_code
            async with http.ws_connect(url, headers=headers) as ws:
                await ws.send_str(json.dumps({"subscribe": "cycles"}))
                return code, json.loads((await ws.receive(timeout=10)).data)

    with web_server(child_env(), scratch / "web.log") as base:
        code, answer = asyncio.run(oversized_then_normal(base))
    assert code == 1009, "message too big"
    assert answer == {"subscribed": "cycles"}, "the server goes on serving"
