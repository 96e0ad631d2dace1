"""The simulator demo's job generator: keeps the 10,000-GPU demo busy with trace-like work.

Arrivals come from ``replay.traces.workload`` (distributions derived from the
Philly and ITP traces, shipped in the repo). Each minute of cluster time gets
its own seeded generator, so the stream is reproducible and survives restarts
(the last generated minute is kept in ``ClusterSettings``).

The jobs are submitted by the ``workload`` user through ``scheduling.services.submit_jobs``:
the rules and defaults of every other submission (queue access, tier ceiling, sizes the
cluster holds, shared-storage checkpoints), in bulk, stamped with the cluster minute they
arrived in. Side effects: the jobs, their ``submitted`` events and ``queues.updated``.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from core import clock
from quotas.models import Queue
from replay.traces.readers import GPUS_PER_NODE
from replay.traces.workload import GeneratedJob, WorkloadGenerator
from scheduling import limits
from scheduling.clock import cluster_now_ts, to_datetime
from scheduling.models import ClusterSettings, Job
from scheduling.selectors import cluster_shape
from scheduling.services import JobRequest, submit_jobs

WORKLOAD_USER = "workload"
MAX_PENDING = 3000  # stop adding while this many jobs already wait
MAX_MINUTES_PER_CALL = 30  # after downtime, catch up at most this much
# Offered load well above capacity (trace durations are heavy-tailed, so a young demo
# cluster drains fast), so queues, pending reasons and preemptions show up.
DEMO_LOAD = 2.0
MAX_JOB_GPUS = 256  # the generator's largest job, on a cluster that can hold it


def job_request(g: GeneratedJob) -> JobRequest:
    """The submission of one generated job (as a client would post it to the API)."""
    return JobRequest(
        name=g.name[: limits.NAME_MAX], queue=g.queue, tier=g.tier, gpus=g.gpus,
        gpus_per_node=g.gpus_per_node, gpu_memory_gb=g.gpu_memory_gb, rdma=g.rdma,
        preemptible=g.preemptible, model_name=g.model_name,
        checkpoint_path=f"nfs://checkpoints/{g.queue}/{g.name}"[: limits.CHECKPOINT_PATH_MAX],
        checkpoint_interval_minutes=g.checkpoint_interval_minutes,
        sim_duration_minutes=max(1, round(g.duration_s / 60)),
    )  # fmt: skip


def generator(seed: int, cluster_gpus: int) -> WorkloadGenerator:
    """The demo's generator for ``seed``: no job larger than the cluster (the service's rule).

    Jobs above one node are whole nodes, so the cap is whole nodes too.
    """
    whole = cluster_gpus - cluster_gpus % GPUS_PER_NODE or cluster_gpus
    return WorkloadGenerator(
        seed=seed, cluster_gpus=cluster_gpus, load=DEMO_LOAD,
        max_gpus=max(1, min(MAX_JOB_GPUS, whole)),
    )  # fmt: skip


def arrivals(
    last: int | None, now_ts: float, seed: int, gpus: int, pairs: list[tuple[str, str]]
) -> list[tuple[GeneratedJob, float]]:
    """The jobs, with their arrival times, from after minute ``last`` up to ``now_ts``.

    The first call (``last`` None) fills the empty cluster at once with one and a half
    times its GPUs; later calls catch up at most ``MAX_MINUTES_PER_CALL`` minutes.
    """
    if last is None:
        return [(g, now_ts) for g in generator(seed, gpus).backlog(pairs, int(gpus * 1.5))]
    minute = int(now_ts // 60)
    out: list[tuple[GeneratedJob, float]] = []
    for m in range(max(last + 1, minute - MAX_MINUTES_PER_CALL), minute + 1):
        out += [
            (g, m * 60.0)
            for g in generator(seed * 1_000_003 + m, gpus).next_jobs(m * 60.0, 60, pairs)
        ]
    return out


def generate(now_ts: float | None = None) -> int:
    """Submit the demo jobs that arrived since the last call; returns how many."""
    settings_row = ClusterSettings.load()
    if not settings_row.workload_enabled:
        return 0
    owner = get_user_model().objects.filter(username=WORKLOAD_USER).first()
    if owner is None:
        return 0
    now_ts = cluster_now_ts() if now_ts is None else now_ts
    pairs = list(Queue.objects.values_list("name", "tier"))
    if not pairs:
        return 0
    _, gpus = cluster_shape()
    if gpus <= 0:
        return 0
    minute = int(now_ts // 60)
    with transaction.atomic():
        row = ClusterSettings.objects.select_for_update().get(pk=settings_row.pk)
        last = row.workload_minute
        if last is not None and last > minute:
            # Ahead of the clock: written by a clock that counted a whole downtime (the
            # simulator catches up at most an hour). Resume from now, or nothing would
            # arrive until the clock got there.
            last = minute - 1
        jobs: list[tuple[GeneratedJob, float]] = []
        if last is None or Job.objects.filter(state=Job.State.PENDING).count() < MAX_PENDING:
            jobs = arrivals(last, now_ts, row.seed, gpus, pairs)
        row.workload_minute = minute
        row.save(update_fields=["workload_minute"])
        # One reading of the cluster clock for the batch (each job's other stamps; its
        # submission time is its arrival minute), not one query per row.
        with clock.pinned(to_datetime(now_ts)):
            created = submit_jobs(
                owner, [job_request(g) for g, _ in jobs],
                submitted_at=[to_datetime(at) for _, at in jobs],
            )  # fmt: skip
    return len(created)
