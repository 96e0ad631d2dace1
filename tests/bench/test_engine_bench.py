"""The engine benchmark: its random cluster is realistic and consistent, its figures add up."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from bench import engine as engine_bench
from bench.engine import BENCH_NOW, NODE_GPUS, RACK_NODES, build_snapshot, main, run_bench
from scheduling.engine import PolicyConfig, Tier, check_plan, plan
from tests.no_django import run_without_django


@pytest.fixture(scope="module")
def snapshot():
    return build_snapshot(2000, 300, 400, seed=1)


def test_run_bench_reports_the_figures_the_command_prints():
    res = run_bench(gpus=800, pending=200, running=120, runs=2, seed=3)
    for key in ("median_ms", "p95_ms", "runs", "jobs_placed_per_s", "starts", "swaps", "verdicts"):
        assert key in res
    assert res["runs"] == 2 and res["violations"] == 0
    assert res["median_ms"] > 0 and res["p95_ms"] >= res["min_ms"]
    assert sum(res["verdicts"].values()) + res["starts"] == 200
    assert res["gpus"] == 800 and res["nodes"] == 100 and res["pending"] == 200


def test_runs_below_one_still_time_one_plan():
    assert run_bench(gpus=80, pending=5, running=3, runs=0)["runs"] == 1


def test_bench_cli_prints_one_json_object(capsys):
    assert (
        main(["--gpus", "400", "--pending", "50", "--running", "40", "--runs", "1", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert {"median_ms", "p95_ms", "runs"} <= set(out)


def test_bench_cli_prints_two_human_lines(capsys):
    assert main(["--gpus", "160", "--pending", "20", "--running", "10", "--runs", "1"]) == 0
    first, verdicts = capsys.readouterr().out.splitlines()
    assert first.startswith("160 GPUs / 20 pending / 10 running") and "0 violations" in first
    assert verdicts.startswith("verdicts: ")


def test_bench_cli_fails_when_the_plan_breaks_a_rule(monkeypatch, capsys):
    monkeypatch.setattr(engine_bench, "check_plan", lambda snapshot, decided: ["broken"])
    assert main(["--gpus", "80", "--pending", "5", "--running", "3", "--runs", "1"]) == 1
    assert "1 violations" in capsys.readouterr().out


def test_python_m_bench_engine_runs_without_django():
    out = run_without_django(
        "bench.engine", "--gpus", "80", "--pending", "5", "--running", "3", "--runs", "1", "--json"
    )
    assert json.loads(out)["gpus"] == 80


def test_bench_snapshot_is_realistic_and_deterministic(snapshot):
    a = snapshot
    assert a == build_snapshot(2000, 300, 400, seed=1)
    assert a != build_snapshot(2000, 300, 400, seed=2)
    assert len(a.nodes) == 250
    assert {n.rack for n in a.nodes} and any(not n.rdma for n in a.nodes)
    assert {j.tier for j in a.pending} == set(Tier)
    sizes = {j.gpus for j in a.pending}
    assert min(sizes) == 1 and max(sizes) >= 128
    free = sum(len(n.free_gpus) for n in a.nodes)
    assert free < 0.3 * 2000  # a busy, fragmented cluster
    assert check_plan(a, plan(a, BENCH_NOW)) == []


def test_running_jobs_hold_exactly_the_gpus_missing_from_their_nodes(snapshot):
    held: Counter = Counter()
    for job in snapshot.running:
        assert job.gpus == sum(len(slot.gpus) for slot in job.placement)
        for slot in job.placement:
            for gpu in slot.gpus:
                held[(slot.node, gpu)] += 1
    assert set(held.values()) == {1}, "no GPU is held twice"
    for node in snapshot.nodes:
        mine = {g for (name, g) in held if name == node.name}
        assert mine.isdisjoint(node.free_gpus)
        assert len(mine) + len(node.free_gpus) == NODE_GPUS
        if node.state != "ready":
            assert not mine, "work is only placed on nodes in service"


def test_the_layout_has_racks_blocks_and_special_racks(snapshot):
    nodes = snapshot.nodes
    racks = Counter(n.rack for n in nodes)
    assert max(racks.values()) == RACK_NODES and len(racks) == 8
    assert len({n.block for n in nodes}) == 2  # four racks per block
    assert {n.gpu_model for n in nodes} == {"H100", "A100"}
    assert any(n.inference for n in nodes) and any(not n.rdma for n in nodes)
    out = sum(n.state != "ready" for n in nodes)
    assert 0 < out < 0.1 * len(nodes)


def test_a_small_cluster_has_no_special_racks():
    small = build_snapshot(64, 10, 4, seed=0)
    assert len(small.nodes) == 8
    assert all(n.rdma and not n.inference and n.gpu_model == "H100" for n in small.nodes)


def test_jobs_and_queues_are_consistent(snapshot):
    queues = {q.name: q for q in snapshot.queues}
    lines = {line.name for line in snapshot.lines}
    assert len(queues) == 4 * len(lines)
    jobs = [*snapshot.pending, *snapshot.running]
    assert len({j.id for j in jobs}) == len(jobs), "ids are unique"
    for job in jobs:
        queue = queues[job.queue]
        assert queue.line == job.line and queue.tier == job.tier
    assert len(snapshot.pending) == 300 and 0 < len(snapshot.running) <= 400
    assert all(j.submitted_at <= BENCH_NOW for j in snapshot.pending)
    assert snapshot.policy == PolicyConfig.preset("full")  # the live loop's


@pytest.mark.parametrize("gpus", [8, 16, 100, 1000])
def test_node_count_is_whole_eight_gpu_nodes(gpus):
    assert len(build_snapshot(gpus, 0, 0).nodes) == max(1, gpus // NODE_GPUS)


def test_a_switch_times_the_same_cluster_with_a_policy_option_off():
    """``--switch NAME=false``: the same snapshot, the option off (here preemption, which
    this cluster uses), for a ratio against the default in one run."""
    on = run_bench(gpus=800, pending=200, running=120, runs=1, seed=3)
    off = run_bench(gpus=800, pending=200, running=120, runs=1, seed=3,
                    switches={"preemption": False})  # fmt: skip
    assert on["preemptions"] > 0 and off["preemptions"] == 0


@pytest.mark.parametrize(
    "bad",
    ["nope=true", "swap_quota=maybe", "max_reservations=false", "defragment_nodes=-1",
     "defragment_nodes=1.5", "grace_seconds=60"],
)  # fmt: skip
def test_a_switch_must_name_a_boolean_or_whole_number_policy_option(bad, capsys):
    with pytest.raises(SystemExit):
        main(["--gpus", "80", "--pending", "5", "--running", "3", "--runs", "1", "--switch", bad])
    assert "--switch takes NAME=true|false" in capsys.readouterr().err


def test_a_whole_number_switch_sets_it(monkeypatch, capsys):
    """``--switch defragment_nodes=2`` reaches the bench as the number 2, beside a boolean
    one, and the plan timed with them is valid."""
    import bench.engine as engine

    seen: list[dict] = []
    real = engine.run_bench

    def spy(*args):
        seen.append(args[6])
        return real(*args)

    monkeypatch.setattr(engine, "run_bench", spy)
    main(["--gpus", "80", "--pending", "5", "--running", "3", "--runs", "1", "--json",
          "--switch", "defragment_nodes=2", "--switch", "swap_quota=false"])  # fmt: skip
    assert seen == [{"defragment_nodes": 2, "swap_quota": False}]
    assert type(seen[0]["defragment_nodes"]) is int
    assert '"violations": 0' in capsys.readouterr().out


def test_tight_quotas_make_the_plan_swap_and_the_default_cluster_does_not(capsys):
    """``--tight-quotas``: every line at quota, so jobs that may not borrow start by quota
    swap; on the default cluster only the odd urgent job short of its line's quota swaps
    (instead of evicting). The plan is legal and the swap's eviction budget (when on) is
    among what refuses."""
    plain_snapshot = build_snapshot(2000, 600, 400, seed=2)
    plain_plan = plan(plain_snapshot, BENCH_NOW)
    tier_of = {j.id: j.tier for j in plain_snapshot.pending}
    assert {tier_of[s.job_id] for s in plain_plan.swaps} <= {Tier.URGENT}
    plain = run_bench(gpus=2000, pending=600, running=400, runs=1, seed=2)
    tight = run_bench(gpus=2000, pending=600, running=400, runs=1, seed=2, tight_quotas=True)
    assert plain["swaps"] == len(plain_plan.swaps) and not plain["tight_quotas"]
    assert tight["swaps"] > 5 * max(1, plain["swaps"])
    assert tight["violations"] == 0 and tight["tight_quotas"]
    s = engine_bench.tighten_quotas(build_snapshot(2000, 600, 400, seed=2))
    # the budget is the eviction cap's (both off by default)
    budget = dataclasses.replace(s.policy, swap_eviction_budget=True, borrow_cap=True)
    s = dataclasses.replace(s, policy=budget)
    refused = [v for v in plan(s, BENCH_NOW).verdicts.values()
               if v.details.get("borrow_refused") == "eviction_budget"]  # fmt: skip
    assert refused
    args = ["--gpus", "2000", "--pending", "600", "--running", "400", "--seed", "2", "--runs", "1"]
    assert main([*args, "--tight-quotas"]) == 0
    assert f"{tight['swaps']} swaps" in capsys.readouterr().out
