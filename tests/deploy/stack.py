"""Run docker-compose.yml without a Docker engine: each service's command and each
healthcheck, exactly as compose resolves them (``docker-compose config``), as local
processes.

What is translated, and nothing else:

- **Host names and ports.** ``postgres:5432``, ``redis:6379`` and ``web:8000`` become
  ``127.0.0.1:<free port>``; the fixed ports in commands and healthchecks (``--port
  8000``, ``-p 5432``, ``-p 6379``, ``127.0.0.1:8000``) and the proxy's 80 and 443
  (``http_port``, ``https_port``, ``127.0.0.1:80``) become free ports; a service listening on ``0.0.0.0`` listens on 127.0.0.1.
- **The edge network.** ``FORWARDED_ALLOW_IPS`` (the ``edge`` subnet: who may send
  X-Forwarded-*) becomes 127.0.0.1, the address the proxy connects to ``web`` from here.
- **Volumes.** A container path becomes the host folder compose mounts there:
  ``/etc/caddy`` is a copy of ``deploy/caddy`` with the ports above translated in the
  Caddyfile, ``/certs``, ``/data``, ``/config`` and ``/tmp`` are scratch folders, one per named
  volume (shared by the services that mount it) or per service.
- **The images.** The portal image is the checkout (``/app``) with its venv first on
  ``PATH`` (``python``, ``celery``); the proxy image is Debian's ``caddy``; Docker's
  ``HOSTNAME`` is set. ``postgres`` and ``redis`` run from ``portal/devservices.py``
  (Debian's PostgreSQL 15 and Redis 7.0, the pinned images' versions) with the role and
  database compose's ``postgres`` service creates; their healthchecks run as written.

Healthchecks are polled every ``POLL_S`` (not every ``interval``) and must pass within
``start_period + retries x interval``, compose's own limit before "unhealthy".
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import yaml

from portal.devservices import Postgres, Redis, free_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
VENV_BIN = Path(sys.executable).parent
POLL_S = 0.5
# The values an operator puts in .env (docs/deploy.md, "First start").
DOT_ENV = {
    "SECRET_KEY": "compose-check-" + "k" * 40 + "-0123456789abcdef",
    "POSTGRES_PASSWORD": "compose-check-password",
    "PUBLIC_HOST": "localhost",
}
EXTERNAL = ("postgres", "redis")  # run from portal/devservices, not from their images


def compose_config(dot_env: dict[str, str], scratch: Path) -> dict[str, Any]:
    """docker-compose.yml as compose resolves it with this ``.env`` (interpolation, merge
    keys, ``$$``), from Debian's docker-compose (installed by .ci/run)."""
    docker_compose = shutil.which("docker-compose")
    if docker_compose is None:
        raise RuntimeError("docker-compose is not installed (.ci/run installs it)")
    env_file = scratch / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in dot_env.items()))
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # no stray variables
    out = subprocess.run(
        [docker_compose, "-f", str(COMPOSE_FILE), "--env-file", str(env_file), "config"],
        cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    return _unescape(yaml.safe_load(out))


def _unescape(value: Any) -> Any:
    """``docker-compose config`` writes a literal ``$`` as ``$$`` (so its output is a valid
    compose file again); the container gets one ``$``."""
    if isinstance(value, str):
        return value.replace("$$", "$")
    if isinstance(value, list):
        return [_unescape(item) for item in value]
    if isinstance(value, dict):
        return {key: _unescape(item) for key, item in value.items()}
    return value


def seconds(duration: str | int | float | None, default: float) -> float:
    """A compose duration (``1m30s``, ``500ms``, ``10s``) in seconds."""
    if duration is None:
        return default
    if isinstance(duration, int | float):
        return float(duration)
    total = 0.0
    for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|us|ns|h|m|s)", duration):
        total += (
            float(amount) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]
        )
    return total


@dataclass
class Health:
    """One run of a healthcheck."""

    ok: bool
    output: str
    seconds: float


