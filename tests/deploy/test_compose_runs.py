"""docker-compose.yml works, not only validates (#17).

No Docker engine runs here, so ``tests/deploy/stack.py`` runs the file's services as local
processes: every service's command and every healthcheck as compose resolves them, with
only host names, ports, the edge network and volume paths translated (listed there). Then
a browser's path is taken: HTTP is redirected to HTTPS, a sign-in over HTTPS through the
proxy works, and a websocket through the proxy receives a live event that the worker's
scheduling cycle (sent by beat) published. Also through the proxy: the client's address
reaches the audit log (a spoofed X-Forwarded-For does not), a direct X-Forwarded-Proto
from elsewhere is not believed, and a body over REQUEST_MAX_BYTES is a 413.
"""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
import requests
from websockets.sync.client import connect

from tests.deploy.stack import DOT_ENV, ROOT, Stack, boot, compose_config, scratch_dir

ADMIN_PASSWORD = "compose-admin-pass-123"
CLIENT = "127.0.0.3"  # a client address other than the proxy's (loopback takes any 127/8)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    scratch = scratch_dir()
    running = Stack(compose_config(DOT_ENV, scratch), scratch)
    try:
        boot(running)
        running.wait_healthy("proxy")  # what a browser needs; beat's check comes last
        yield running
    finally:
        running.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def manage(stack: Stack, *args: str) -> str:
    """``docker-compose run --rm web python manage.py ...``: a one-off in web's environment."""
    done = subprocess.run(["python", "manage.py", *args], cwd=ROOT,
                          env=stack.env("web"), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def admin(stack: Stack) -> str:
    """The first admin, created as docs/deploy.md says (createsuperuser in web's environment)."""
    env = {**stack.env("web"), "DJANGO_SUPERUSER_PASSWORD": ADMIN_PASSWORD}
    done = subprocess.run(
        ["python", "manage.py", "createsuperuser", "--noinput", "--username", "admin",
         "--email", "admin@example.org"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return "admin"


def ca_file(stack: Stack) -> str:
    """The root of Caddy's local CA, made on the proxy's first start (in its /data volume, caddy_data)."""
    path = stack.scratch / "volumes/caddy_data/caddy/pki/authorities/local/root.crt"
    assert path.exists(), "the proxy made no certificate authority"
    return str(path)


def https(stack: Stack) -> str:
    return f"https://{DOT_ENV['PUBLIC_HOST']}:{stack.ports['https']}"


def sign_in(stack: Stack, username: str, password: str) -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # REQUESTS_CA_BUNDLE would replace the CA below
    session.verify = ca_file(stack)
    login = https(stack) + "/accounts/login/"
    form = session.get(login, timeout=10)
    assert form.status_code == 200, form.text[:500]
    answer = session.post(
        login, timeout=10, allow_redirects=False, headers={"Referer": login},
        data={"username": username, "password": password,
              "csrfmiddlewaretoken": session.cookies["csrftoken"]},
    )  # fmt: skip
    assert answer.status_code == 302, answer.text[:500]
    return session


def test_http_is_redirected_to_https(stack: Stack):
    answer = requests.get(f"http://{DOT_ENV['PUBLIC_HOST']}:{stack.ports['http']}/accounts/login/",
                          allow_redirects=False, timeout=10)  # fmt: skip
    assert answer.status_code in (301, 308)
    # https://localhost/...: compose publishes 443, so the redirect names no port
    assert answer.headers["Location"] == f"https://{DOT_ENV['PUBLIC_HOST']}/accounts/login/"


def test_sign_in_over_https_through_the_proxy(stack: Stack, admin: str):
    session = sign_in(stack, admin, ADMIN_PASSWORD)
    session_cookie = next(c for c in session.cookies if c.name == "sessionid")
    assert session_cookie.secure  # the portal knew the request came over HTTPS
    home = session.get(https(stack) + "/", timeout=10)
    assert home.status_code == 200 and admin in home.text
    assert "max-age=31536000" in home.headers["Strict-Transport-Security"]
    ready = session.get(https(stack) + "/readyz", timeout=10).json()
    assert ready["checks"]["database"]["ok"] and ready["checks"]["migrations"]["ok"], ready


def test_a_live_socket_through_the_proxy_receives_a_live_event(stack: Stack, admin: str):
    session = sign_in(stack, admin, ADMIN_PASSWORD)
    context = ssl.create_default_context(cafile=ca_file(stack))
    url = https(stack).replace("https://", "wss://") + "/ws/live/"
    with connect(url, ssl=context, origin=https(stack), open_timeout=10,
                 additional_headers={"Cookie": f"sessionid={session.cookies['sessionid']}"},
                 ) as socket:  # fmt: skip
        socket.send(json.dumps({"subscribe": "cycles"}))
        assert json.loads(socket.recv(timeout=10)) == {"subscribed": "cycles"}
        # beat sends the cycle every SCHEDULER_CYCLE_SECONDS (5 s); the worker runs it and
        # publishes through Redis to this web process, which pushes it through the proxy
        deadline = time.monotonic() + 30
        while True:
            frame = json.loads(socket.recv(timeout=max(deadline - time.monotonic(), 0.1)))
            if frame.get("type") == "cycle.completed":
                break
        assert frame["topic"] == "cycles" and "duration_ms" in json.dumps(frame["data"])


def _post_from(stack: Stack, source: str, port: int, path: str, headers: dict,
               tls: bool) -> http.client.HTTPResponse:  # fmt: skip
    """A POST from ``source`` (a loopback address of our choosing) to 127.0.0.1:``port``."""
    if tls:
        context = ssl.create_default_context(cafile=ca_file(stack))
        conn = http.client.HTTPSConnection(DOT_ENV["PUBLIC_HOST"], port, context=context,
                                           source_address=(source, 0), timeout=30)  # fmt: skip
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, source_address=(source, 0),
                                          timeout=30)  # fmt: skip
    conn.request("POST", path, body=b"{}", headers={"Content-Type": "application/json", **headers})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def test_the_client_address_comes_through_the_proxy_and_spoofed_headers_do_not(
    stack: Stack, admin: str
):
    token = manage(stack, "issue_token", admin).strip()
    auth = {"Authorization": f"Token {token}", "X-Forwarded-For": "6.6.6.6"}
    through_proxy = _post_from(stack, CLIENT, stack.ports["https"], "/api/v1/scheduler/cycle/",
                               auth, tls=True)  # fmt: skip
    assert through_proxy.status in (200, 201), through_proxy.status
    url = stack.env("web")["DATABASE_URL"]
    with psycopg.connect(url) as conn:
        (source_ip,) = conn.execute(
            "SELECT source_ip FROM portal_auditrecord WHERE action = 'scheduler.cycle' "
            "ORDER BY id DESC LIMIT 1"
        ).fetchone()
    assert str(source_ip) == CLIENT  # the proxy's X-Forwarded-For, not the client's 6.6.6.6

    # Straight to web from elsewhere, claiming HTTPS: not believed (redirected to HTTPS)
    direct = _post_from(stack, "127.0.0.4", stack.ports["web"], "/api/v1/scheduler/cycle/",
                        {**auth, "X-Forwarded-Proto": "https", "Host": "localhost"},
                        tls=False)  # fmt: skip
    assert direct.status == 301 and direct.getheader("Location", "").startswith("https://")


def test_the_proxy_refuses_a_body_over_the_limit(stack: Stack):
    limit = int(stack.services["proxy"]["environment"]["REQUEST_MAX_BYTES"])
    assert limit == int(stack.services["web"]["environment"]["REQUEST_MAX_BYTES"])
    envelope = {"errors": {"non_field_errors": [f"the request body is larger than {limit} bytes"]}}

    def post(body: bytes | Iterator[bytes]) -> requests.Response:
        return requests.post(https(stack) + "/api/v1/jobs/", data=body,
                             headers={"Content-Type": "application/json"},
                             verify=ca_file(stack), timeout=30)  # fmt: skip

    # Declared too long: refused before proxying, every time (once it was raced by web's
    # own 413, and the proxy answered 502 when web closed while the body was being sent).
    for _ in range(10):
        answer = post(b"x" * (limit + 1))
        assert (answer.status_code, answer.json()) == (413, envelope)

    def chunks() -> Iterator[bytes]:  # no Content-Length: cut while read
        for _ in range(limit // 65536 + 2):
            yield b"x" * 65536

    answer = post(chunks())
    assert (answer.status_code, answer.json()) == (413, envelope)


def test_every_service_starts_and_every_healthcheck_passes(stack: Stack):
    # Last in this file: beat's check passes only after the first health sweep, due 30 s
    # after beat starts; the tests above run meanwhile.
    assert stack.exits == {"migrate": 0}
    for name, proc in stack.processes.items():
        assert proc.poll() is None or name == "migrate", f"{name} exited:\n{stack.log(name)}"
    long_running = [n for n, s in stack.services.items() if s.get("restart") != "no"]
    assert set(long_running) == {"postgres", "redis", "web", "worker", "beat", "proxy"}
    with ThreadPoolExecutor(len(long_running)) as pool:  # as compose does: all at once
        results = dict(zip(long_running, pool.map(stack.wait_healthy, long_running), strict=True))
    assert all(health.ok for health in results.values()), results
    assert "beat: ok: last health sweep" in stack.healthcheck("beat").output
    assert "pong" in stack.healthcheck("worker").output
