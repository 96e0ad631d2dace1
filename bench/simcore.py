"""Time the simulator core at demo scale: ``python -m bench.simcore`` (no Django).

1,250 nodes (10,000 GPUs), about 2,000 running jobs and 1,000 ended ones (``--running``,
``--ended`` and ``--nodes`` make it smaller). Prints median timings in milliseconds as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from scheduling.simcore.cluster import build_demo_cluster
from scheduling.simcore.simulator import Simulator

from .latency import percentile


def build_loaded_simulator(
    running: int = 2000, ended: int = 1000, seed: int = 0, nodes: int = 1250
) -> Simulator:
    """A demo cluster with ``ended`` finished jobs and ``running`` jobs (1-8 GPUs, one node each)."""
    sim = Simulator(build_demo_cluster(nodes=nodes, seed=seed), seed=seed)
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


def measure(sim: Simulator, hours: float = 1.0) -> dict[str, float | int]:
    """Time ``hours`` of virtual time in 5 s steps, then observe and (de)serialize ``sim``."""
    active = sum(1 for j in sim.jobs.values() if j.state == "running")
    blob = json.dumps(sim.to_dict())

    def round_trip() -> None:
        Simulator.from_dict(json.loads(json.dumps(sim.to_dict())))

    events = 0

    def step() -> None:
        nonlocal events
        events += len(sim.advance(5))

    # Virtual time in 5 s steps: checkpoints, completions, failures, faults, ticks.
    steps = _times_ms(step, max(1, round(hours * 720)))
    return {
        "nodes": len(sim.nodes),
        "jobs": len(sim.jobs),
        "running_jobs": active,
        "state_bytes": len(blob),
        "advance_5s_median_ms": statistics.median(steps),
        "advance_5s_p95_ms": percentile(steps, 95),
        "advance_5s_max_ms": max(steps),
        "events_in_that_hour": events,
        "observe_ms": _median_ms(sim.observe, 20),
        "to_dict_ms": _median_ms(sim.to_dict, 20),
        "round_trip_ms": _median_ms(round_trip, 20),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.simcore", description=__doc__)
    parser.add_argument("--running", type=int, default=2000)
    parser.add_argument("--ended", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--hours", type=float, default=1.0, help="virtual hours to advance")
    args = parser.parse_args(argv)
    sim = build_loaded_simulator(args.running, args.ended, nodes=args.nodes)
    print(json.dumps(measure(sim, args.hours), indent=2))


if __name__ == "__main__":
    main()