@dataclass
class Stack:
    """The services of one compose file, running here."""

    config: dict[str, Any]
    scratch: Path
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    exits: dict[str, int] = field(default_factory=dict)
    healthy_after: dict[str, float] = field(default_factory=dict)
    postgres: Postgres | None = None
    redis: Redis | None = None
    started: float = field(default_factory=time.monotonic)

    # -- translation ------------------------------------------------------------------

    @property
    def services(self) -> dict[str, dict[str, Any]]:
        return self.config["services"]

    def _substitutions(self) -> list[tuple[str, str]]:
        p = self.ports
        return [  # applied in order, before the proxy's port 80 (r"127.0.0.1:80\b")
            ("postgres:5432", f"127.0.0.1:{p['postgres']}"),
            ("redis:6379", f"127.0.0.1:{p['redis']}"),
            ("web:8000", f"127.0.0.1:{p['web']}"),
            ("127.0.0.1:8000", f"127.0.0.1:{p['web']}"),
        ]

    def _volumes(self, service: str) -> dict[str, Path]:
        """Container path -> host folder for ``service``'s volumes (and its /tmp)."""
        mounts: dict[str, Path] = {"/tmp": self.scratch / service / "tmp"}
        for volume in self.services[service].get("volumes", []):
            source, target = (
                (volume["source"], volume["target"]) if isinstance(volume, dict)
                else volume.split(":")[:2]
            )  # fmt: skip
            if target == "/etc/caddy":
                mounts[target] = self.scratch / "etc-caddy"  # the translated copy
            elif target == "/var/lib/postgresql/data":
                continue  # the external PostgreSQL keeps its own data
            elif source in self.config.get("volumes", {}):
                mounts[target] = self.scratch / "volumes" / source  # shared by name
            else:
                mounts[target] = self.scratch / service / target.strip("/")
        for path in mounts.values():
            path.mkdir(parents=True, exist_ok=True)
        return mounts

    def _replace(self, value: str) -> str:
        for old, new in self._substitutions():
            value = value.replace(old, new)
        return re.sub(r"127\.0\.0\.1:80\b", f"127.0.0.1:{self.ports['http']}", value)

    def translate(self, service: str, value: str) -> str:
        """One string of ``service``'s command, healthcheck or environment, translated."""
        value = self._replace(value)
        for target, host in sorted(self._volumes(service).items(), key=lambda m: -len(m[0])):
            if value == target or value.startswith(target + "/"):
                return str(host) + value[len(target) :]
        edge = self.config["networks"]["edge"]["ipam"]["config"][0]["subnet"]
        return value.replace(edge, "127.0.0.1")

    def argv(self, service: str, words: list[str]) -> list[str]:
        """``words`` translated, with the fixed ports after ``--port``/``-p`` and 0.0.0.0."""
        fixed = {"8000": "web", "5432": "postgres", "6379": "redis"}
        out = []
        for i, word in enumerate(words):
            before = words[i - 1] if i else ""
            if before in ("--port", "-p") and word in fixed:
                out.append(str(self.ports[fixed[word]]))
            elif word == "0.0.0.0":
                out.append("127.0.0.1")
            else:
                out.append(self.translate(service, word))
        return out

    def env(self, service: str) -> dict[str, str]:
        """``service``'s environment as compose gives it, translated, plus the image's PATH
        and Docker's HOSTNAME."""
        raw = self.services[service].get("environment") or {}
        if isinstance(raw, list):
            raw = dict(item.split("=", 1) for item in raw)
        env = {k: self.translate(service, "" if v is None else str(v)) for k, v in raw.items()}
        home = self.scratch / service / "home"
        home.mkdir(parents=True, exist_ok=True)
        env.update(PATH=f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin", HOSTNAME=socket.gethostname(),
                   HOME=str(home), LANG="C.UTF-8")  # fmt: skip
        return env

    # -- services ---------------------------------------------------------------------

    def prepare(self) -> None:
        self.ports = {name: free_port() for name in ("postgres", "redis", "web", "http", "https")}
        caddy_folder(self.scratch / "etc-caddy", self.ports)

    def start_external(self) -> None:
        """PostgreSQL and Redis, with the role and database the postgres image creates."""
        pg_env = self.services["postgres"]["environment"]
        self.postgres = Postgres(self.scratch / "pg", self.ports["postgres"],
                                 database=pg_env["POSTGRES_DB"]).start()  # fmt: skip
        with psycopg.connect(
            f"postgres://postgres@127.0.0.1:{self.ports['postgres']}/postgres", autocommit=True
        ) as conn:
            conn.execute(
                f'CREATE ROLE "{pg_env["POSTGRES_USER"]}" LOGIN PASSWORD '
                f"'{pg_env['POSTGRES_PASSWORD']}'"
            )
            conn.execute(
                f'ALTER DATABASE "{pg_env["POSTGRES_DB"]}" OWNER TO "{pg_env["POSTGRES_USER"]}"'
            )
        self.redis = Redis(self.scratch / "redis", self.ports["redis"]).start()

    def start(self, service: str) -> subprocess.Popen:
        """Run ``service``'s command, as written (translated), in the checkout."""
        command = self.argv(service, list(self.services[service]["command"]))
        log = open(self.scratch / f"{service}.log", "ab")  # noqa: SIM115 - lives with it
        proc = subprocess.Popen(command, cwd=ROOT, env=self.env(service), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        self.processes[service] = proc
        return proc

    def log(self, service: str, tail: int = 3000) -> str:
        path = self.scratch / f"{service}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def run_to_completion(self, service: str, timeout: float) -> int:
        """A one-shot service (``migrate``): its exit code."""
        proc = self.start(service)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop_process(proc)
            raise
        self.exits[service] = code
        return code

    # -- healthchecks -----------------------------------------------------------------

    def healthcheck(self, service: str) -> Health:
        """Run ``service``'s healthcheck once, as written (translated), with its timeout."""
        check = self.services[service]["healthcheck"]
        test = check["test"]
        if test[0] == "CMD":
            argv = self.argv(service, list(test[1:]))
        elif test[0] == "CMD-SHELL":
            argv = ["/bin/sh", "-c", self.translate(service, test[1])]
        else:
            raise AssertionError(f"{service}: healthcheck kind {test[0]!r} is not run here")
        began = time.monotonic()
        try:
            done = subprocess.run(argv, cwd=ROOT, env=self.env(service), capture_output=True,
                                  text=True, timeout=seconds(check.get("timeout"), 30))  # fmt: skip
        except subprocess.TimeoutExpired:
            return Health(False, "timed out", time.monotonic() - began)
        return Health(done.returncode == 0, (done.stdout + done.stderr)[-1500:],
                      time.monotonic() - began)  # fmt: skip

    def limit(self, service: str) -> float:
        """How long compose lets ``service`` fail its healthcheck before calling it unhealthy."""
        check = self.services[service]["healthcheck"]
        return seconds(check.get("start_period"), 0) + check.get("retries", 3) * seconds(
            check.get("interval"), 30
        )

    def wait_healthy(self, service: str) -> Health:
        """Poll ``service``'s healthcheck until it passes; fail past compose's limit."""
        deadline = time.monotonic() + self.limit(service)
        while True:
            proc = self.processes.get(service)
            if proc is not None and proc.poll() is not None:
                raise AssertionError(
                    f"{service} exited with {proc.returncode}:\n{self.log(service)}"
                )
            health = self.healthcheck(service)
            if health.ok:
                self.healthy_after.setdefault(service, time.monotonic() - self.started)
                return health
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{service} unhealthy after {self.limit(service):.0f} s: {health.output}\n"
                    f"log:\n{self.log(service)}"
                )
            time.sleep(POLL_S)

    # -- teardown ---------------------------------------------------------------------

    @staticmethod
    def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def stop(self) -> None:
        """SIGTERM to every service at once (as ``docker-compose down``), then wait."""
        running = [p for p in self.processes.values() if p.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in running:
            self.stop_process(proc)
        if self.redis:
            self.redis.stop()
        if self.postgres:
            self.postgres.stop()


def caddy_folder(folder: Path, ports: dict[str, int]) -> Path:
    """A copy of deploy/caddy in ``folder`` with the Caddyfile's ports translated: 80 and
    443 (``http_port``, ``https_port``, ``127.0.0.1:80``) to ``ports["http"]`` and
    ``ports["https"]``, ``web:8000`` to ``127.0.0.1:ports["web"]``."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "deploy/caddy/start.sh", folder / "start.sh")
    text = (ROOT / "deploy/caddy/Caddyfile").read_text()
    text = text.replace("web:8000", f"127.0.0.1:{ports['web']}")
    text = re.sub(r"127\.0\.0\.1:80\b", f"127.0.0.1:{ports['http']}", text)
    text = re.sub(r"(?m)^(\s*http_port) 80$", rf"\1 {ports['http']}", text)
    text = re.sub(r"(?m)^(\s*https_port) 443$", rf"\1 {ports['https']}", text)
    (folder / "Caddyfile").write_text(text)
    return folder


def scratch_dir() -> Path:
    """A throw-away folder the ``postgres`` user can traverse."""
    path = Path(tempfile.mkdtemp(prefix="compose-check-"))
    path.chmod(0o755)
    return path


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """``{dependency: condition}`` of a resolved service."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: "service_started" for name in deps}
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def boot(stack: Stack) -> None:
    """Start every service in the order compose does: a service starts once each of its
    ``depends_on`` conditions holds (healthy, or completed successfully)."""
    stack.prepare()
    stack.start_external()
    pending = dict(stack.services)
    done: set[str] = set()
    for name in EXTERNAL:
        stack.wait_healthy(name)
        done.add(name)
        pending.pop(name)
    while pending:
        ready = [n for n, s in pending.items() if set(depends_on(s)) <= done]
        if not ready:
            raise AssertionError(f"unresolvable depends_on among {sorted(pending)}")
        for name in ready:
            service = pending.pop(name)
            for dep, condition in depends_on(service).items():
                if condition == "service_healthy" and dep not in stack.healthy_after:
                    stack.wait_healthy(dep)
                elif condition == "service_completed_successfully":
                    assert stack.exits.get(dep) == 0, f"{dep} exited {stack.exits.get(dep)}"
            if service.get("restart") == "no":
                code = stack.run_to_completion(name, timeout=180)
                assert code == 0, f"{name} exited with {code}:\n{stack.log(name)}"
            else:
                stack.start(name)
            done.add(name)
