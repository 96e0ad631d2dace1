"""Two beats started by mistake still give one cycle at a time, and lose or duplicate nothing.

Real processes on the test database and a Redis of the test's own (the broker):
two ``celery beat`` (each with its own schedule file, as on two machines) and one
prefork worker with two processes, so the duplicated cycle tasks really run side by
side. The cycle period is 1 s, each cycle is slowed to last more than half of it, and
the simulated clock runs 10 minutes per second, so jobs start, finish and fail while
the beats race for ~10 s.
"""

from __future__ import annotations

import random
import time

import pytest

from scheduling.consistency import find_inconsistencies
from scheduling.models import Job, SchedulingCycle
from tests.reliability.conftest import (
    celery_beat,
    celery_worker,
    loop_env,
    stop_process,
    wait_until,
)
from tests.reliability.workload import start_busy_cluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

RACE_S = 10
# Each iteration is made 0.6 s longer (tests/reliability/slow_cycles.py), more than half
# the 1 s period, so the two beats' iterations meet whatever the phase between them.
SLOW_CYCLE_S = 0.6


def overlaps(held: list[tuple[float, float, str]]) -> list[str]:
    """Pairs of iterations whose lock-held intervals ``(from, to, name)`` intersect (no
    slack: each interval lies inside the time its iteration held the lock)."""
    spans = sorted(held)
    return [
        f"{b_name} took the lock {1000 * (a_end - b_start):.0f} ms before {a_name} let it go"
        for (_, a_end, a_name), (b_start, _, b_name) in zip(spans, spans[1:], strict=False)
        if b_start < a_end
    ]


def read_held(path) -> list[tuple[float, float, str]]:
    """The intervals ``slow_cycles`` wrote to ``HELD_LOG``."""
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(float(start), float(end), f"iteration {i} (pid {pid})")
            for i, (pid, start, end) in enumerate(rows)]  # fmt: skip


def test_the_overlap_check_sees_two_iterations_side_by_side(tmp_path):
    log = tmp_path / "held.log"
    log.write_text("11 100.000 100.700\n12 100.650 101.300\n11 101.300 102.000\n")
    assert overlaps(read_held(log)) == [
        "iteration 1 (pid 12) took the lock 50 ms before iteration 0 (pid 11) let it go"
    ]


def test_two_beats_and_one_worker_run_one_cycle_at_a_time(roomy, own_redis, scratch):
    rng = random.Random(3)
    shapes = [("llm-experiment", 8), ("llm-core", 16), ("llm-finetune", 2), ("llm-urgent", 4),
              ("llm-experiment", 1), ("llm-core", 8)]  # fmt: skip
    jobs = start_busy_cluster(roomy["lead"], shapes, count=60, prefix="race", rng=rng,
                              max_minutes=120, speed=600.0)  # fmt: skip
    first_id = SchedulingCycle.objects.order_by("-id").values_list("id", flat=True).first()

    held_log = scratch / "held.log"
    env = loop_env(own_redis.url, SLOW_CYCLE_S=str(SLOW_CYCLE_S), HELD_LOG=str(held_log))
    worker = celery_worker(env, scratch / "worker.log", "--pool", "prefork", "--concurrency", "2",
                           preload="tests.reliability.slow_cycles")  # fmt: skip
    beats = [celery_beat(env, scratch / f"beat{i}.log", scratch / f"schedule{i}") for i in (1, 2)]
    try:
        wait_until(lambda: SchedulingCycle.objects.filter(id__gt=first_id).exists(), 40,
                   "the first beat-driven cycle")  # fmt: skip
        time.sleep(RACE_S)
    finally:
        for beat in beats:
            stop_process(beat)
        stop_process(worker, timeout=30)  # warm shutdown: running cycles finish

    rows = list(SchedulingCycle.objects.filter(id__gt=first_id))
    log = (scratch / "worker.log").read_text()
    skipped = log.count("skipped: another loop iteration holds the cluster")
    sent = sum((scratch / f"beat{i}.log").read_text().count("scheduling-cycle") for i in (1, 2))
    print(f"{len(rows)} iterations committed, {skipped} skipped by the lock, {sent} sent by beats")
    assert len(rows) >= RACE_S // 2, "the loop ran"
    assert min(r.duration_ms for r in rows) > SLOW_CYCLE_S * 1000, "the slow-down was in force"
    held = read_held(held_log)
    assert len(held) >= len(rows), "every committed iteration said when it held the lock"
    assert overlaps(held) == []
    assert skipped >= 1, "the two beats really raced (else this test proves nothing)"
    assert Job.objects.count() == jobs, "no job lost or duplicated"
    assert Job.objects.filter(state__in=["running", "succeeded"]).exists()
    assert find_inconsistencies() == []
