"""HTTP under the ASGI server: Django's WSGI handler on a fixed pool of threads per process.

All our views are synchronous (DRF and the pages). Django's ASGI handler runs each
such request in a new thread and crosses between that thread and the event loop
several times per request (signals, middleware, the view, closing); measured on a
job submission, that cost about 4.5 ms of CPU on top of the ~5.5 ms the request
itself needs (docs/api.md, "Throughput"). Here a request crosses once: its body is
read on the event loop, the whole request runs in a pool thread, as under gunicorn's
threaded worker, and the response is sent from the loop. Websockets stay on Channels
(``portal/asgi.py``). A streaming response (the CSV exports, ``core.csv_export``) is
joined in its pool thread and sent whole: its rows are built a batch at a time, and its
bytes (about 20 MB for the 100,000-row cap) are the only copy held.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from tempfile import SpooledTemporaryFile
from typing import IO, Any

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
WSGIApp = Callable[[dict[str, Any], Callable], Iterable[bytes]]

BODY_IN_MEMORY_MAX = 1024 * 1024  # larger request bodies spill to a temporary file
# Nothing the portal takes is large (a job is < 4 KiB of JSON): refuse bigger bodies
# before reading them, before authentication (REQUEST_MAX_BYTES in settings).
REQUEST_MAX_BYTES = 1024 * 1024


def build_environ(scope: Scope, body: IO[bytes]) -> dict[str, Any]:
    """The WSGI environ (PEP 3333) of an ASGI HTTP scope."""
    root = scope.get("root_path", "")
    path = scope["path"]
    if root and path.startswith(root):
        path = path[len(root) :]
    server_name, server_port = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": root.encode("utf8").decode("latin1"),
        "PATH_INFO": path.encode("utf8").decode("latin1"),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin1"),
        "SERVER_NAME": server_name,
        "SERVER_PORT": str(server_port or 0),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if scope.get("client"):
        environ["REMOTE_ADDR"] = scope["client"][0]
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin1").upper().replace("-", "_")
        if name not in ("CONTENT_LENGTH", "CONTENT_TYPE"):
            name = "HTTP_" + name
        value = raw_value.decode("latin1")
        environ[name] = f"{environ[name]},{value}" if name in environ else value
    return environ


def declared_length(scope: Scope) -> int:
    """The request's Content-Length (0 when absent; unreadable counts as too large)."""
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return sys.maxsize
    return 0


class ThreadedWSGI:
    """An ASGI application (HTTP scopes only) serving ``wsgi_app`` on ``threads`` threads."""

    def __init__(self, wsgi_app: WSGIApp, threads: int, max_body: int = REQUEST_MAX_BYTES) -> None:
        self.wsgi_app = wsgi_app
        self.max_body = max_body
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="http")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise ValueError(f"ThreadedWSGI serves HTTP only, not {scope['type']!r}")
        if declared_length(scope) > self.max_body:
            return await self.too_large(scope, send)  # not a byte of it is read
        with SpooledTemporaryFile(max_size=BODY_IN_MEMORY_MAX) as body:
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client left before sending its whole request
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body:  # chunked, or longer than it said
                    return await self.too_large(scope, send)
                body.write(chunk)
                if not message.get("more_body"):
                    break
            body.seek(0)
            loop = asyncio.get_running_loop()
            status, headers, content = await loop.run_in_executor(
                self.executor, self.respond, scope, body
            )
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    async def too_large(self, scope: Scope, send: Send) -> None:
        """413, in the API's error envelope on ``/api/``; the connection is then closed."""
        message = f"the request body is larger than {self.max_body} bytes"
        status, headers, content = plain_answer(scope, 413, message, close=True)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    def respond(self, scope: Scope, body: IO[bytes]) -> tuple[int, list, bytes]:
        """Run the WSGI application for one request, in a pool thread; return the response."""
        started: dict[str, Any] = {}

        def start_response(status: str, headers: list, exc_info: Any = None) -> None:
            started["status"] = int(status.split(" ", 1)[0])
            started["headers"] = [
                (name.lower().encode("latin1"), value.encode("latin1")) for name, value in headers
            ]

        result = self.wsgi_app(build_environ(scope, body), start_response)
        try:
            content = b"".join(result)
        except Exception:
            # A streamed response (a CSV export) is built here, after Django's handler has
            # returned: its failure is logged and answered here, not by the ASGI server.
            logger.exception("building the response to %s failed", scope["path"])
            return plain_answer(scope, 500, "the server failed while building this answer")
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()  # Django's request_finished: returns the DB connection to its pool
        return started["status"], started["headers"], content


def plain_answer(
    scope: Scope, status: int, message: str, close: bool = False
) -> tuple[int, list, bytes]:
    """An answer given without Django: the API's error envelope on ``/api/``, else text."""
    if scope["path"].startswith("/api/"):
        content = json.dumps({"errors": {"non_field_errors": [message]}}).encode()
        content_type = b"application/json"
    else:
        content, content_type = f"{message}\n".encode(), b"text/plain; charset=utf-8"
    headers = [(b"content-type", content_type), (b"x-content-type-options", b"nosniff")]
    if close:
        headers.insert(1, (b"connection", b"close"))
    return status, headers, content
