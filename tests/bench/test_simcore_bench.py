"""The simulator-core benchmark: a loaded cluster as asked, and figures for every timing."""

from __future__ import annotations

import json
from collections import Counter

from bench.simcore import build_loaded_simulator, main, measure


def test_the_loaded_simulator_has_the_jobs_asked_for():
    sim = build_loaded_simulator(running=60, ended=30, nodes=40)
    states = Counter(j.state for j in sim.jobs.values())
    assert len(sim.nodes) == 40 and len(sim.jobs) == 90
    assert states["running"] == 60


def test_no_gpu_is_held_by_two_running_jobs():
    sim = build_loaded_simulator(running=80, ended=10, nodes=24, seed=3)
    held: Counter = Counter()
    for job in sim.jobs.values():
        if job.state == "running":
            for node, gpus in job.placement:
                held.update((node, g) for g in gpus)
                assert not sim.nodes[node].inference, "the inference pool is left alone"
    assert held and set(held.values()) == {1}


def test_the_same_seed_loads_the_same_cluster():
    a = build_loaded_simulator(running=20, ended=5, nodes=16, seed=7).to_dict()
    assert a == build_loaded_simulator(running=20, ended=5, nodes=16, seed=7).to_dict()


def test_measure_reports_every_timing():
    result = measure(build_loaded_simulator(running=20, ended=5, nodes=16), hours=0.05)
    assert result["nodes"] == 16 and result["jobs"] == 25 and result["running_jobs"] == 20
    assert result["state_bytes"] > 0
    assert 0 <= result["advance_5s_median_ms"] <= result["advance_5s_p95_ms"]
    assert result["advance_5s_p95_ms"] <= result["advance_5s_max_ms"]
    for key in ("observe_ms", "to_dict_ms", "round_trip_ms"):
        assert result[key] > 0


def test_python_m_bench_simcore_prints_json(capsys):
    main(["--nodes", "16", "--running", "10", "--ended", "2", "--hours", "0.01"])
    assert json.loads(capsys.readouterr().out)["running_jobs"] == 10
