import pytest

from scheduling.simcore import PermanentError, Simulator, build_demo_cluster

from .helpers import QUIET, kinds, quiet_sim


def _busy_sim(seed: int, **config) -> Simulator:
    """16 uniform nodes, each filled by one 8-GPU job that would run 100 h."""
    from dataclasses import replace

    sim = Simulator(
        build_demo_cluster(nodes=16, nodes_per_rack=8, uniform=True),
        seed=seed,
        config=replace(QUIET, ended_job_retention_s=1e9, **config),
    )
    for i, name in enumerate(sim.nodes):
        sim.launch(f"j{i}", [(name, tuple(range(8)))], 100 * 3600)
    return sim


def _signature(events):
    return [(e.at, e.kind, e.job_id, e.node, e.reason, e.progress_s, e.gpus) for e in events]


def test_random_failures_are_seeded_and_reproducible():
    a = _busy_sim(7, job_failure_rate_per_gpu_hour=0.01)
    b = _busy_sim(7, job_failure_rate_per_gpu_hour=0.01)
    c = _busy_sim(8, job_failure_rate_per_gpu_hour=0.01)
    ea, eb, ec = a.advance(50 * 3600), b.advance(50 * 3600), c.advance(50 * 3600)
    failed = [e for e in ea if e.kind == "job.failed"]
    assert failed and all(e.reason == "random" for e in failed)
    assert _signature(ea) == _signature(eb)
    assert _signature(ea) != _signature(ec)


