"""gpuctl against a live portal: pytest-django's ``live_server`` (a real HTTP server in a
thread, on the test database), a DRF token per demo user, and ``gpuctl.main.main(argv)``
run in-process with ``GPUCTL_URL`` / ``GPUCTL_TOKEN`` set."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.authtoken.models import Token

from gpuctl.main import main


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def gpuctl(live_server, demo, monkeypatch, tmp_path, capsys):
    """``gpuctl("researcher", "jobs", "--mine")`` -> Run(code, out, err)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # never the real config
    monkeypatch.delenv("GPUCTL_CONFIG", raising=False)
    monkeypatch.setenv("GPUCTL_URL", live_server.url)

    def run(user: str | None, *argv: str) -> Run:
        if user is None:
            monkeypatch.delenv("GPUCTL_TOKEN", raising=False)
        else:
            token, _ = Token.objects.get_or_create(user=demo[user])
            monkeypatch.setenv("GPUCTL_TOKEN", token.key)
        capsys.readouterr()
        code = main(list(argv))
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


@pytest.fixture
def portal():
    """Canned API answers for gpuctl's unit tests (``tests.cli.fakes.FakePortal``)."""
    from tests.cli.fakes import FakePortal

    return FakePortal()


@pytest.fixture
def cli(portal, monkeypatch, tmp_path, capsys):
    """``cli("jobs", "--mine")`` -> Run(code, out, err): gpuctl in-process against ``portal``."""
    from tests.cli.fakes import run_main

    return run_main(portal, monkeypatch, tmp_path, capsys)
