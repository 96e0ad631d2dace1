"""gpuctl with kubectl and squeue habits (#18), against a live portal: ``-o`` modes,
``--no-headers``, ``--me`` / ``-u`` / ``-q`` and CJK-aware column widths."""

from __future__ import annotations

import json

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
    assert "LINE" in wide[0] and "PER.NODE" in wide[0] and "STARTED" in wide[0]
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
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuctl", "jobs", "--me", "-w", "--interval", "0.5"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    headers = 0
    deadline = time.monotonic() + 60
    while headers < 3 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        headers += line.split()[:1] == ["ID"]  # ID is right-aligned
    proc.send_signal(signal.SIGINT)
    assert proc.wait(20) == 0, proc.stderr.read()
    assert headers == 3
