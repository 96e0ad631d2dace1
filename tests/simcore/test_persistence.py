import json

import pytest

from bench.simcore import build_loaded_simulator
from scheduling.simcore import SimConfig, Simulator, build_demo_cluster

# Busy enough that every kind of happening occurs within a few virtual hours.
LIVELY = SimConfig(
    job_failure_rate_per_gpu_hour=0.01,
    node_fault_rate_per_node_hour=0.01,
    residual_probability=0.3,
    inference_tick_s=120,
)


def _lively_sim() -> Simulator:
    sim = Simulator(build_demo_cluster(nodes=80, nodes_per_rack=8, seed=3), seed=11, config=LIVELY)
    names = list(sim.nodes)
    obs = sim.observe()
    for i in range(60):
        name = names[i]
        free = obs.node(name).free_gpus  # inference nodes keep some GPUs even at night
        gpus = free[:4] if i % 2 else free
        sim.launch(
            f"j{i}",
            [(name, gpus)],
            true_duration_s=1800 + 997 * i,
            progress_s=(i % 3) * 300,
            checkpoint_interval_s=600 + 60 * (i % 5),
            checkpoint_cost_s=30 + i,
        )
    sim.launch("multi", [(names[70], tuple(range(8))), (names[71], tuple(range(8)))], 40_000)
    return sim


def _signature(events):
    return [
        (e.at, e.kind, e.job_id, e.node, e.reason, e.progress_s, e.gpus, e.jobs, e.gpus_needed)
        for e in events
    ]


def _drive(sim: Simulator, steps: int) -> list:
    """Advance in uneven steps, reacting like a portal would (stops, kills, cleaning, relaunches)."""
    out = []
    for step in range(steps):
        events = sim.advance(37.5 * (1 + step % 7))
        out.extend(_signature(events))
        for e in events:
            if e.kind == "inference.pressure":
                for job_id in e.jobs:
                    sim.request_checkpoint_stop(job_id, grace_s=45)
            elif e.kind == "residual.left" and step % 2:
                sim.clean_residual(e.node)
        if step % 25 == 5:
            running = sorted(j.job_id for j in sim.observe().jobs if j.state == "running")
            if running:
                sim.kill(running[0])
        if step % 40 == 10:
            free = next(
                (n for n in sim.observe().nodes if len(n.free_gpus) >= 2 and n.health == "ok"),
                None,
            )
            if free is not None and not free.cordoned:
                sim.launch(f"late{step}", [(free.name, free.free_gpus[:2])], 5000)
    out.append(sim.observe())
    return out


def test_state_is_plain_json_and_round_trips_exactly():
    sim = _lively_sim()
    sim.advance(5000)
    sim.kill("multi")  # leaves buffered, not yet returned events
    data = sim.to_dict()
    text = json.dumps(data, allow_nan=False)  # strict JSON: fits a jsonb column
    restored = Simulator.from_dict(json.loads(text))
    assert restored.to_dict() == data
    assert restored.observe() == sim.observe()
    assert restored.rng.getstate() == sim.rng.getstate()


def test_a_restored_simulator_has_exactly_the_same_future():
    sim = _lively_sim()
    _drive(sim, 120)  # mid-run: stopping jobs, stale processes, faults, pressure
    sim.request_checkpoint_stop("multi", grace_s=10)  # buffered work in flight
    restored = Simulator.from_dict(json.loads(json.dumps(sim.to_dict())))

    original_future = _drive(sim, 400)
    restored_future = _drive(restored, 400)
    assert original_future == restored_future
    kinds_seen = {row[1] for row in original_future[:-1]}
    assert {
        "job.succeeded",
        "job.failed",
        "job.checkpointed",
        "job.stopped",
        "residual.left",
        "node.fault",
        "inference.pressure",
    } <= kinds_seen


def test_the_future_depends_on_the_rng_state():
    sim = _lively_sim()
    _drive(sim, 50)
    data = sim.to_dict()
    tampered = json.loads(json.dumps(data))
    tampered["rng"] = json.loads(json.dumps(Simulator([], seed=999).to_dict()["rng"]))
    assert _drive(Simulator.from_dict(data), 300) != _drive(Simulator.from_dict(tampered), 300)


def test_unknown_state_versions_are_refused():
    data = Simulator(build_demo_cluster(nodes=2, uniform=True)).to_dict()
    data["version"] = 999
    with pytest.raises(ValueError):
        Simulator.from_dict(data)


def test_demo_scale_state_round_trips_exactly():
    """At demo scale (1,250 nodes, 3,000 jobs) the state survives JSON unchanged.

    Speed is measured by ``python -m bench.simcore``, not asserted here.
    """
    sim = build_loaded_simulator(running=2000, ended=1000)
    assert len(sim.nodes) == 1250 and len(sim.jobs) == 3000
    data = sim.to_dict()
    assert Simulator.from_dict(json.loads(json.dumps(data))).to_dict() == data
