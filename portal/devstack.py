"""``make run``: the whole portal on one machine, stopped together with Ctrl-C.

Starts (when ``DATABASE_URL`` / ``REDIS_URL`` are unset) an embedded PostgreSQL
and Redis under ``.devdata/``, migrates, seeds the demo (idempotent), then runs
the web server (portal/web.py: uvicorn, HTTP + websockets), one Celery worker and exactly one Celery beat,
prefixing their logs. Ctrl-C (or any child dying) stops every process it started.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from portal.devservices import Postgres, Redis

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".devdata"
HOST = os.environ.get("PORTAL_HOST", "127.0.0.1")
PORT = os.environ.get("PORTAL_PORT", "8000")


def _demo_password() -> str:
    if os.environ.get("DEMO_PASSWORD"):
        return os.environ["DEMO_PASSWORD"]
    stored = DATA / "demo_password"
    if not stored.exists():
        stored.write_text(secrets.token_urlsafe(12))
        stored.chmod(0o600)
    return stored.read_text().strip()


def _pipe(name: str, proc: subprocess.Popen) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(f"{name:>6} | {line}")
        sys.stdout.flush()


def main() -> int:
    DATA.mkdir(exist_ok=True)
    DATA.chmod(0o755)
    services: list[Postgres | Redis] = []
    env = dict(os.environ)
    env.setdefault("DEBUG", "1")
    env["DEMO_PASSWORD"] = _demo_password()
    if not env.get("DATABASE_URL"):
        pg = Postgres(DATA / "postgres", 55432).start()
        services.append(pg)
        env["DATABASE_URL"] = pg.url
    if not env.get("REDIS_URL"):
        redis = Redis(DATA / "redis", 56379).start()
        services.append(redis)
        env["REDIS_URL"] = redis.url
    py = sys.executable
    children: list[tuple[str, subprocess.Popen]] = []
    try:
        subprocess.run([py, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True)
        subprocess.run([py, "manage.py", "seed_demo"], cwd=ROOT, env=env, check=True)
        commands = {
            "web": [py, "-m", "portal.web", "--host", HOST, "--port", PORT],
            "worker": [py, "-m", "celery", "-A", "portal", "worker", "-l", "info",
                       "--concurrency", "2", "-n", "worker@%h"],
            "beat": [py, "-m", "celery", "-A", "portal", "beat", "-l", "info",
                     "--schedule", str(DATA / "celerybeat-schedule")],
        }  # fmt: skip
        for name, cmd in commands.items():
            proc = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, start_new_session=True,
            )  # fmt: skip
            children.append((name, proc))
            threading.Thread(target=_pipe, args=(name, proc), daemon=True).start()
        print(
            f"\n  Portal: http://{HOST}:{PORT}/   (Ctrl-C stops everything)\n"
            f"  Logins: admin, oncall, lead, researcher, researcher2 / password {env['DEMO_PASSWORD']}\n",
            flush=True,
        )
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.is_set():
            dead = [name for name, proc in children if proc.poll() is not None]
            if dead:
                print(f"{', '.join(dead)} exited; stopping the portal", flush=True)
                break
            stop.wait(0.5)
        return 0
    finally:
        for _, proc in children:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 15
        for _, proc in children:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
        for service in reversed(services):
            service.stop()
        print("portal stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
