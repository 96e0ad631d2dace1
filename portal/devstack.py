"""``make run``: the whole portal on one machine, stopped together with Ctrl-C.

Starts (when ``DATABASE_URL`` / ``REDIS_URL`` are unset) an embedded PostgreSQL
and Redis under ``.devdata/``, migrates, seeds the demo (idempotent), then runs
the web server (portal/web.py: uvicorn, HTTP + websockets), one Celery worker and exactly one Celery beat,
prefixing their logs. Ctrl-C (or any child dying) stops every process it started.

The web server and the worker share ``PROMETHEUS_MULTIPROC_DIR`` (``.devdata/metrics``,
emptied at each start, unless the variable is already set), as compose's containers
share the ``metrics`` volume: counters the worker's cycle records (preemptions,
admissions, cycle durations) are summed into the web server's ``/metrics``.

The demo's scheduling cycle runs every ``DEMO_CYCLE_SECONDS`` (2 s) unless the caller sets
``SCHEDULER_CYCLE_SECONDS`` (#19): the simulator runs 60 times faster than the wall clock,
so the portal's default 5 s is 5 cluster minutes between cycles, and GPUs freed in between
idle until the next one (about 1% of the 10,000-GPU demo, docs/benchmarks.md "Live demo
quality"). The cycle is single-flight: one slower than the period is followed by the next
at once, never stacked.
"""

from __future__ import annotations

import os
import secrets
import shutil
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
DEMO_CYCLE_SECONDS = "2"  # 2 cluster minutes at the simulator's 60x
PORT = os.environ.get("PORTAL_PORT", "8000")


def _demo_password() -> str:
    if os.environ.get("DEMO_PASSWORD"):
        return os.environ["DEMO_PASSWORD"]
    stored = DATA / "demo_password"
    if not stored.exists():
        stored.write_text(secrets.token_urlsafe(12))
        stored.chmod(0o600)
    return stored.read_text().strip()


def use_metrics_dir(env: dict[str, str], data: Path) -> Path:
    """Give the processes started with ``env`` one ``PROMETHEUS_MULTIPROC_DIR`` for this run.

    Without one, each process counts alone and the web server's ``/metrics`` never sees
    what the worker recorded. A directory the caller already set is used as it is;
    otherwise ``data/metrics`` is emptied (files of the last run's processes would keep
    counting) and created."""
    if env.get("PROMETHEUS_MULTIPROC_DIR"):
        path = Path(env["PROMETHEUS_MULTIPROC_DIR"])
        path.mkdir(parents=True, exist_ok=True)
        return path
    path = data / "metrics"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    env["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path


def use_demo_cadence(env: dict[str, str]) -> str:
    """The demo's cycle period (``DEMO_CYCLE_SECONDS``) unless ``env`` sets one; returns it."""
    return env.setdefault("SCHEDULER_CYCLE_SECONDS", DEMO_CYCLE_SECONDS)


def _pipe(name: str, proc: subprocess.Popen) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(f"{name:>6} | {line}")
        sys.stdout.flush()


def use_console_mail(env: dict[str, str]) -> None:
    """Without a mail server configured (``EMAIL_HOST``, ``EMAIL_BACKEND``), the demo's mail
    (quota requests and decisions, job mail) is printed in the worker's log rather than
    tried on localhost:25, refused and retried for half an hour."""
    if not env.get("EMAIL_HOST") and not env.get("EMAIL_BACKEND"):
        env["EMAIL_BACKEND"] = "django.core.mail.backends.console.EmailBackend"


def main() -> int:
    DATA.mkdir(exist_ok=True)
    DATA.chmod(0o755)
    services: list[Postgres | Redis] = []
    env = dict(os.environ)
    env.setdefault("DEBUG", "1")
    env["DEMO_PASSWORD"] = _demo_password()
    use_metrics_dir(env, DATA)
    use_demo_cadence(env)
    use_console_mail(env)
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
        subprocess.run([py, "manage.py", "seed_demo", "--own-jobs"], cwd=ROOT, env=env, check=True)
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
