"""The proxy's certificate and who the portal believes (#17).

- A certificate given in the proxy's /certs is the one served; with none, Caddy's own CA
  makes one (test_compose_runs.py signs in through that one); half of one is refused.
- X-Forwarded-* are believed from FORWARDED_ALLOW_IPS only: a bad value stops the settings
  and the web server at start-up, and Django itself believes no forwarded header
  (SECURE_PROXY_SSL_HEADER would believe anyone who reaches the port).
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from portal.devservices import free_port
from tests.conftest import PRODUCTION_ENV
from tests.deploy.stack import ROOT, caddy_folder

HOST = "portal.example.test"


def proxy_env(tmp: Path, tls_dir: Path) -> dict[str, str]:
    """The proxy service's environment (docker-compose.yml), its volumes under ``tmp``."""
    return {"PATH": "/usr/bin:/bin", "PUBLIC_HOST": HOST, "REQUEST_MAX_BYTES": "1048576",
            "TLS_DIR": str(tls_dir), "XDG_DATA_HOME": str(tmp / "data"),
            "XDG_CONFIG_HOME": str(tmp / "config")}  # fmt: skip


def self_signed(folder: Path) -> bytes:
    """tls.crt and tls.key for HOST in ``folder`` (an operator's own certificate)."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", f"/CN={HOST}", "-addext", f"subjectAltName=DNS:{HOST}",
         "-keyout", str(folder / "tls.key"), "-out", str(folder / "tls.crt")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return ssl.PEM_cert_to_DER_cert((folder / "tls.crt").read_text())


def served_certificate(port: int, cafile: Path, timeout: float = 15) -> bytes:
    """The certificate the proxy serves for HOST on ``port``, verified against ``cafile``."""
    context = ssl.create_default_context(cafile=str(cafile))
    deadline = time.monotonic() + timeout
    while True:
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                context.wrap_socket(raw, server_hostname=HOST) as tls,
            ):
                return tls.getpeercert(binary_form=True)
        except (ConnectionRefusedError, ssl.SSLError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_given_certificate_is_the_one_served(tmp_path):
    ports = {"http": free_port(), "https": free_port(), "web": free_port()}
    folder = caddy_folder(tmp_path / "etc-caddy", ports)
    given = self_signed(tmp_path / "certs")
    log = open(tmp_path / "proxy.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(["/bin/sh", str(folder / "start.sh")],
                            env=proxy_env(tmp_path, tmp_path / "certs"),
                            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        assert served_certificate(ports["https"], tmp_path / "certs/tls.crt") == given
        assert not (tmp_path / f"data/caddy/certificates/local/{HOST}").exists()  # none made
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    assert "serving the certificate" in (tmp_path / "proxy.log").read_text()


def test_half_a_certificate_is_refused(tmp_path):
    self_signed(tmp_path / "certs")
    (tmp_path / "certs/tls.key").unlink()
    folder = caddy_folder(tmp_path / "etc-caddy", {"http": 1, "https": 2, "web": 3})
    done = subprocess.run(["/bin/sh", str(folder / "start.sh")], capture_output=True, text=True,
                          env=proxy_env(tmp_path, tmp_path / "certs"), timeout=30)  # fmt: skip
    assert done.returncode == 1
    assert "give both" in done.stderr and "tls.key" in done.stderr


def settings_values(env: dict[str, str], *names: str) -> subprocess.CompletedProcess:
    code = (
        "import json; from django.conf import settings as s; "
        f"print(json.dumps({{n: getattr(s, n, None) for n in {list(names)!r}}}))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"},
                          timeout=60)  # fmt: skip


def test_production_believes_no_forwarded_header_by_itself():
    done = settings_values(PRODUCTION_ENV, "SECURE_PROXY_SSL_HEADER", "USE_X_FORWARDED_HOST",
                           "FORWARDED_ALLOW_IPS")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "SECURE_PROXY_SSL_HEADER": None, "USE_X_FORWARDED_HOST": False, "FORWARDED_ALLOW_IPS": []
    }  # fmt: skip
    trusted = settings_values({**PRODUCTION_ENV, "FORWARDED_ALLOW_IPS": "172.30.250.0/24, ::1"},
                              "FORWARDED_ALLOW_IPS")  # fmt: skip
    assert json.loads(trusted.stdout) == {"FORWARDED_ALLOW_IPS": ["172.30.250.0/24", "::1"]}


@pytest.mark.parametrize("value", ["*", "proxy", "10.0.0.0/33", "1.2.3.4,nope"])
def test_anything_but_addresses_stops_the_portal_at_start_up(value):
    env = {**PRODUCTION_ENV, "FORWARDED_ALLOW_IPS": value}
    loaded = settings_values(env, "FORWARDED_ALLOW_IPS")
    assert loaded.returncode != 0 and "FORWARDED_ALLOW_IPS must list IP addresses" in loaded.stderr
    web = subprocess.run([sys.executable, "-m", "portal.web", "--port", str(free_port())],
                         capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={**os.environ, **env})  # fmt: skip
    assert web.returncode != 0 and "FORWARDED_ALLOW_IPS must list IP addresses" in web.stderr
