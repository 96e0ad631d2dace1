"""bench.request_cpu: where a request's CPU goes, from timers in the normal web server
(``python -m portal.web --cpu-timers DIR``), summed per kind of request and split by step."""

from __future__ import annotations

import io
import json
import threading
import time

import pytest
from django.core.management import call_command

from bench import request_cpu
from tests.browser.conftest import in_thread


def test_request_kinds_fold_ids():
    assert request_cpu.request_kind("POST", "/api/v1/jobs/") == "POST /api/v1/jobs/"
    assert request_cpu.request_kind("POST", "/api/v1/jobs/42/cancel/") == (
        "POST /api/v1/jobs/<id>/cancel/"
    )
    assert request_cpu.request_kind("GET", "/api/v1/jobs/7") == "GET /api/v1/jobs/<id>"


def test_a_timer_counts_the_outermost_call_of_a_step_and_its_thread_cpu_only():
    timers = request_cpu.Timers()

    def busy(depth: int) -> None:
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass
        if depth:
            timed(depth - 1)

    timed = timers.wrap("service", busy)
    respond = timers.wrap_request(lambda server, scope, body: timed(1))
    respond(None, {"method": "POST", "path": "/api/v1/jobs/"}, None)
    waiting = timers.wrap("service", lambda: time.sleep(0.2))
    other = threading.Thread(target=waiting)
    other.start()
    other.join()
    steps = timers.snapshot()["kinds"]
    calls, seconds = steps["POST /api/v1/jobs/"]["service"]
    assert calls == 1 and 0.035 < seconds < 0.5  # nested call not counted twice
    assert steps["POST /api/v1/jobs/"]["request"][0] == 1
    assert steps["outside requests"]["service"][1] < 0.05  # sleeping is not CPU


def test_the_split_nests_the_steps_and_shows_the_rest():
    data = {
        "process_cpu_s": 1.2,
        "kinds": {
            "POST /api/v1/jobs/": {
                "request": [100, 0.8], "view": [100, 0.6], "auth": [100, 0.1],
                "handler": [100, 0.45], "service": [100, 0.3], "insert": [100, 0.1],
                "queue": [100, 0.05], "sql": [500, 0.2],
            },
            "POST /api/v1/bench/baseline/": {
                "request": [100, 0.3], "view": [100, 0.2], "handler": [100, 0.1],
                "insert": [100, 0.05],
            },
        },
    }  # fmt: skip
    result = request_cpu.split(data)
    jobs = {row["step"]: row for row in result["POST /api/v1/jobs/"]["steps"]}
    assert jobs["request"]["ms"] == 8.0 and jobs["view"]["depth"] == 1
    assert jobs["insert"]["depth"] == 4  # request > view > handler > service > insert
    assert jobs["service: rest"]["ms"] == pytest.approx(1.5)
    assert jobs["request: rest"]["ms"] == pytest.approx(2.0)
    assert result["POST /api/v1/jobs/"]["across"]["sql"] == {"ms": 2.0, "calls": 5.0}
    assert result["POST /api/v1/jobs/"]["event_loop_ms"] == pytest.approx(0.5)  # (1.2-1.1)/200
    baseline = {row["step"]: row for row in result["POST /api/v1/bench/baseline/"]["steps"]}
    assert baseline["insert"]["depth"] == 3  # no service: the insert sits in the handler
    assert any("POST /api/v1/jobs/: 100 requests" in line for line in request_cpu.render(result))


@pytest.mark.django_db(transaction=True)
def test_a_timed_server_splits_a_submission_and_a_baseline_insert(demo, tmp_path):
    """The real web server with --cpu-timers, driven by bench_api: every step of the
    submission path is found and timed, and no telemetry runs on it."""
    import requests

    from portal.devservices import free_port
    from tests.reliability.conftest import child_env, spawn, stop_process, wait_until

    port, timers = free_port(), tmp_path / "timers"
    env = child_env(BENCH_ENDPOINTS="1")
    proc = spawn(["-m", "portal.web", "--port", str(port), "--workers", "1",
                  "--cpu-timers", str(timers)], env, tmp_path / "web.log")  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _serves(requests, base), 30, "the timed web server")
        out = io.StringIO()
        in_thread(
            lambda: call_command(
                "bench_api", url=base, user="researcher", seconds=1, clients=2, pending=0,
                rounds=1, cpu_pid=[proc.pid], json=True, stdout=out,
            )
        )  # fmt: skip
        report = json.loads(out.getvalue())
        assert report["submit"]["cpu_ms_per_request"][str(proc.pid)] > 0
        time.sleep(1.5)  # the workers write their totals every second
        result = request_cpu.split(request_cpu.read(timers))
    finally:
        stop_process(proc)
    assert "not timed" not in (tmp_path / "web.log").read_text()
    jobs = {row["step"] for row in result["POST /api/v1/jobs/"]["steps"]}
    assert {"auth", "parse", "validate", "service", "queue", "shape", "insert", "clock",
            "answer", "render"} <= jobs  # fmt: skip
    assert result["POST /api/v1/jobs/"]["across"]["telemetry"]["calls"] == 0
    assert result["POST /api/v1/jobs/"]["requests"] >= report["submit"]["ok"]
    baseline = {row["step"] for row in result["POST /api/v1/bench/baseline/"]["steps"]}
    assert {"auth", "handler", "insert"} <= baseline and "service" not in baseline


def _serves(requests, base: str) -> bool:
    try:
        return requests.get(base + "/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False
