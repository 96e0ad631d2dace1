"""gpuctl with kubectl and squeue habits (#18), against a live portal: ``-o`` modes,
``--no-headers``, ``--me`` / ``-u`` / ``-q``, CJK-aware column widths, ``-w`` and colour
on a terminal only (``NO_COLOR``, ``TERM=dumb`` and pipes get none)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from gpuctl.output import columns, display_width, set_mode, table


@pytest.fixture(autouse=True)
def _default_mode():
    yield
    set_mode("table", headers=True)  # main() sets it per run; leave no trace for others


def submit(gpuctl, user: str, name: str, queue: str) -> int:
    run = gpuctl(user, "submit", name, "-q", queue, "-g", "1", "-o", "json")
    assert run.code == 0, run.err
    return json.loads(run.out)["id"]


@pytest.fixture
def jobs(gpuctl):
    return {
        "mine": submit(gpuctl, "researcher", "训练-模型", "llm-finetune"),
        "core": submit(gpuctl, "researcher", "plain", "llm-core"),
        "other": submit(gpuctl, "researcher2", "theirs", "search-rec-finetune"),
    }


def test_output_modes(gpuctl, jobs):
    as_json = json.loads(gpuctl("researcher", "jobs", "--me", "-o", "json").out)
    assert {j["id"] for j in as_json} == {jobs["mine"], jobs["core"]}
    as_yaml = yaml.safe_load(gpuctl("researcher", "jobs", "--me", "-o", "yaml").out)
    assert as_yaml == as_json
    names = gpuctl("researcher", "jobs", "--me", "-o", "name").out.split()
    assert sorted(map(int, names)) == sorted([jobs["mine"], jobs["core"]])
    table_out = gpuctl("researcher", "jobs", "--me").out.splitlines()
    assert table_out[0].split()[0] == "ID" and len(table_out) == 3  # ID is right-aligned
    wide = gpuctl("researcher", "jobs", "--me", "-o", "wide").out.splitlines()
    assert "LINE" in wide[0] and "PER.NODE" in wide[0] and "STARTED(UTC)" in wide[0]
    assert wide[0].split()[-1] == "TIME.LIMIT" and wide[1].split()[-1] == "-", "no limit"
    bare = gpuctl("researcher", "jobs", "--me", "--no-headers").out.splitlines()
    assert bare == table_out[1:]
    assert gpuctl("researcher", "queues", "-o", "name").out.split()[0] != "QUEUE"
    assert gpuctl("researcher", "jobs", "-o", "xml").code == 2


def test_squeue_filters(gpuctl, jobs):
    by_queue = gpuctl("admin", "jobs", "-q", "llm-core", "-o", "name").out.split()
    assert by_queue == [str(jobs["core"])]
    by_user = gpuctl("admin", "jobs", "-u", "researcher2", "-o", "name").out.split()
    assert by_user == [str(jobs["other"])]
    assert gpuctl("researcher2", "jobs", "--me", "-o", "name").out.split() == [str(jobs["other"])]


def test_cjk_names_keep_columns_aligned(gpuctl, jobs, capsys):
    assert display_width("训练-模型") == 9 and display_width("e\u0301") == 1
    lines = gpuctl("researcher", "jobs", "--me").out.splitlines()
    owner_at = [display_width(line[: line.index("researcher")]) for line in lines[1:]]
    assert len(set(owner_at)) == 1  # OWNER starts at the same terminal column on each row
    capsys.readouterr()
    table([{"a": "ｗｉｄｅ", "b": 1}, {"a": "x", "b": 22}], columns(("A", "a"), ("B", "b")))
    out = capsys.readouterr().out.splitlines()
    assert [display_width(line) for line in out[1:]] == [12, 12]


def test_version_shows_client_and_server(gpuctl, settings):
    from gpuctl import __version__
    from portal.version_api import portal_version

    run = gpuctl("researcher", "version")
    assert run.code == 0, run.err
    assert f"gpuctl {__version__}" in run.out and f"gpu-portal {portal_version()}" in run.out
    data = json.loads(gpuctl("researcher", "version", "-o", "json").out)
    assert data["server"] == {"version": portal_version(), "revision": "", "api": "v1"}
    assert gpuctl(None, "version").code == 3  # the server's version needs a token


def test_watch_prints_again_until_interrupted(live_server, demo, jobs, tmp_path):
    """``gpuctl jobs -w`` in a real process: rounds keep coming; Ctrl-C ends it with 0."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from rest_framework.authtoken.models import Token

    env = {
        **os.environ,
        "GPUCTL_URL": live_server.url,
        "GPUCTL_TOKEN": Token.objects.get_or_create(user=demo["researcher"])[0].key,
        "XDG_CONFIG_HOME": str(tmp_path),
    }
    # Ctrl-C's default disposition, as in a terminal: an ignored SIGINT is inherited across
    # exec, and something earlier in the whole suite leaves it ignored in this process
    # (Python then installs no KeyboardInterrupt handler in the child).
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuctl", "jobs", "--me", "-w", "--interval", "0.5"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    headers = 0
    deadline = time.monotonic() + 60
    while headers < 3 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        headers += line.split()[:1] == ["ID"]  # ID is right-aligned
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)  # drains both pipes while it waits
    assert proc.returncode == 0, err
    assert headers == 3


