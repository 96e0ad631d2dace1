"""``make run`` (portal/devstack.py): the web server and the worker share one
``PROMETHEUS_MULTIPROC_DIR`` per run, so counters the worker's cycle records reach the
web server's ``/metrics`` (#17), and the last run's counts are gone at the next start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from portal import devstack

# A worker's record: one preemption, written as core.telemetry writes it in that process.
RECORD = (
    "from core import telemetry; "
    "telemetry.PREEMPTIONS.labels(queue='q1', reason='preemption').inc()"
)


def preemptions(path: Path) -> float:
    """gpuportal_preemptions_total{queue="q1"} summed over every process's files in ``path``."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    value = registry.get_sample_value(
        "gpuportal_preemptions_total", {"queue": "q1", "reason": "preemption"}
    )
    return value or 0.0


def record_in_another_process(env: dict[str, str]) -> None:
    child_env = {**env, "PYTHONPATH": str(devstack.ROOT)}
    subprocess.run([sys.executable, "-c", RECORD], env=child_env, check=True, timeout=60)


def test_a_run_gets_an_empty_metrics_dir_shared_by_its_processes(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}
    path = devstack.use_metrics_dir(env, tmp_path)
    assert env["PROMETHEUS_MULTIPROC_DIR"] == str(path) == str(tmp_path / "metrics")
    assert path.is_dir() and not any(path.iterdir())
    record_in_another_process(env)  # the worker
    record_in_another_process(env)  # a second process of the same run
    assert preemptions(path) == 2  # what the web server's /metrics sums


def test_the_next_run_starts_from_zero(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}
    record_in_another_process(env | {"PROMETHEUS_MULTIPROC_DIR": str(
        devstack.use_metrics_dir(dict(env), tmp_path))})  # fmt: skip
    assert preemptions(tmp_path / "metrics") == 1
    devstack.use_metrics_dir(env, tmp_path)  # make run again
    assert preemptions(tmp_path / "metrics") == 0


def test_a_directory_given_by_the_caller_is_used_as_it_is(tmp_path):
    given = tmp_path / "mine"
    given.mkdir()
    (given / "keep.db").write_bytes(b"")
    env = {"PROMETHEUS_MULTIPROC_DIR": str(given)}
    assert devstack.use_metrics_dir(env, tmp_path) == given
    assert (given / "keep.db").exists() and not (tmp_path / "metrics").exists()


class FakeProcess:
    """A child that exits at once (so main() stops), remembering how it was started."""

    started: list[tuple[list[str], dict[str, str]]] = []

    def __init__(self, cmd, env, **kwargs) -> None:
        FakeProcess.started.append((cmd, env))
        self.stdout: list[str] = []

    def poll(self) -> int:
        return 0

    def wait(self, timeout=None) -> int:
        return 0


def test_main_gives_web_worker_and_beat_the_same_metrics_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(devstack, "DATA", tmp_path)
    monkeypatch.setenv("DATABASE_URL", "postgres://u@127.0.0.1:1/x")  # no embedded servers
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("DEMO_PASSWORD", "x")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    monkeypatch.setattr(devstack.subprocess, "run", lambda *a, **k: None)  # migrate, seed_demo
    monkeypatch.setattr(devstack.subprocess, "Popen", FakeProcess)
    monkeypatch.setattr(devstack.signal, "signal", lambda *a: None)
    stale = tmp_path / "metrics" / "counter_old-1.db"
    stale.parent.mkdir()
    stale.write_bytes(b"from the last run")
    FakeProcess.started = []

    assert devstack.main() == 0

    dirs = {
        "web" if "portal.web" in cmd else cmd[cmd.index("portal") + 1]: env.get(
            "PROMETHEUS_MULTIPROC_DIR"
        )
        for cmd, env in FakeProcess.started
    }
    assert dirs == dict.fromkeys(["web", "worker", "beat"], str(tmp_path / "metrics"))
    assert not stale.exists()


@pytest.fixture(autouse=True)
def _no_leak(monkeypatch):
    """use_metrics_dir writes to the dict it is given, never to this process's environment."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    yield
    import os

    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ


def test_the_demo_cycles_every_two_seconds_unless_the_caller_says_otherwise():
    env = {"PATH": "/usr/bin:/bin"}
    assert devstack.use_demo_cadence(env) == "2" == env["SCHEDULER_CYCLE_SECONDS"]
    mine = {"SCHEDULER_CYCLE_SECONDS": "7"}
    assert devstack.use_demo_cadence(mine) == "7" == mine["SCHEDULER_CYCLE_SECONDS"]


def test_the_demos_mail_goes_to_the_workers_log_unless_a_server_is_configured():
    """make run has no mail server: quota and job mail were tried on localhost:25, refused
    and retried for half an hour; they are printed in the worker's log instead."""
    from core.mail import mail_settings

    env = {"PATH": "/usr/bin:/bin"}
    devstack.use_console_mail(env)
    assert mail_settings(env)["backend"] == "django.core.mail.backends.console.EmailBackend"
    for configured in ({"EMAIL_HOST": "smtp.example.org"}, {"EMAIL_BACKEND": "x.y.Backend"}):
        mine = dict(configured)
        devstack.use_console_mail(mine)
        assert mine == configured
