"""Request bodies above REQUEST_MAX_BYTES are refused with 413 before they are read, before
authentication (#16 finding 3: an anonymous 300 MiB POST was spooled to disk, then
answered 401; a 20 MB authenticated one got Django's HTML "Bad Request (400)")."""

from __future__ import annotations

import json
import socket
import time

import pytest

from portal.http_threads import ThreadedWSGI, declared_length
from tests.portal.test_http_threads import SCOPE, run

LIMIT = 1000


class Recorder:
    def __init__(self) -> None:
        self.called = 0

    def __call__(self, environ, start_response):
        self.called += 1
        start_response("201 Created", [("Content-Type", "application/json")])
        return [b"{}"]


def serve(scope: dict, chunks: list[bytes]) -> tuple[list[dict], Recorder, int]:
    """Serve one request through ThreadedWSGI; (messages sent, the app, chunks read)."""
    app, sent, read = Recorder(), [], [0]

    async def receive():
        if read[0] >= len(chunks):
            raise AssertionError("read past the end of the body")
        read[0] += 1
        return {"type": "http.request", "body": chunks[read[0] - 1],
                "more_body": read[0] < len(chunks)}  # fmt: skip

    async def send(message):
        sent.append(message)

    run(ThreadedWSGI(app, threads=1, max_body=LIMIT)(scope, receive, send))
    return sent, app, read[0]


def with_length(length: bytes | None, path: str = "/api/v1/jobs/") -> dict:
    headers = [h for h in SCOPE["headers"] if h[0] != b"content-length"]
    if length is not None:
        headers.append((b"content-length", length))
    return {**SCOPE, "path": path, "headers": headers}


def test_a_declared_length_over_the_limit_is_refused_unread_with_the_api_envelope():
    sent, app, read = serve(with_length(b"314572800"), [b"x" * 10])
    assert read == 0 and app.called == 0
    assert sent[0]["status"] == 413
    assert (b"content-type", b"application/json") in sent[0]["headers"]
    assert json.loads(sent[1]["body"]) == {
        "errors": {"non_field_errors": ["the request body is larger than 1000 bytes"]}
    }


def test_a_chunked_body_is_cut_off_as_soon_as_it_passes_the_limit():
    chunks = [b"x" * 400] * 10
    sent, app, read = serve(with_length(None), chunks)
    assert read == 3, "stopped at the chunk that crossed 1,000 bytes"
    assert app.called == 0 and sent[0]["status"] == 413


def test_a_body_longer_than_it_said_is_refused_too():
    sent, app, _ = serve(with_length(b"10"), [b"x" * 600, b"x" * 600])
    assert sent[0]["status"] == 413 and app.called == 0


def test_pages_get_plain_text():
    sent, _, _ = serve(with_length(b"5000", path="/jobs/new/"), [b""])
    assert sent[0]["status"] == 413
    assert (b"content-type", b"text/plain; charset=utf-8") in sent[0]["headers"]
    assert sent[1]["body"] == b"the request body is larger than 1000 bytes\n"


@pytest.mark.parametrize("size", [0, 1, LIMIT])
def test_bodies_up_to_the_limit_reach_the_application(size):
    sent, app, _ = serve(with_length(str(size).encode()), [b"x" * size])
    assert app.called == 1 and sent[0]["status"] == 201


@pytest.mark.parametrize(
    "headers,length",
    [([], 0), ([(b"content-length", b"12")], 12), ([(b"content-length", b"nope")], None),
     ([(b"content-length", b"-1")], -1)],
)  # fmt: skip
def test_the_declared_length(headers, length):
    import sys

    assert declared_length({"headers": headers}) == (sys.maxsize if length is None else length)


def test_the_settings_give_the_server_and_django_one_limit(settings):
    assert settings.REQUEST_MAX_BYTES == settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 1024 * 1024


@pytest.mark.django_db(transaction=True)
def test_the_real_server_refuses_a_300_mib_anonymous_post_at_once(tmp_path):
    from tests.reliability.conftest import child_env, web_server

    with web_server(child_env(), tmp_path / "web.log") as base:
        port = int(base.rsplit(":", 1)[1])
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /api/v1/jobs/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 314572800\r\n\r\n{")  # fmt: skip
            received = b""
            while chunk := sock.recv(4096):  # the server closes once it has answered
                received += chunk
            answer = received.decode()
        assert time.monotonic() - started < 5, "answered without waiting for the body"
    assert answer.startswith("HTTP/1.1 413 ")
    assert '"the request body is larger than 1048576 bytes"' in answer
