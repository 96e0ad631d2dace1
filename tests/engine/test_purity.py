"""The benchmark entry points work, and the engine stays a pure stdlib core."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from scheduling.engine import Tier, check_plan, plan
from scheduling.engine.bench import BENCH_NOW, build_snapshot, main, run_bench

ENGINE = Path(__file__).resolve().parents[2] / "scheduling" / "engine"


def test_run_bench_reports_the_figures_the_command_prints():
    res = run_bench(gpus=800, pending=200, running=120, runs=2, seed=3)
    for key in ("median_ms", "p95_ms", "runs", "jobs_placed_per_s", "starts", "verdicts"):
        assert key in res
    assert res["runs"] == 2 and res["violations"] == 0
    assert res["median_ms"] > 0 and res["p95_ms"] >= res["min_ms"]
    assert sum(res["verdicts"].values()) + res["starts"] == 200


def test_bench_cli_prints_one_json_object(capsys):
    assert (
        main(["--gpus", "400", "--pending", "50", "--running", "40", "--runs", "1", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert {"median_ms", "p95_ms", "runs"} <= set(out)


def test_bench_snapshot_is_realistic_and_deterministic():
    a = build_snapshot(2000, 300, 400, seed=1)
    assert a == build_snapshot(2000, 300, 400, seed=1)
    assert len(a.nodes) == 250
    assert {n.rack for n in a.nodes} and any(not n.rdma for n in a.nodes)
    assert {j.tier for j in a.pending} == set(Tier)
    sizes = {j.gpus for j in a.pending}
    assert min(sizes) == 1 and max(sizes) >= 128
    free = sum(len(n.free_gpus) for n in a.nodes)
    assert free < 0.3 * 2000  # a busy, fragmented cluster
    assert check_plan(a, plan(a, BENCH_NOW)) == []


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
