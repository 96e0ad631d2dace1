"""``manage.py bench_whatif``: how long the submit form's "would it start now?" takes (rolled back).

Loads the benchmark cluster (``bench.scale.scale_dataset``: 10,000 GPUs, 5,000 pending,
2,000 running by default), runs one cycle so the what-if has a cycle to start from, then
times ``scheduling.whatif.what_if`` for a few candidates of different shapes:

- **cold**: the snapshot rebuilt (as after a cycle or a change to the cluster), then the plan;
- **warm**: the snapshot from the cache (typing in the form between two cycles), the plan only.

Each figure is wall time of the whole call (the service's rules, the cache check, the
plan); ``plan`` and ``snapshot`` are its parts. Everything is rolled back afterwards.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from itertools import cycle, islice
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from bench.cli import add_output_arguments, add_scale_arguments, write_result
from bench.latency import latency_ms
from bench.scale import LoopRunning, scale_dataset
from scheduling import whatif
from scheduling.cycle import run_cycle
from scheduling.services import JobRequest

# (queue, GPUs): a small job, one node, a multi-node gang, a preemptible experiment.
CANDIDATES = (("llm-core", 1), ("llm-core", 8), ("search-core", 64), ("multimodal-experiment", 16))


def _requests() -> Iterator[JobRequest]:
    for queue, gpus in cycle(CANDIDATES):
        yield JobRequest(name="bench-whatif", queue=queue, gpus=gpus)


def _timed(user: Any, req: JobRequest) -> tuple[float, float, whatif.WhatIf]:
    """Wall and CPU milliseconds of one what-if (CPU: this process, the database excluded)."""
    t0, c0 = time.perf_counter(), time.process_time()
    answer = whatif.what_if(user, req)
    return (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000, answer


def time_whatif(runs: int) -> dict:
    """``runs`` cold and ``runs`` warm what-ifs on the loaded cluster; their times and answers."""
    admin, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_superuser": True, "is_staff": True}
    )
    requests = _requests()
    keep = whatif.CACHE_SECONDS
    whatif.CACHE_SECONDS = 3600.0  # the warm runs time the cache hit, however slow the machine
    try:
        cold = []
        for req in islice(requests, runs):
            whatif.clear_cache()
            cold.append(_timed(admin, req))
        warm = [(req, *_timed(admin, req)) for req in islice(requests, runs)]
        base, _ = whatif.baseline()
    finally:
        whatif.CACHE_SECONDS = keep
        whatif.clear_cache()
    if not all(answer.cached for _, _, _, answer in warm):
        raise CommandError("a warm what-if rebuilt its snapshot: is the loop running?")
    return {
        "pending": len(base.snapshot.pending),
        "running": len(base.snapshot.running),
        "nodes": len(base.snapshot.nodes),
        "runs": runs,
        "cold": {**latency_ms([ms for ms, _, _ in cold]),
                 "cpu_median_ms": round(statistics.median(cpu for _, cpu, _ in cold), 1),
                 "snapshot_median_ms": round(statistics.median(a.snapshot_ms for *_, a in cold), 1)},
        "warm": {**latency_ms([ms for _, ms, _, _ in warm]),
                 "cpu_median_ms": round(statistics.median(cpu for _, _, cpu, _ in warm), 1),
                 "plan_median_ms": round(statistics.median(a.plan_ms for *_, a in warm), 1)},
        "answers": {f"{req.queue} x{req.gpus}": a.code or ("starts, borrowed" if a.borrowed
                                                           else "starts")
                    for req, _, _, a in warm},
    }  # fmt: skip


class Command(BaseCommand):
    help = (
        "Load the benchmark cluster (default 10,000 GPUs, 5,000 pending, 2,000 running) in a "
        "transaction, run one cycle, time the submit form's what-if (snapshot rebuilt, and "
        "from the cache), then roll everything back. Stop the portal's loop first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_scale_arguments(parser)
        add_output_arguments(parser)

    def handle(self, *args, **o) -> None:
        if not (
            8 <= o["gpus"] <= 100_000 and 0 <= o["pending"] <= 100_000 and 1 <= o["runs"] <= 100
        ):
            raise CommandError("--gpus 8..100000, --pending 0..100000, --runs 1..100")
        try:
            with scale_dataset(o["gpus"], o["pending"], o["running"], seed=0):
                run_cycle()
                result = time_whatif(o["runs"])
        except LoopRunning as exc:
            raise CommandError(str(exc)) from exc
        result["gpus"] = o["gpus"]
        write_result(self, result, o["json"], _human, sort_keys=True)


def _human(r: dict) -> Iterator[str]:
    yield (
        f"what-if on {r['gpus']} GPUs ({r['nodes']} nodes), {r['pending']} pending, "
        f"{r['running']} running; {r['runs']} runs each"
    )
    c, w = r["cold"], r["warm"]
    yield (
        f"snapshot rebuilt: p50 {c['p50_ms']} ms, p95 {c['p95_ms']} ms, CPU p50 "
        f"{c['cpu_median_ms']} ms (snapshot {c['snapshot_median_ms']} ms)"
    )
    yield (
        f"snapshot cached:  p50 {w['p50_ms']} ms, p95 {w['p95_ms']} ms, CPU p50 "
        f"{w['cpu_median_ms']} ms (plan {w['plan_median_ms']} ms)"
    )
    for candidate, code in r["answers"].items():
        yield f"  {candidate}: {code}"
