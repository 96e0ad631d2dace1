"""``gpuctl login`` against a live portal (#18): signs in with the password, makes a named
token with an expiry, saves url and token to a private config file; then every command
works with that file alone. Wrong password: exit 3 and nothing written."""

from __future__ import annotations

import io
import stat

import pytest
import yaml

from core.models import ApiToken, AuditRecord
from gpuctl.main import main
from tests.conftest import DEMO_PASSWORD


@pytest.fixture
def env(live_server, demo, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("GPUCTL_CONFIG", raising=False)
    monkeypatch.delenv("GPUCTL_TOKEN", raising=False)
    monkeypatch.delenv("GPUCTL_URL", raising=False)
    return {"url": live_server.url, "config": tmp_path / "config" / "gpuctl.yaml"}


def run(monkeypatch, capsys, argv, stdin=""):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.django_db(transaction=True)
def test_login_saves_a_named_expiring_token_that_then_works(env, monkeypatch, capsys):
    code, out, err = run(
        monkeypatch,
        capsys,
        ["--url", env["url"], "login", "-u", "researcher", "--name", "laptop", "--days", "7",
         "--password-stdin"],
        DEMO_PASSWORD + "\n",
    )  # fmt: skip
    assert code == 0, err
    saved = yaml.safe_load(env["config"].read_text())
    assert saved["url"] == env["url"] and saved["token"].startswith("gpt_")
    assert stat.S_IMODE(env["config"].stat().st_mode) == 0o600
    assert "laptop" in out and saved["token"] not in out  # the secret goes to the file only
    token = ApiToken.objects.get(name="laptop")
    assert token.user.username == "researcher"
    assert (token.expires_at - token.created_at).days == 7
    assert AuditRecord.objects.filter(action="token.create", actor_name="researcher").exists()
    # no flags, no environment: the file is enough
    code, out, err = run(monkeypatch, capsys, ["jobs", "--mine"])
    assert code == 0, err
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None


@pytest.mark.django_db(transaction=True)
def test_login_with_a_wrong_password_writes_nothing(env, monkeypatch, capsys):
    code, out, err = run(
        monkeypatch,
        capsys,
        ["--url", env["url"], "login", "-u", "researcher", "--password-stdin"],
        "wrong\n",
    )
    assert code == 3 and "wrong username or password" in err
    assert not env["config"].exists() and not ApiToken.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_login_refusals(env, monkeypatch, capsys):
    code, _, err = run(monkeypatch, capsys, ["login", "-u", "x", "--password-stdin"], "p\n")
    assert code == 2 and "URL" in err  # no URL anywhere
    code, _, err = run(
        monkeypatch,
        capsys,
        ["--url", env["url"], "login", "-u", "researcher", "--days", "999", "--password-stdin"],
        DEMO_PASSWORD + "\n",
    )
    assert code == 1 and "expires_in_days" in err and not env["config"].exists()
