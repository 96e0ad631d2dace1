"""S1: a real Celery worker killed mid-cycle, again and again, loses and duplicates nothing.

Runs against the test PostgreSQL and Redis. The worker executes real
``scheduling_cycle`` tasks back to back while the simulated clock runs fast
(jobs finish, fail, get preempted); it is SIGKILLed at random moments. Then one
clean cycle repairs from the backend's truth and the invariants are checked.
"""

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from django.conf import settings

from scheduling.consistency import find_inconsistencies
from scheduling.cycle import run_cycle
from scheduling.models import Job, SchedulingCycle
from tests.drills import make_quotas_roomy
from tests.reliability.workload import start_busy_cluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

KILLS = 8


def _worker_env() -> dict:
    db = settings.DATABASES["default"]
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=settings.REDIS_URL,
        DEBUG="1",
        SCHEDULER_CYCLE_SECONDS="1",
    )
    return env


def _start_worker() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool", "solo",
         "--without-heartbeat", "--without-mingle", "--without-gossip", "-l", "warning",
         "-Q", "crashtest"],
        env=_worker_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def test_killing_the_worker_mid_cycle_loses_and_duplicates_nothing(demo):
    make_quotas_roomy()
    rng = random.Random(7)
    plan = [("llm-experiment", 8), ("llm-experiment", 4), ("llm-core", 8), ("llm-finetune", 2),
            ("llm-urgent", 8), ("llm-core", 16), ("llm-experiment", 1)]  # fmt: skip
    # From here on the simulated clock runs 20 minutes per real second.
    total = start_busy_cluster(demo["lead"], plan, count=40, prefix="crash", rng=rng,
                               max_minutes=90, speed=1200.0)  # fmt: skip

    from scheduling.tasks import scheduling_cycle

    kills = 0
    for _ in range(KILLS):
        worker = _start_worker()
        before = SchedulingCycle.objects.count()
        for _ in range(200):
            scheduling_cycle.apply_async(queue="crashtest")
        deadline = time.monotonic() + 30
        while SchedulingCycle.objects.count() <= before and time.monotonic() < deadline:
            time.sleep(0.05)  # wait until the worker is really cycling
        time.sleep(rng.uniform(0.05, 0.5))
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        kills += 1
    assert SchedulingCycle.objects.count() > KILLS, "the worker really ran cycles"
    assert run_cycle(wait_s=10) is not None
    assert Job.objects.count() == total, "no job lost or duplicated"
    assert find_inconsistencies() == []
    states = Counter(Job.objects.values_list("state", flat=True))
    assert states["succeeded"] + states["running"] > 0, states
    assert kills == KILLS
