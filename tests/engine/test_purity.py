"""The engine stays a pure stdlib core, and leaves the garbage collector as it found it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from bench.engine import BENCH_NOW, build_snapshot
from scheduling.engine import check_plan, plan

ENGINE = Path(__file__).resolve().parents[2] / "scheduling" / "engine"


def test_engine_imports_only_the_standard_library():
    allowed = set(sys.stdlib_module_names)
    for path in ENGINE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: inside the engine
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def test_plan_restores_the_garbage_collector_state():
    import gc

    s = build_snapshot(400, 20, 20, seed=2)
    assert gc.isenabled()
    check_plan(s, plan(s, BENCH_NOW))
    assert gc.isenabled()
    gc.disable()
    try:
        check_plan(s, plan(s, BENCH_NOW))
        assert not gc.isenabled()
    finally:
        gc.enable()
