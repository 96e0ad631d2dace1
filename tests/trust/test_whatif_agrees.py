"""The submit form's "would it start now, and when?" agrees with the cycle that follows (#15).

On a busy simulated cluster (the demo's mixed 48-node layout: H100 and A100 80 GB,
A100 40 GB, L40S without RDMA, inference nodes), each candidate is asked of the what-if,
then submitted at once through the service, then the next cycle runs; the cycle's
outcome (started, or the pending code) must be the what-if's, and for a waiting job its
estimated start and place in line too. The simulator's clock stands still between the
question and the cycle (SIMULATOR_SPEED=0), so nothing but the submission changes.
"""

from __future__ import annotations

import random

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from demo.workload import generate
from quotas.models import BusinessLine, Queue
from scheduling import whatif
from scheduling.clock import to_datetime
from scheduling.cycle import run_cycle
from scheduling.models import Job
from scheduling.services import JobRequest, submit_job, submit_jobs
from scheduling.sim_services import advance_clock
from tests.conftest import DEMO_PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_cache():
    whatif.clear_cache()
    yield
    whatif.clear_cache()


@pytest.fixture
def users(monkeypatch):
    """The demo's mixed cluster at 48 nodes (384 GPUs, racks of 8) and its users."""
    monkeypatch.setenv("DEMO_PASSWORD", DEMO_PASSWORD)
    call_command("seed_demo", nodes=48, nodes_per_rack=8, stdout=None)
    return {u.username: u for u in get_user_model().objects.all()}


def ask_submit_cycle(user, req: JobRequest) -> tuple[whatif.WhatIf, Job]:
    """The what-if, then the same request submitted, then the next cycle: both answers."""
    answer = whatif.what_if(user, req)
    job = submit_job(user, req)
    cycle = run_cycle(wait_s=30)  # the cycle that follows, never a skipped one
    job.refresh_from_db()
    outcome = whatif.verdict_of(job)
    assert outcome == (answer.status, answer.code), (
        f"{req}: the what-if said {answer.status} {answer.code} ({answer.message}); "
        f"the cycle made it {job.state} {job.pending_code} ({job.pending_message}); "
        f"its errors: {cycle.errors}, violations: {cycle.violations}"
    )
    if job.state == Job.State.PENDING:
        assert job.estimated_start == to_datetime(answer.estimated_start), req
        assert job.queue_position == answer.position, req
        assert job.pending_message == answer.message, req
    else:
        assert job.borrowed == answer.borrowed, req
        placed = set(job.allocations.values_list("node__name", flat=True))
        assert placed == set(answer.nodes), req
    return answer, job


def fill(owner, jobs: list[dict]) -> None:
    """Submit many jobs at once (as the demo's generator does)."""
    base = {"sim_duration_minutes": 24 * 60, "checkpoint_path": "nfs://ckpt/run/"}
    submit_jobs(
        owner, [JobRequest(**{**base, "name": f"fill-{i}", **j}) for i, j in enumerate(jobs)]
    )


def test_each_kind_of_answer_is_what_the_next_cycle_does(users):
    """Full 80 GB nodes, lines near their quotas, work waiting: the four answers the form
    gives (starts, over quota, waits for GPUs, borrows) each come true at the next cycle."""
    bot = users["workload"]
    BusinessLine.objects.filter(name="llm").update(quota_gpus=160)
    # Every 80 GB GPU (32 nodes) held by core work nobody may preempt.
    fill(bot, [{"queue": "llm-core", "gpus": 8, "gpu_memory_gb": 80}] * 16
              + [{"queue": "multimodal-core", "gpus": 8, "gpu_memory_gb": 80}] * 8
              + [{"queue": "search-rec-core", "gpus": 8, "gpu_memory_gb": 80}] * 8)  # fmt: skip
    run_cycle()
    assert Job.objects.filter(state="running").count() == 32
    # Waiting work: beyond the multimodal line's quota, and big 80 GB jobs.
    fill(bot, [{"queue": "multimodal-core", "gpus": 16}] * 3
              + [{"queue": "llm-core", "gpus": 16, "gpu_memory_gb": 80}] * 2)  # fmt: skip
    run_cycle()
    codes = set(Job.objects.filter(state="pending").values_list("pending_code", flat=True))
    assert "QUOTA_EXCEEDED" in codes and len(codes) >= 2, codes

    me = users["researcher"]
    # Over quota: llm holds 128 of 160 and core work may not borrow.
    over, _ = ask_submit_cycle(me, JobRequest(name="over", queue="llm-core", gpus=40))
    assert over.code == "QUOTA_EXCEEDED"
    # Waits for GPUs: within quota, but every 80 GB GPU is held by core work.
    wait, _ = ask_submit_cycle(
        me, JobRequest(name="wait", queue="llm-core", gpus=8, gpu_memory_gb=80)
    )
    assert wait.code in ("INSUFFICIENT_GPUS", "PRIORITY"), wait.message
    # Starts now: a small job with no memory needs lands on the 40 GB or L40S nodes.
    fits, job = ask_submit_cycle(me, JobRequest(name="fits", queue="llm-core", gpus=4))
    assert fits.starts and not fits.borrowed and job.state == "running"
    # Borrows: experiments beyond their queue's quota on idle GPUs.
    Queue.objects.filter(name="llm-experiment").update(quota_gpus=8)
    borrow, job = ask_submit_cycle(me, JobRequest(name="borrow", queue="llm-experiment", gpus=16))
    assert borrow.starts and borrow.borrowed and job.borrowed


def test_on_the_demo_workload_every_answer_comes_true(users):
    """The demo's own generator keeps the cluster busy for an hour of cluster time (jobs
    start, finish, are preempted; history feeds the runtime predictor); then random
    candidates of every queue and shape are asked, submitted and scheduled one by one."""
    admin = users["admin"]
    assert generate() > 0
    run_cycle()
    for _ in range(6):
        advance_clock(admin, 600)
        generate()
        run_cycle()
    assert Job.objects.filter(state="succeeded").exists(), "history for the predictor"
    assert Job.objects.filter(state="running").count() > 20

    rng = random.Random(15)
    queues = list(Queue.objects.values_list("name", "business_line__name"))
    seen: set[str] = set()
    for i in range(16):
        queue, line = rng.choice(queues)
        user = users["workload"] if line != "llm" or i % 2 else users["researcher"]
        gpus = rng.choice([1, 2, 4, 8, 8, 16, 32, 64])
        req = JobRequest(
            name=f"cand-{i}", queue=queue, gpus=gpus,
            gpu_memory_gb=rng.choice([None, None, 48, 80]),
            preemptible=rng.choice([None, None, True, False]),
            exclusive_node=rng.random() < 0.1,
            estimated_runtime_minutes=rng.choice([None, 20, 600]),
            sim_duration_minutes=600,
        )  # fmt: skip
        answer, _ = ask_submit_cycle(user, req)
        seen.add(answer.code or ("borrowed" if answer.borrowed else "started"))
    assert "started" in seen and len(seen) >= 3, seen
