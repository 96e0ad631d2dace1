"""Trace replay on small slices of each trace: the engine and the simulator core in virtual time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay import (
    POLICIES,
    TIMING_KEYS,
    Replay,
    ReplayConfig,
    build_layout,
    load_workload,
    run_replay,
)
from replay.pools import DONE

PHILLY_DAY = "2017-10-02:2017-10-03"
ITP_SLICE = "0:6h"  # 310 jobs of the 10 ITP clusters


def replay(
    workload, policy: str, pool_gpus: int | None = None, check: bool = True, **kw
) -> tuple[Replay, dict]:
    cfg = ReplayConfig(
        trace=workload.trace,
        policy=policy,
        pool_gpus=pool_gpus,
        window=workload.window_label,
        check=check,
        **kw,
    )
    r = Replay(workload, build_layout(workload, pool_gpus), cfg)
    return r, r.run()


def without_timing(result: dict) -> dict:
    out = json.loads(json.dumps(result))
    for key in TIMING_KEYS:
        out["overall"].pop(key)
    return out


@pytest.fixture(scope="module")
def philly_day():
    return load_workload("philly", PHILLY_DAY)


@pytest.fixture(scope="module")
def itp_slice():
    return load_workload("itp", ITP_SLICE)


@pytest.fixture(scope="module")
def philly_runs(philly_day):
    return {p: replay(philly_day, p) for p in POLICIES}


@pytest.fixture(scope="module")
def itp_contended(itp_slice):
    # 310 jobs asking for ~2x what 128 GPUs give: a long queue forms.
    return {p: replay(itp_slice, p, pool_gpus=128) for p in ("fifo", "backfill", "full")}


def assert_sound(r: Replay, result: dict) -> None:
    """Every job ran to completion, never before its submit time, for at least its duration."""
    o = result["overall"]
    assert o["finished"] == o["jobs"] == len(r.jobs)
    assert o["rejected"] == o["unfinished"] == 0
    for j in r.jobs:
        assert j.state == DONE
        assert j.first_start >= j.submit
        assert j.finish - j.first_start >= j.duration - 1e-6
        assert j.runs == 1 + j.evictions + j.moves  # a move (consolidation) restarts it too
    assert 0.0 < o["utilization"] <= 1.0
    assert 0.0 <= o["eviction_ratio"] <= 1.0
    # The replay's mirror of the cluster agrees with the simulator: all free again.
    free = {n.name: set(n.free_gpus) for n in r.sim.observe().nodes}
    assert all(free[n.name] == set(range(n.gpus_total)) for n in r.sim.nodes.values())
    for pool in r.pools.values():
        assert pool.free_total == pool.capacity and not pool.pending and not pool.running


# --------------------------------------------------------------------------- Philly


def test_philly_day_replays_every_job_under_every_policy(philly_runs, philly_day):
    assert len(philly_day.jobs) == 1353
    for policy, (r, result) in philly_runs.items():
        assert_sound(r, result)
        assert result["policy"] == policy
        assert result["layout"] == "isolated"
        assert result["overall"]["capacity_gpus"] == 2816
        assert set(result["per_queue"]) == set(philly_day.queues)
        assert sum(q["jobs"] for q in result["per_queue"].values()) == 1353
        for st in result["per_queue"].values():
            assert st["utilization"] <= 1.0
            if st["backlog_utilization"] is not None:
                assert st["backlog_utilization"] <= 1.0


def test_fifo_and_priority_never_preempt(philly_runs):
    for policy in ("fifo", "priority", "backfill", "oracle-sjf"):
        o = philly_runs[policy][1]["overall"]
        assert o["preemptions"] == o["evictions"] == 0
        assert o["eviction_ratio"] == 0.0 and o["jobs_demoted"] == 0


def test_backfill_cuts_head_of_line_waiting_on_philly(philly_runs):
    fifo = philly_runs["fifo"][1]["overall"]
    backfill = philly_runs["backfill"][1]["overall"]
    assert backfill["avg_queue_s"] < fifo["avg_queue_s"] / 2
    assert backfill["utilization"] >= fifo["utilization"]


def test_without_preemption_busy_gpu_time_is_exactly_the_work(philly_runs, philly_day):
    work = sum(j.gpus * j.duration_s for j in philly_day.jobs)
    for policy in ("fifo", "backfill"):
        r, _ = philly_runs[policy]
        assert sum(r.meter.buckets) == pytest.approx(work, rel=1e-9)


def test_jobs_wait_for_a_cycle_boundary(philly_runs):
    r, _ = philly_runs["backfill"]
    for j in r.jobs:
        assert j.first_start % 60.0 == 0.0
    assert max(j.first_start - j.submit for j in r.jobs if j.queue == "6214e9") < 3600


def test_same_seed_same_json_and_another_seed_another_mapping(philly_day):
    _, a = replay(philly_day, "full", check=False)
    _, b = replay(philly_day, "full", check=False)
    assert json.dumps(without_timing(a), sort_keys=True) == json.dumps(
        without_timing(b), sort_keys=True
    )
    other = load_workload("philly", PHILLY_DAY, seed=1)
    assert [j.tier for j in other.jobs] != [j.tier for j in philly_day.jobs]


def test_run_replay_is_deterministic_end_to_end():
    cfg = ReplayConfig(trace="itp", policy="priority", window="0:2h", seed=3)
    assert without_timing(run_replay(cfg)) == without_timing(run_replay(cfg))


# --------------------------------------------------------------------------- ITP


def test_itp_slice_contended_pool(itp_contended, itp_slice):
    assert len(itp_slice.jobs) == 310
    for r, result in itp_contended.values():
        assert_sound(r, result)
        assert result["layout"] == "shared" and result["overall"]["capacity_gpus"] == 128
    fifo = itp_contended["fifo"][1]["overall"]
    backfill = itp_contended["backfill"][1]["overall"]
    full = itp_contended["full"][1]["overall"]
    assert fifo["preemptions"] == 0 and backfill["preemptions"] == 0
    # Backfill uses capacity that head-of-line blocking leaves idle.
    assert backfill["utilization"] > fifo["utilization"]
    assert backfill["backlog_utilization"] > fifo["backlog_utilization"]
    assert backfill["avg_queue_s"] < fifo["avg_queue_s"]
    assert full["evictions"] == full["preemptions"]
    assert full["runs"] == full["jobs"] + full["evictions"] + full["moves"]


def test_consolidation_moves_are_counted_apart_from_evictions(itp_contended):
    """Under ``full`` gangs wait on this contended slice and jobs are moved for them: each
    move restarts its job (a run) but is no eviction, and the eviction ratio is over the
    runs not started by a move (as before #19); ``backfill`` never moves anything."""
    r, result = itp_contended["full"]
    o = result["overall"]
    assert o["migrations"] > 0
    assert o["moves"] == o["migrations"] == sum(j.moves for j in r.jobs)
    assert o["jobs_moved"] == sum(1 for j in r.jobs if j.moves) > 0
    assert o["eviction_ratio"] == pytest.approx(o["evictions"] / (o["runs"] - o["moves"]), abs=1e-4)
    assert sum(q["migrations"] for q in result["per_queue"].values()) == o["migrations"]
    for policy in ("fifo", "backfill"):
        other = itp_contended[policy][1]["overall"]
        assert other["migrations"] == other["moves"] == 0


def test_eviction_ratio_in_gpu_time_is_the_portals_r4(itp_contended):
    """Beside evictions per run, the replay reports R4's ratio as the portal computes it:
    GPU time of the runs that ended evicted over all GPU time given. Without evictions every
    job is given exactly its GPUs x its duration; with them, at least that (work lost since
    the last checkpoint is redone)."""
    r, result = itp_contended["backfill"]
    assert result["overall"]["eviction_ratio_gpu_time"] == 0.0
    for j in r.jobs:
        assert j.gpu_s == pytest.approx(j.gpus * j.duration) and j.evicted_gpu_s == 0.0
    r, result = itp_contended["full"]
    o = result["overall"]
    given = sum(j.gpu_s for j in r.jobs)
    evicted = sum(j.evicted_gpu_s for j in r.jobs)
    assert o["evictions"] > 0 and 0.0 < o["eviction_ratio_gpu_time"] < 1.0
    assert o["eviction_ratio_gpu_time"] == round(evicted / given, 4)
    assert given >= sum(j.gpus * j.duration for j in r.jobs) - 1e-6
    for j in r.jobs:
        assert (j.evicted_gpu_s > 0) == (j.evictions > 0)
        assert j.gpu_s >= j.gpus * j.duration - 1e-6  # checkpointed work is not redone
    per_queue = result["per_queue"].values()
    assert all(0.0 <= q["eviction_ratio_gpu_time"] <= 1.0 for q in per_queue)


def test_itp_isolated_layout(itp_slice):
    r, result = replay(itp_slice, "backfill")
    assert_sound(r, result)
    layout = build_layout(itp_slice)
    assert result["overall"]["capacity_gpus"] == layout.total_gpus
    for q, st in result["per_queue"].items():
        assert st["capacity_gpus"] == layout.capacity[q]
        assert st["capacity_gpus"] % 8 == 0


# --------------------------------------------------------------------------- Alibaba

ALIBABA_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


def write_alibaba(tmp_path: Path) -> Path:
    """Synthetic pods in the upstream OpenB schema (the real file is not vendored)."""
    rows = []
    for i in range(200):
        gpus = (1, 1, 2, 4, 8)[i % 5]
        created = 1000 + 97 * i
        run = 600 + (i * 7919) % 20000
        qos = ("LS", "BE", "Burstable", "Guaranteed")[i % 4]
        rows.append(
            f"pod-{i:04d},8000,16384,{gpus},1000,,{qos},Succeeded,{created},"
            f"{created + 5 + run},{created + 5}"
        )
    rows.append("pod-frac,4000,8192,1,500,,LS,Running,50,900,50")  # GPU sharing: skipped
    path = tmp_path / "openb_pod_list_default.csv"
    path.write_text("\n".join([ALIBABA_HEADER, *rows]) + "\n")
    return path


def test_alibaba_format_slice(tmp_path):
    path = write_alibaba(tmp_path)
    w = load_workload(str(path))
    assert w.trace == "alibaba" and len(w.jobs) == 200
    assert w.jobs[0].submit_s == 0.0
    assert set(w.queues) == {"BE", "Burstable", "Guaranteed", "LS"}
    for policy in ("fifo", "full"):
        r, result = replay(w, policy, pool_gpus=32)
        assert_sound(r, result)


# --------------------------------------------------------------------------- oracle SJF

ITP_HEADER = "cluster,job_id,submission_time,duration,num_gpu"


def write_itp(tmp_path: Path, rows: list[tuple]) -> Path:
    """A tiny ITP-format trace; rows ``(id, submit, duration, gpus)`` run on cluster ``c1``,
    rows ``(cluster, id, submit, duration, gpus)`` name their own."""
    lines = [ITP_HEADER] + [
        ",".join(map(str, row if len(row) == 5 else ("c1", *row))) for row in rows
    ]
    path = tmp_path / "tiny_itp.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_oracle_sjf_runs_the_shortest_waiting_job_first(tmp_path):
    # One isolated 8-GPU node: "first" holds it; three more wait and start one at a time.
    path = write_itp(
        tmp_path,
        [("first", 0, 1000, 8), ("long", 10, 5000, 8), ("mid", 20, 3000, 8), ("short", 30, 600, 8)],
    )
    w = load_workload(str(path), window="0:1d")
    starts = {}
    for policy in ("fifo", "oracle-sjf"):
        r, result = replay(w, policy)
        assert result["overall"]["capacity_gpus"] == 8
        assert_sound(r, result)
        order = sorted(r.jobs, key=lambda j: j.first_start)
        starts[policy] = [j.key for j in order]
    assert starts["fifo"] == ["first", "long", "mid", "short"]
    assert starts["oracle-sjf"] == ["first", "short", "mid", "long"]


def two_tenants(tmp_path: Path):
    """Tenants A and B with a quota of one 8-GPU node each (in a 16-GPU pool): A's a7
    holds its node 0..10000 and a8 (from 10) wants another; B's b11 comes at 3000 for
    1000 s. The seeded mapping makes a7 and a8 preemptible experiments, b11 a core job."""
    path = write_itp(
        tmp_path,
        [("A", "a7", 0, 10000, 8), ("A", "a8", 10, 10000, 8), ("B", "b11", 3000, 1000, 8)],
    )
    return load_workload(str(path), window="0:1d")


def test_full_borrows_idle_quota_and_reclaims_it_by_graceful_preemption(tmp_path):
    w = two_tenants(tmp_path)
    assert [(j.id, j.tier, j.preemptible) for j in w.jobs] == [
        ("a7", "experiment", True),
        ("a8", "experiment", True),
        ("b11", "core", False),
    ]
    assert build_layout(w, 16).quota == {"A": 8, "B": 8}
    got = {}
    for policy in ("backfill", "full"):
        r, result = replay(w, policy, pool_gpus=16)
        assert_sound(r, result)
        got[policy] = ({j.key: (j.first_start, j.finish, j.runs) for j in r.jobs}, result)
    jobs, result = got["backfill"]
    # Without borrowing a8 waits for A's own node although B's sits idle.
    assert jobs == {"a7": (0, 10000, 1), "a8": (10020, 20020, 1), "b11": (3000, 4000, 1)}
    assert result["overall"]["borrowed_starts"] == 0
    jobs, result = got["full"]
    # a8 borrows B's idle node at once (B has no history yet); when b11 comes, a8
    # checkpoints (60 s) and stops, and b11 starts. When b11 ends a8 does not borrow the
    # node again (#19): B needed it within the last hour, so B's demand forecast keeps it
    # for B for longer than a8's predicted runtime (12 h, nothing has finished yet). a8
    # resumes on A's own node when a7 ends, with the 2,940 s of progress it kept.
    assert jobs == {
        "a7": (0, 10000, 1),
        "a8": (60, 10020 + 10000 - 2940, 2),
        "b11": (3060, 4060, 1),
    }
    o = result["overall"]
    assert o["borrowed_starts"] == 1 and o["preemptions"] == o["evictions"] == 1
    assert result["per_queue"]["A"]["preemptions"] == 1
    assert result["per_queue"]["A"]["eviction_ratio"] == pytest.approx(1 / 3, abs=1e-4)


def test_fifo_keeps_submit_order_and_starts_on_cycle_boundaries(tmp_path):
    path = write_itp(tmp_path, [("a", 0, 1000, 8), ("b", 5, 100, 8), ("c", 6, 100, 4)])
    w = load_workload(str(path), window="0:1d")
    r, _ = replay(w, "fifo")
    got = {j.key: (j.first_start, j.finish) for j in r.jobs}
    # a runs 0..1000; b waits for the first cycle boundary after it (1020); c needs
    # only 4 GPUs but may not pass b under strict FIFO, so it starts after b, at 1140.
    assert got == {"a": (0.0, 1000.0), "b": (1020.0, 1120.0), "c": (1140.0, 1240.0)}


def test_backfill_lets_a_short_job_use_the_gap(tmp_path):
    # a holds 4 of 8 GPUs for a long time; b needs 8 and waits; c (4 GPUs, short) can
    # run beside a without delaying b only if its predicted runtime is known to be short:
    # the predictor learns it from three earlier runs of the same shape.
    rows = [(f"h{i}", i, 100, 4) for i in range(3)]
    rows += [("a", 300, 20000, 4), ("b", 310, 1000, 8), ("c", 320, 100, 4)]
    path = write_itp(tmp_path, rows)
    w = load_workload(str(path), window="0:1d")
    got = {}
    for policy in ("fifo", "backfill"):
        r, result = replay(w, policy)  # one isolated pool of one 8-GPU node, no quota
        assert_sound(r, result)
        got[policy] = {j.key: j.first_start for j in r.jobs}
    assert got["fifo"]["c"] > got["fifo"]["b"]  # head-of-line: c waits behind b
    assert got["backfill"]["c"] < got["backfill"]["b"]  # c slips into the gap
    assert got["backfill"]["b"] == got["fifo"]["b"]  # ... without delaying b


# --------------------------------------------------------------------------- shortcuts


def decisions(r: Replay) -> list[tuple]:
    return [(j.key, j.first_start, j.finish, j.runs) for j in r.jobs]


@pytest.mark.parametrize("policy", ["fifo", "priority", "backfill", "full"])
def test_the_shortcuts_decide_exactly_as_planning_every_waiting_job(itp_slice, policy):
    # Shared pool: the priority order depends on the lines' shares, recomputed per
    # plan; quotas are oversubscribed (the ITP slice's quotas add up to 2,320 GPUs).
    slow, _ = replay(itp_slice, policy, pool_gpus=128, shortcuts=False, check=False)
    fast, result = replay(itp_slice, policy, pool_gpus=128, plan_prefix=8, check=False)
    assert result["overall"]["max_waiting_jobs"] > 100  # the prefix really was cut short
    assert result["overall"]["plan_skips"] > 0
    assert decisions(fast) == decisions(slow)


def test_the_shortcuts_are_exact_when_quotas_bind(tmp_path):
    path = write_itp(
        tmp_path,
        [("A", f"a{i}", 30 * i, 3000 + 500 * (i % 7), 1 + i % 8) for i in range(60)]
        + [("B", f"b{i}", 45 * i, 2000 + 700 * (i % 5), 1 + i % 4) for i in range(40)],
    )
    w = load_workload(str(path), window="0:2d")
    assert build_layout(w, 32).quota == {"A": 16, "B": 8}  # 24 of the 32 GPUs
    for policy in ("fifo", "priority", "backfill", "full"):
        slow, _ = replay(w, policy, pool_gpus=32, shortcuts=False, check=False)
        fast, _ = replay(w, policy, pool_gpus=32, plan_prefix=4)
        assert decisions(fast) == decisions(slow), policy


def test_planning_only_on_events_stays_close_to_planning_every_cycle(itp_slice):
    # replan_s=60 plans every waiting pool every cycle: the reference. Without backfill
    # a plan depends only on the state, so skipping unchanged cycles is exact;
    # backfill also depends on ``now`` (reservations move as time passes), so skipping
    # them shifts a few starts, and the run diverges a little from there.
    every = replay(itp_slice, "backfill", pool_gpus=128, replan_s=60, check=False)[1]
    default = replay(itp_slice, "backfill", pool_gpus=128, check=False)[1]
    events = replay(itp_slice, "backfill", pool_gpus=128, replan_s=0, check=False)[1]
    ref = every["overall"]
    for other in (default["overall"], events["overall"]):
        assert other["plan_calls"] < ref["plan_calls"] / 2
        assert other["avg_queue_s"] == pytest.approx(ref["avg_queue_s"], rel=0.05)
        assert other["utilization"] == pytest.approx(ref["utilization"], abs=0.005)
    f_every = replay(itp_slice, "fifo", pool_gpus=128, replan_s=60, check=False)[0]
    f_events = replay(itp_slice, "fifo", pool_gpus=128, replan_s=0, check=False)[0]
    assert decisions(f_every) == decisions(f_events)
