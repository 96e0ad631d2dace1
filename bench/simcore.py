"""Time the simulator core at demo scale: ``python -m scheduling.simcore.bench``.

1,250 nodes (10,000 GPUs), about 2,000 running jobs and 1,000 ended ones.
Prints median timings in milliseconds as JSON.
"""

from __future__ import annotations

import json
import statistics
import time

from .cluster import build_demo_cluster
from .simulator import Simulator


def build_loaded_simulator(running: int = 2000, ended: int = 1000, seed: int = 0) -> Simulator:
    """A demo cluster with ``ended`` finished jobs and ``running`` jobs (1-8 GPUs, one node each)."""
    sim = Simulator(build_demo_cluster(seed=seed), seed=seed)
    rng = sim.rng
    names = [n.name for n in sim.nodes.values() if not n.inference]
    free = {name: list(range(8)) for name in names}
    seq = 0

    def place_one(duration: float) -> None:
        nonlocal seq
        for _ in range(100):
            name = rng.choice(names)
            k = rng.choice((1, 2, 4, 8))
            if len(free[name]) >= k:
                gpus = tuple(free[name][:k])
                del free[name][:k]
                sim.launch(f"job-{seq}", [(name, gpus)], duration)
                seq += 1
                return

    for _ in range(ended):
        place_one(rng.uniform(60, 600))
    sim.advance(3600)
    for n in sim.nodes.values():
        n.residual.clear()
    free = {name: [g for g in range(8) if g not in sim._occ[name]] for name in names}
    # Stagger starts over two hours so checkpoints do not all fall on one second.
    for _ in range(running):
        place_one(rng.uniform(3600, 48 * 3600))
        sim.advance(3.6)
    return sim


def _times_ms(fn, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def _median_ms(fn, runs: int) -> float:
    return statistics.median(_times_ms(fn, runs))


def main() -> None:
    sim = build_loaded_simulator()
    active = sum(1 for j in sim.jobs.values() if j.state == "running")
    blob = json.dumps(sim.to_dict())

    def round_trip() -> None:
        Simulator.from_dict(json.loads(json.dumps(sim.to_dict())))

    events = 0

    def step() -> None:
        nonlocal events
        events += len(sim.advance(5))

    # One virtual hour in 5 s steps: checkpoints, completions, failures, faults, ticks.
    steps = _times_ms(step, 720)
    result = {
        "nodes": len(sim.nodes),
        "jobs": len(sim.jobs),
        "running_jobs": active,
        "state_bytes": len(blob),
        "advance_5s_median_ms": statistics.median(steps),
        "advance_5s_p95_ms": statistics.quantiles(steps, n=20)[-1],
        "advance_5s_max_ms": max(steps),
        "events_in_that_hour": events,
        "observe_ms": _median_ms(sim.observe, 20),
        "to_dict_ms": _median_ms(sim.to_dict, 20),
        "round_trip_ms": _median_ms(round_trip, 20),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