def test_random_failures_follow_the_rate_per_gpu_hour_and_keep_the_last_checkpoint():
    # 16 jobs x 8 GPUs x 0.01 /GPU-h: mean time to failure 12.5 h; P(survive 10 h) = e^-0.8.
    survived = 0
    for seed in range(20):
        sim = _busy_sim(seed, job_failure_rate_per_gpu_hour=0.01)
        events = sim.advance(10 * 3600)
        for e in events:
            if e.kind == "job.failed":
                # progress falls back to the last completed hourly checkpoint
                assert e.progress_s == max(0.0, ((e.at - 60) // 3600) * 3600)
                assert sim.observe().job(e.job_id).progress_s == e.progress_s
        survived += sum(j.state == "running" for j in sim.observe().jobs)
    assert 0.35 < survived / 320 < 0.55  # expected 0.449


def test_no_failures_at_rate_zero():
    sim = _busy_sim(1)
    assert "job.failed" not in kinds(sim.advance(100 * 3600))


def test_random_node_faults_are_seeded_reproducible_and_fail_jobs_on_the_node():
    a = _busy_sim(3, node_fault_rate_per_node_hour=0.02)
    b = _busy_sim(3, node_fault_rate_per_node_hour=0.02)
    ea, eb = a.advance(20 * 3600), b.advance(20 * 3600)
    assert _signature(ea) == _signature(eb)
    faults = [e for e in ea if e.kind == "node.fault"]
    assert faults
    for f in faults:
        assert f.reason in ("gpu_failure", "rdma_degraded", "node_down")
        assert a.nodes[f.node].health != "ok"
        for job_id in f.jobs:
            assert a.observe().job(job_id).state == "failed"


def test_gpu_failure_fails_the_jobs_on_the_node_keeping_their_checkpoints():
    sim = quiet_sim()
    sim.launch("a", [("r000-n00", (0, 1))], 100_000)
    sim.launch("b", [("r000-n00", (2,)), ("r000-n01", (0,))], 100_000)
    sim.launch("c", [("r000-n01", (1,))], 100_000)
    sim.advance(4000)  # checkpoints at 3600 done at 3660
    sim.inject_fault("gpu_failure", "r000-n00")
    events = sim.advance(0)
    assert [(e.kind, e.job_id, e.reason) for e in events] == [
        ("node.fault", None, "gpu_failure"),
        ("job.failed", "a", "gpu_failure"),
        ("job.failed", "b", "gpu_failure"),
    ]
    assert events[0].jobs == ("a", "b")
    obs = sim.observe()
    assert obs.node("r000-n00").health == "gpu_failure"
    assert obs.job("a").progress_s == 3600 and obs.job("b").state == "failed"
    assert obs.job("c").state == "running"
    assert obs.node("r000-n01").free_gpus == (0, *range(2, 8))  # b's other GPU is released


def test_node_down_fails_its_jobs_and_drops_its_stale_processes():
    sim = quiet_sim()
    sim.inject_fault("residual_process", "r000-n00", gpus=[5])
    sim.launch("a", [("r000-n00", (0,))], 100_000)
    sim.inject_fault("node_down", "r000-n00")
    assert [e.kind for e in sim.advance(0)][-2:] == ["node.fault", "job.failed"]
    node = sim.observe().node("r000-n00")
    assert node.health == "down" and node.residual_gpus == () and node.jobs == ()


def test_rdma_degraded_fails_multi_node_jobs_only():
    sim = quiet_sim()
    sim.launch("single", [("r000-n00", (0,))], 100_000)
    sim.launch("multi", [("r000-n00", (1,)), ("r001-n00", (1,))], 100_000)
    sim.inject_fault("rdma_degraded", "r000-n00")
    sim.advance(10)
    obs = sim.observe()
    assert obs.node("r000-n00").health == "rdma_degraded"
    assert obs.job("single").state == "running"
    assert obs.job("multi").state == "failed" and obs.job("multi").end_reason == "rdma_degraded"


def test_rdma_cannot_degrade_on_a_node_without_rdma_and_unknown_kinds_are_refused():
    sim = Simulator(build_demo_cluster(nodes=200, nodes_per_rack=10), config=QUIET)
    plain = next(n for n in sim.nodes.values() if not n.rdma)
    with pytest.raises(PermanentError) as err:
        sim.inject_fault("rdma_degraded", plain.name)
    assert err.value.code == "invalid_fault"
    with pytest.raises(PermanentError):
        sim.inject_fault("meteor", plain.name)
    assert plain.health == "ok"


def test_the_worst_fault_wins_until_repair_which_also_reboots_away_stale_processes():
    sim = quiet_sim()
    sim.inject_fault("gpu_failure", "r000-n00")
    sim.inject_fault("rdma_degraded", "r000-n00")
    assert sim.nodes["r000-n00"].health == "gpu_failure"
    sim.nodes["r000-n00"].residual[3] = "old"
    sim.repair("r000-n00")
    assert kinds(sim.advance(0))[-1] == "node.repaired"
    node = sim.observe().node("r000-n00")
    assert node.health == "ok" and node.free_gpus == tuple(range(8))
    sim.launch("j", [("r000-n00", (3,))], 100)


def test_injected_residual_processes_hold_gpus_until_cleaned():
    sim = quiet_sim()
    sim.launch("a", [("r000-n00", (0, 1))], 100_000)
    sim.inject_fault("residual_process", "r000-n00", stale_job_id="old-7")
    events = sim.advance(0)
    left = [e for e in events if e.kind == "residual.left"]
    assert [(e.job_id, e.gpus) for e in left] == [("old-7", tuple(range(2, 8)))]
    node = sim.observe().node("r000-n00")
    assert node.free_gpus == () and node.residual_gpus == tuple((g, "old-7") for g in range(2, 8))
    with pytest.raises(PermanentError) as err:
        sim.launch("b", [("r000-n00", (4,))], 100)
    assert err.value.code == "gpu_busy" and "stale process" in str(err.value)

    assert sim.clean_residual("r000-n00") == 6
    assert sim.clean_residual("r000-n00") == 0
    assert [(e.kind, e.gpus) for e in sim.advance(0)] == [("residual.cleaned", tuple(range(2, 8)))]
    assert sim.observe().node("r000-n00").free_gpus == tuple(range(2, 8))
    sim.launch("b", [("r000-n00", (4,))], 100)


def test_residual_processes_left_by_ending_jobs_occupy_gpus_until_cleaned():
    sim = quiet_sim(residual_probability=1.0)
    sim.launch("a", [("r000-n00", (0, 1, 2, 3)), ("r000-n01", (0, 1))], 100)
    events = sim.advance(100)
    assert kinds(events) == ["job.launched", "job.succeeded", "residual.left", "residual.left"]
    held = {e.node: e.gpus for e in events if e.kind == "residual.left"}
    assert set(held) == {"r000-n00", "r000-n01"}
    assert set(held["r000-n00"]) <= {0, 1, 2, 3} and held["r000-n00"]
    obs = sim.observe()
    assert obs.job("a").state == "succeeded"
    for name, gpus in held.items():
        assert dict(obs.node(name).residual_gpus) == {g: "a" for g in gpus}
        assert not set(gpus) & set(obs.node(name).free_gpus)
    sim.advance(3600)
    assert dict(sim.observe().node("r000-n00").residual_gpus)  # still there an hour later
    assert sim.clean_residual("r000-n00") == len(held["r000-n00"])
    assert sim.observe().node("r000-n00").free_gpus == tuple(range(8))


def test_residual_processes_are_drawn_at_the_configured_probability():
    sim = quiet_sim(nodes=64, nodes_per_rack=8, residual_probability=0.25)
    left = 0
    for round_ in range(10):
        for i, name in enumerate(sim.nodes):
            sim.clean_residual(name)
            sim.launch(f"j{round_}-{i}", [(name, (0,))], 10)
        left += kinds(sim.advance(10)).count("residual.left")
    assert 120 < left < 200  # 640 job ends x 0.25 = 160 expected
