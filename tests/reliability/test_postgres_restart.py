"""PostgreSQL restarts under a running portal: the loop and the web carry on.

The shared test database cannot be restarted under the rest of the suite, so this
test starts a PostgreSQL of its own, migrates and seeds it in subprocesses, runs the
processes under test on it (``run_cycle``, the web server, a Celery worker and beat, with the
production settings: ``CONN_MAX_AGE=60``, no ``CONN_HEALTH_CHECKS``), restarts the
server, and checks the next ``run_cycle``, the next web requests and the beat loop.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time

import pytest
import requests

from portal.devservices import Postgres, free_port
from tests.conftest import DEMO_PASSWORD
from tests.reliability.conftest import (
    ROOT,
    celery_beat,
    celery_worker,
    child_env,
    scratch_dir,
    stop_process,
    wait_until,
    web_server,
)


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    return result


def signed_in(base: str, username: str) -> requests.Session:
    http = requests.Session()
    page = http.get(base + "/accounts/login/", timeout=10)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    done = http.post(
        base + "/accounts/login/",
        data={"username": username, "password": DEMO_PASSWORD, "csrfmiddlewaretoken": csrf},
        headers={"Referer": base + "/accounts/login/"}, allow_redirects=False, timeout=10,
    )  # fmt: skip
    assert done.status_code == 302, done.status_code
    return http


def cycles(env: dict[str, str]) -> int:
    out = manage(env, "shell", "-c",
                 "from scheduling.models import SchedulingCycle as C; print(C.objects.count())")  # fmt: skip
    return int(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def own_postgres():
    folder = scratch_dir("portal-pg-")
    server = Postgres(folder / "pg", free_port()).start()
    yield server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


def test_after_a_postgresql_restart_cycles_and_web_requests_succeed(own_postgres, scratch):
    env = child_env(
        DJANGO_SETTINGS_MODULE="portal.settings", DATABASE_URL=own_postgres.url,
        DEMO_PASSWORD=DEMO_PASSWORD,
    )  # fmt: skip
    manage(env, "migrate", "--noinput")
    manage(env, "seed_demo", "--nodes", "4", "--nodes-per-rack", "4", "--uniform", "--no-workload")
    first = json.loads(manage(env, "run_cycle").stdout)

    loop = dict(env, SCHEDULER_CYCLE_SECONDS="1")
    worker = celery_worker(loop, scratch / "worker.log", "--pool", "solo")
    beat = celery_beat(loop, scratch / "beat.log", scratch / "beat-schedule")
    try:
        with web_server(env, scratch / "web.log") as base:
            web = signed_in(base, "researcher")
            assert web.get(base + "/", timeout=10).status_code == 200
            wait_until(lambda: cycles(env) > 2, 40, "beat-driven cycles")

            own_postgres.stop()
            own_postgres.start()
            restarted = time.monotonic()

            after = [web.get(base + path, timeout=10).status_code
                     for path in ("/", "/api/v1/jobs/") * 10]  # fmt: skip
            second = json.loads(manage(env, "run_cycle").stdout)
            before = cycles(env)
            wait_until(lambda: cycles(env) > before + 2, 40, "beat-driven cycles after the restart")
            resumed_s = time.monotonic() - restarted
    finally:
        stop_process(beat)
        stop_process(worker)
    assert second["id"] > first["id"]
    worker_log = (scratch / "worker.log").read_text()
    failed_tasks = worker_log.count("raised unexpected: OperationalError")
    print(f"after the restart: web {after}, worker tasks failed {failed_tasks}, "
          f"loop resumed within {resumed_s:.1f} s")  # fmt: skip
    # Not even the first request fails: the web server's connection pool checks each
    # connection before lending it (CONN_HEALTH_CHECKS), so dead ones are replaced.
    assert set(after) == {200}, after
    # Celery's Django fixup closes connections around every task: a cycle fails only if
    # it starts while the server is down (the restart takes about a second).
    assert failed_tasks <= 1, worker_log[-3000:]
