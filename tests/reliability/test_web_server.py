"""The web server as ``make run`` and docker-compose start it: several uvicorn processes.

Pages, the API and live sockets are served by whichever process takes the connection,
so they must all work with more than one (sessions in PostgreSQL, live events through
the Redis channel layer), and SIGTERM must stop the whole group.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time

import aiohttp
import pytest
import requests
from rest_framework.authtoken.models import Token

from tests.reliability.conftest import (
    child_env,
    free_port,
    session_cookie,
    spawn,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_processes_serve_pages_api_and_live_sockets_and_stop_together(demo, scratch):
    port = free_port()
    log = scratch / "web.log"
    proc = spawn(["-m", "portal.web", "--port", str(port), "--workers", "2"], child_env(), log)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return requests.get(base + "/accounts/login/", timeout=2).ok
        except requests.RequestException:
            return False

    try:
        wait_until(up, 60, "the web server to serve")
        token = Token.objects.create(user=demo["researcher"]).key
        with requests.Session() as http:
            http.headers["Authorization"] = f"Token {token}"
            answers = [http.get(base + "/api/v1/queues/", timeout=10) for _ in range(20)]
            posted = http.post(base + "/api/v1/jobs/", json={"name": "w", "queue": "llm-experiment", "gpus": 1}, timeout=10)  # fmt: skip
        assert {a.status_code for a in answers} == {200} and posted.status_code == 201
        assert (
            posted.json()["state"] == "pending"
            and posted.json()["events"][0]["kind"] == "submitted"
        )

        key = session_cookie(demo["researcher"])

        async def subscribe(n: int) -> list[dict]:
            headers = {"Cookie": f"sessionid={key}", "Origin": base}
            url = base.replace("http", "ws", 1) + "/ws/live/"
            async with aiohttp.ClientSession() as session:
                answers = []
                for _ in range(n):  # new connections: the kernel spreads them over both
                    async with session.ws_connect(url, headers=headers) as ws:
                        await ws.send_str(json.dumps({"subscribe": "queues"}))
                        answers.append(json.loads((await ws.receive(timeout=10)).data))
                return answers

        assert asyncio.run(subscribe(6)) == [{"subscribed": "queues"}] * 6
        workers = log.read_text().count("Started server process")
        assert workers == 2, log.read_text()[-2000:]
    finally:
        started = time.monotonic()
        stop_process(proc, signal.SIGTERM, timeout=15)
    assert proc.returncode is not None and time.monotonic() - started < 15
