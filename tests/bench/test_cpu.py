"""bench.cpu: the CPU of a process tree from /proc, as bench_api --cpu-pid reads it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import cpu


def test_a_tree_includes_its_children_and_grows_with_their_work():
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.process_time() + 0.5\n"
         "while time.process_time() < end: pass\ntime.sleep(30)"]
    )  # fmt: skip
    try:
        assert child.pid in cpu.descendants(os.getpid())
        before = cpu.tree_cpu_seconds(os.getpid())
        deadline = time.monotonic() + 20
        while cpu.tree_cpu_seconds(child.pid) < 0.4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cpu.tree_cpu_seconds(child.pid) >= 0.4
        assert cpu.tree_cpu_seconds(os.getpid()) - before >= 0.3
        assert "python" in cpu.command(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_process_that_is_gone_counts_nothing():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not cpu.readable(child.pid)
    assert cpu.tree_cpu_seconds(child.pid) == 0.0
    assert cpu.command(child.pid) == "?"
