"""CPU time of running process trees, from ``/proc`` (Linux): what a benchmark phase cost.

``bench_api --cpu-pid`` reads the web server's and PostgreSQL's trees around each phase,
so a figure comes with the CPU milliseconds the server spent per request, whatever else
the machine was doing (docs/api.md, "Throughput"). Pure standard library.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 onwards)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:  # gone, or not ours to read
        return None
    return text.rsplit(")", 1)[1].split()


def descendants(root: int) -> list[int]:
    """``root`` and every live process below it (uvicorn's workers, PostgreSQL's backends)."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root``'s live tree (processes that exited are lost,
    so measure trees whose processes live through the phase: servers, pools)."""
    ticks = 0
    for pid in descendants(root):
        fields = _stat_fields(pid)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def readable(pid: int) -> bool:
    """Whether ``pid`` is a live process whose CPU this process can read."""
    return _stat_fields(pid) is not None


def command(pid: int) -> str:
    """A short name for ``pid``: its command line, cut to 60 characters."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:60] or "?"
