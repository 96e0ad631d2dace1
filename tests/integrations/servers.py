"""Real monitoring components started by the tests: Alertmanager, Prometheus, a Celery
worker on the test database, a small HTTP receiver standing in for a chat webhook, and a
real SMTP server (aiosmtpd) standing in for the mail relay.

Binaries come from Debian packages (``prometheus``, ``prometheus-alertmanager``; `.ci/run`
installs them). Each server gets a free port, a temporary config and storage path.
"""

from __future__ import annotations

import email
import email.message
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
from django.conf import settings

from portal.devservices import free_port


def wait_http(url: str, timeout_s: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    """Until ``url`` answers 200 (or the process died, or the time is up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


class Server:
    """A child process in its own session, stopped (SIGTERM, then SIGKILL) at the end."""

    def __init__(self, args: list[str], log: Path, env: dict | None = None):
        self.log = log
        self.proc = subprocess.Popen(
            args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def start_alertmanager(workdir: Path, port: int | None = None) -> tuple[Server, str]:
    """A real Alertmanager with a do-nothing receiver; returns it and its base URL."""
    port = port or free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "alertmanager.yml"
    config.write_text(
        "route:\n  receiver: blackhole\n  group_wait: 1s\n  group_interval: 1s\n"
        "receivers:\n  - name: blackhole\n"
    )
    server = Server(
        ["prometheus-alertmanager", f"--config.file={config}",
         f"--storage.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--cluster.listen-address=", "--log.level=warn"],
        workdir / "alertmanager.log",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready", proc=server.proc)
    except Exception:
        server.stop()
        raise RuntimeError(server.output()) from None
    return server, url


def start_prometheus(workdir: Path, scrape_url: str, token: str, rules: Path) -> tuple[Server, str]:
    """A real Prometheus scraping ``scrape_url`` every second with the metrics bearer
    token, evaluating ``rules`` every second; returns it and its base URL."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    target = scrape_url.split("://", 1)[1].split("/", 1)[0]
    (workdir / "token").write_text(token)
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {rules}\n"
        "scrape_configs:\n  - job_name: gpu-portal\n    metrics_path: /metrics\n"
        f"    authorization:\n      credentials_file: {workdir / 'token'}\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    server = Server(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        workdir / "prometheus.log",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready", proc=server.proc)
    except Exception:
        server.stop()
        raise RuntimeError(server.output()) from None
    return server, url


def worker_env(**extra: str) -> dict:
    """The environment of a Celery worker on the test database and Redis."""
    db = settings.DATABASES["default"]
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=settings.REDIS_URL,
        DEBUG="1",
        **extra,
    )
    return env


def start_worker(workdir: Path, **extra: str) -> Server:
    """A real Celery worker (solo pool) consuming the default queue."""
    workdir.mkdir(parents=True, exist_ok=True)
    return Server(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool", "solo",
         "--without-heartbeat", "--without-mingle", "--without-gossip", "-l", "info"],
        workdir / "worker.log", env=worker_env(**extra),
    )  # fmt: skip


class Receiver:
    """An HTTP server recording JSON bodies POSTed to it (a chat webhook's stand-in);
    ``delay_s`` makes it slow, ``fail_first`` answers 503 to that many requests first."""

    def __init__(self, delay_s: float = 0.0, fail_first: int = 0):
        self.bodies: list[dict] = []
        self.attempts = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                outer.attempts += 1
                length = int(self.headers.get("Content-Length", 0))
                data = self.rfile.read(length)
                time.sleep(delay_s)
                if outer.attempts <= fail_first:
                    self.send_response(503)
                    self.end_headers()
                    return
                outer.bodies.append(json.loads(data))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def poll(check, timeout_s: float = 30.0, every_s: float = 0.2):
    """``check()`` until it returns something truthy; that value, or the last one."""
    deadline = time.monotonic() + timeout_s
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(every_s)
        value = check()
    return value


class MailServer:
    """A real SMTP server (aiosmtpd) on a free port, keeping what it receives: each
    message's envelope recipients and parsed content. ``refuse_first`` answers that many
    messages with a temporary failure (451) first, as a busy server does."""

    def __init__(self, refuse_first: int = 0) -> None:
        from aiosmtpd.controller import Controller

        self.received: list[tuple[list[str], email.message.Message]] = []
        self.attempts = 0
        outer = self

        class Handler:
            async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802
                outer.attempts += 1
                if outer.attempts <= refuse_first:
                    return "451 4.3.0 try again later"
                message = email.message_from_bytes(envelope.original_content)
                outer.received.append((list(envelope.rcpt_tos), message))
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def env(self) -> dict[str, str]:
        """The portal's EMAIL_* settings pointing at this server."""
        return {
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(self.port),
            "EMAIL_TIMEOUT": "5",
            "DEFAULT_FROM_EMAIL": "gpu-portal@example.org",
        }

    def stop(self) -> None:
        self.controller.stop()
