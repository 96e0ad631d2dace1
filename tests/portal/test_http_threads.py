"""portal/http_threads.py: HTTP scopes served by a WSGI application on a thread pool."""

from __future__ import annotations

import asyncio
import io
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from portal.http_threads import BODY_IN_MEMORY_MAX, ThreadedWSGI, build_environ

SCOPE = {
    "type": "http",
    "method": "POST",
    "scheme": "http",
    "http_version": "1.1",
    "path": "/api/v1/jobs/",
    "root_path": "",
    "query_string": b"state=pending&x=%C3%A9",
    "server": ("127.0.0.1", 8000),
    "client": ("10.0.0.7", 51234),
    "headers": [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"content-length", b"2"),
        (b"authorization", b"Token abc"),
        (b"x-multi", b"a"),
        (b"x-multi", b"b"),
    ],
}


def test_the_environ_carries_what_django_reads():
    environ = build_environ(SCOPE, io.BytesIO(b"{}"))
    assert environ["REQUEST_METHOD"] == "POST" and environ["PATH_INFO"] == "/api/v1/jobs/"
    assert environ["QUERY_STRING"] == "state=pending&x=%C3%A9"
    assert environ["CONTENT_TYPE"] == "application/json" and environ["CONTENT_LENGTH"] == "2"
    assert "HTTP_CONTENT_TYPE" not in environ and environ["HTTP_AUTHORIZATION"] == "Token abc"
    assert environ["HTTP_X_MULTI"] == "a,b", "repeated headers are joined, as in CGI"
    assert environ["REMOTE_ADDR"] == "10.0.0.7"
    assert (environ["SERVER_NAME"], environ["SERVER_PORT"]) == ("127.0.0.1", "8000")
    assert environ["wsgi.input"].read() == b"{}"


def test_a_root_path_becomes_the_script_name():
    scope = {**SCOPE, "root_path": "/portal", "path": "/portal/jobs/é"}
    environ = build_environ(scope, io.BytesIO())
    assert environ["SCRIPT_NAME"] == "/portal"
    assert environ["PATH_INFO"] == "/jobs/é".encode().decode("latin1"), "PEP 3333 latin-1"


def run(coroutine):
    """``asyncio.run`` in a thread of its own: once a browser test has run, Playwright's
    event loop stays in the test thread (docs/reliability.md, notes for test writers)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


class Recorder:
    """A WSGI app that echoes its body and records the thread and its close()."""

    def __init__(self) -> None:
        self.threads: set[str] = set()
        self.closed = 0

    def __call__(self, environ, start_response):
        self.threads.add(threading.current_thread().name)
        body = environ["wsgi.input"].read()
        start_response("201 Created", [("Content-Type", "text/plain"), ("X-Len", str(len(body)))])
        app = self

        class Result(list):
            def close(self) -> None:
                app.closed += 1

        return Result([b"got ", body[:5]])


def serve(app, scope: dict, chunks: list[bytes]) -> list[dict]:
    """Run one ASGI request through ThreadedWSGI; the messages sent back."""
    incoming = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict] = []

    async def receive() -> dict:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    # Bodies up to twice the in-memory part may come in (the limit is a server setting:
    # tests/portal/test_body_limit.py).
    run(ThreadedWSGI(app, threads=2, max_body=2 * BODY_IN_MEMORY_MAX)(scope, receive, send))
    return sent


def test_a_request_runs_in_a_pool_thread_and_is_closed():
    app = Recorder()
    sent = serve(app, SCOPE, [b"hello ", b"world"])
    assert sent[0] == {
        "type": "http.response.start",
        "status": 201,
        "headers": [(b"content-type", b"text/plain"), (b"x-len", b"11")],
    }
    assert sent[1] == {"type": "http.response.body", "body": b"got hello"}
    assert app.closed == 1, "close() fires Django's request_finished"
    assert all(name.startswith("http") for name in app.threads), app.threads


def test_a_large_body_arrives_whole():
    app = Recorder()
    big = b"x" * (BODY_IN_MEMORY_MAX + 10)
    sent = serve(app, SCOPE, [big[:1000], big[1000:]])
    assert dict(sent[0]["headers"])[b"x-len"] == str(len(big)).encode()


def test_a_client_gone_before_its_body_ends_runs_nothing():
    app = Recorder()

    async def gone() -> list[dict]:
        messages = [{"type": "http.request", "body": b"{", "more_body": True},
                    {"type": "http.disconnect"}]  # fmt: skip
        sent: list[dict] = []

        async def receive() -> dict:
            return messages.pop(0)

        async def send(message: dict) -> None:
            sent.append(message)

        await ThreadedWSGI(app, threads=1)(SCOPE, receive, send)
        return sent

    assert run(gone()) == [] and app.threads == set()


def test_websocket_scopes_are_not_its_business():
    async def never() -> dict:
        raise AssertionError("not called")

    with pytest.raises(ValueError, match="HTTP only"):
        run(ThreadedWSGI(Recorder(), threads=1)({"type": "websocket"}, never, never))


def test_a_stream_that_fails_while_it_is_built_is_a_logged_500_in_the_envelope(caplog):
    """A CSV export is built after Django's handler returned (``core.csv_export``): a
    failure then was uvicorn's bare "Internal Server Error". It is the API's envelope,
    logged with its traceback, and the response is still closed (the DB connection goes
    back to its pool)."""
    closed = []

    def rows():
        yield b"id\r\n"
        raise RuntimeError("the database went away")

    class Streamed:
        def __iter__(self):
            return rows()

        def close(self) -> None:
            closed.append(True)

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/csv")])
        return Streamed()

    sent = serve(app, {**SCOPE, "method": "GET", "path": "/api/v1/jobs.csv"}, [b""])
    assert sent[0]["status"] == 500
    assert dict(sent[0]["headers"])[b"content-type"] == b"application/json"
    assert sent[1]["body"] == (
        b'{"errors": {"non_field_errors": ["the server failed while building this answer"]}}'
    )
    assert closed == [True]
    failure = next(r for r in caplog.records if r.name == "portal.http_threads")
    assert "/api/v1/jobs.csv" in failure.getMessage() and failure.exc_info is not None
