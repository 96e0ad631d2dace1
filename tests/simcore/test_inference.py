from dataclasses import replace

import pytest

from scheduling.simcore import PermanentError, SimNode, Simulator, build_demo_cluster

from .helpers import QUIET

DAY = 86400.0


def _inference_sim(noise: float = 0.0, **config) -> Simulator:
    nodes = [
        SimNode("inf-0", "r000", "b0", "L40S", 48, inference=True),
        SimNode("inf-1", "r000", "b0", "L40S", 48, inference=True),
        SimNode("trn-0", "r001", "b0", "H100", 80),
    ]
    cfg = replace(
        QUIET,
        inference_trough=0.25,
        inference_peak=1.0,
        inference_peak_hour=14.0,
        inference_noise=noise,
        **config,
    )
    return Simulator(nodes, seed=5, config=cfg)


def test_inference_load_follows_a_daily_curve_peaking_in_the_afternoon():
    sim = _inference_sim()
    night = sim.inference_load("inf-0", 2 * 3600)
    afternoon = sim.inference_load("inf-0", 14 * 3600)
    assert night < 0.3 and afternoon > 0.95
    for h in range(24):
        t = h * 3600.0
        assert sim.inference_load("inf-0", t) == pytest.approx(sim.inference_load("inf-0", t + DAY))
    assert sim.inference_load("trn-0", 14 * 3600) == 0.0  # not in the pool
    assert sim.inference_gpus_wanted("inf-0", 14 * 3600) == 8
    assert sim.inference_gpus_wanted("inf-0", 2 * 3600) == 2


def test_inference_noise_is_smooth_bounded_deterministic_and_leaves_the_rng_alone():
    sim = _inference_sim(noise=0.1)
    rng_before = sim.rng.getstate()
    loads = [sim.inference_load("inf-0", t) for t in range(0, int(2 * DAY), 60)]
    assert sim.rng.getstate() == rng_before
    assert all(0.0 <= x <= 1.0 for x in loads)
    assert max(abs(a - b) for a, b in zip(loads, loads[1:], strict=False)) < 0.02
    quiet = _inference_sim(noise=0.0)
    assert any(
        abs(sim.inference_load("inf-0", t) - quiet.inference_load("inf-0", t)) > 0.01
        for t in range(0, int(DAY), 3600)
    )
    assert loads == [
        _inference_sim(noise=0.1).inference_load("inf-0", t) for t in range(0, int(2 * DAY), 60)
    ]
    # nodes do not move in lockstep
    assert sim.inference_load("inf-0", 10 * 3600) != sim.inference_load("inf-1", 10 * 3600)


def test_inference_takes_the_highest_idle_gpus_and_they_are_not_free_for_training():
    sim = _inference_sim()
    sim.advance(2 * 3600)
    wanted = sim.inference_gpus_wanted("inf-0")
    node = sim.observe().node("inf-0")
    assert node.inference_wanted == wanted == 2
    assert node.inference_gpus == (6, 7) and node.free_gpus == tuple(range(6))
    with pytest.raises(PermanentError) as err:
        sim.launch("t", [("inf-0", (7,))], 100)
    assert err.value.code == "gpu_busy" and "inference" in str(err.value)
    sim.launch("t", [("inf-0", (0, 1, 2, 3, 4, 5))], 100)
    node = sim.observe().node("inf-0")
    assert node.free_gpus == () and node.inference_gpus == (6, 7) and node.inference_shortfall == 0


def test_rising_inference_load_asks_training_on_the_node_to_yield_then_clears():
    sim = _inference_sim(inference_tick_s=300)
    sim.advance(2 * 3600)
    sim.launch("t1", [("inf-0", (0, 1, 2))], 10 * DAY)
    sim.launch("t2", [("inf-0", (3, 4, 5))], 10 * DAY)
    sim.launch("far", [("trn-0", tuple(range(8)))], 10 * DAY)
    events = sim.advance(12 * 3600)
    pressure = [e for e in events if e.kind == "inference.pressure"]
    assert pressure, "the morning rise must put pressure on the training jobs"
    first = pressure[0]
    assert first.node == "inf-0" and first.jobs == ("t1", "t2")
    assert first.at % 300 == 0
    assert first.gpus_needed == sim.inference_gpus_wanted("inf-0", first.at) - 2 > 0
    # one event per change of the shortfall, not one per tick
    needs = [e.gpus_needed for e in pressure]
    assert all(a != b for a, b in zip(needs, needs[1:], strict=False))
    assert needs[-1] == 6  # at the peak inference wants all 8 GPUs
    assert sim.observe().node("inf-0").inference_shortfall == 6

    sim.request_checkpoint_stop("t1", grace_s=600)
    sim.request_checkpoint_stop("t2", grace_s=600)
    events = sim.advance(3600)
    assert "inference.pressure" not in [e.kind for e in events]
    node = sim.observe().node("inf-0")
    assert node.jobs == () and node.inference_gpus == tuple(range(8)) and node.free_gpus == ()


def test_no_pressure_events_without_training_on_inference_nodes():
    sim = _inference_sim(noise=0.1)
    sim.launch("far", [("trn-0", tuple(range(8)))], 10 * DAY)
    assert all(e.kind != "inference.pressure" for e in sim.advance(2 * DAY))


def test_unhealthy_inference_nodes_serve_nothing():
    sim = _inference_sim()
    sim.advance(14 * 3600)
    sim.inject_fault("node_down", "inf-1")
    node = sim.observe().node("inf-1")
    assert node.inference_wanted == 0 and node.inference_gpus == ()


def test_demo_cluster_inference_pool_is_busy_by_day_and_idle_by_night():
    sim = Simulator(build_demo_cluster(nodes=200, nodes_per_rack=10), seed=1)
    pool = [n.name for n in sim.nodes.values() if n.inference]
    assert len(pool) == 10
    by_night = sum(sim.inference_gpus_wanted(n, 2 * 3600) for n in pool)
    by_day = sum(sim.inference_gpus_wanted(n, 14 * 3600) for n in pool)
    assert by_day > 3 * by_night