SGR = re.compile(r"\x1b\[[0-9;]*m")


def run_on_a_terminal(live_server, demo, tmp_path, *argv: str, **env: str) -> str:
    """``gpuctl ARGV`` in a real process whose stdout is a pseudo-terminal; what it printed."""
    import os
    import pty
    import subprocess
    import sys

    from rest_framework.authtoken.models import Token

    environment = {
        **{k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")},
        "GPUCTL_URL": live_server.url,
        "GPUCTL_TOKEN": Token.objects.get_or_create(user=demo["researcher"])[0].key,
        "XDG_CONFIG_HOME": str(tmp_path),
        "TERM": "xterm",
        **env,
    }
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gpuctl", *argv], env=environment,
                            stdout=follower, stderr=subprocess.PIPE)  # fmt: skip
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(60) == 0, proc.stderr.read()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_colour_on_a_terminal_only_and_never_with_no_color(live_server, demo, jobs, tmp_path):
    coloured = run_on_a_terminal(live_server, demo, tmp_path, "jobs", "--me")
    # the pending jobs' STATE in yellow, nothing else coloured, and the columns still line
    # up exactly as without colour (escapes take no terminal column)
    assert coloured.count("\x1b[33mpending\x1b[0m") == 2, repr(coloured)
    assert set(SGR.findall(coloured)) == {"\x1b[33m", "\x1b[0m"}
    plain = run_on_a_terminal(live_server, demo, tmp_path, "jobs", "--me", NO_COLOR="1")
    assert "\x1b" not in plain and SGR.sub("", coloured) == plain
    dumb = run_on_a_terminal(live_server, demo, tmp_path, "jobs", "--me", TERM="dumb")
    assert dumb == plain
    # on a terminal, JSON and names are for programs: never coloured
    assert "\x1b" not in run_on_a_terminal(
        live_server, demo, tmp_path, "jobs", "--me", "-o", "json"
    )


def test_no_colour_when_piped(gpuctl, jobs):
    run = gpuctl("researcher", "jobs", "--me")  # stdout: pytest's capture, not a terminal
    assert "pending" in run.out and "\x1b" not in run.out


@pytest.mark.parametrize(
    ("environ", "tty", "expected"),
    [
        ({}, True, True),
        ({}, False, False),
        ({"NO_COLOR": "1"}, True, False),
        ({"NO_COLOR": ""}, True, True),  # no-color.org: set to a non-empty value
        ({"TERM": "dumb"}, True, False),
    ],
)
def test_wants_colour(environ, tty, expected):
    from gpuctl.output import wants_colour

    class Stream:
        def isatty(self) -> bool:
            return tty

    assert wants_colour(Stream(), environ) is expected


def test_a_hostile_name_stays_escaped_when_coloured(capsys, monkeypatch):
    """Colour bypasses the escaping stream; the cells must already be escaped."""
    import io

    from gpuctl.output import TerminalSafe

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    screen = Terminal()
    rows = [{"name": "\x1b]0;pwned\x07", "state": "failed"}]
    table(rows, columns(("NAME", "name"), ("STATE", "state")), out=TerminalSafe(screen))
    shown = screen.getvalue()
    assert "\\x1b]0;pwned\\x07" in shown and "\x07" not in shown
    assert "\x1b[31mfailed\x1b[0m" in shown
