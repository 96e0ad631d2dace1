"""The simulator demo's job generator: keeps the 10,000-GPU demo busy with trace-like work.

Arrivals come from ``replay.traces.workload`` (distributions derived from the
Philly and ITP traces, shipped in the repo). Each minute of cluster time gets
its own seeded generator, so the stream is reproducible and survives restarts
(the last generated minute is kept in ``ClusterSettings``).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from quotas.models import Queue
from scheduling.clock import cluster_now_ts, to_datetime
from scheduling.models import ClusterSettings, Job, JobEvent
from scheduling.selectors import cluster_shape
from replay.traces.workload import WorkloadGenerator

WORKLOAD_USER = "workload"
MAX_PENDING = 3000  # stop adding while this many jobs already wait
MAX_MINUTES_PER_CALL = 30  # after downtime, catch up at most this much
# Offered load well above capacity (trace durations are heavy-tailed, so a young demo
# cluster drains fast), so queues, pending reasons and preemptions show up.
DEMO_LOAD = 2.0


def _job(owner, queue_ids: dict[str, int], g, at: float) -> Job:
    return Job(
        name=g.name[:100], owner=owner, queue_id=queue_ids[g.queue], tier=g.tier, gpus=g.gpus,
        gpus_per_node=g.gpus_per_node or min(g.gpus, 8), gpu_memory_gb=g.gpu_memory_gb,
        rdma=g.rdma, preemptible=g.preemptible, model_name=g.model_name,
        checkpoint_path=f"nfs://checkpoints/{g.queue}/{g.name}"[:500],
        checkpoint_interval_minutes=g.checkpoint_interval_minutes,
        sim_duration_minutes=max(1, round(g.duration_s / 60)),
        submitted_at=to_datetime(at),
    )  # fmt: skip


def generate(now_ts: float | None = None) -> int:
    """Submit the demo jobs that arrived since the last call; returns how many."""
    settings_row = ClusterSettings.load()
    if not settings_row.workload_enabled:
        return 0
    owner = get_user_model().objects.filter(username=WORKLOAD_USER).first()
    if owner is None:
        return 0
    now_ts = cluster_now_ts() if now_ts is None else now_ts
    queues = list(Queue.objects.values_list("name", "tier", "id"))
    if not queues:
        return 0
    queue_ids = {name: qid for name, _, qid in queues}
    name_of = {qid: name for name, qid in queue_ids.items()}
    pairs = [(name, tier) for name, tier, _ in queues]
    _, gpus = cluster_shape()
    minute = int(now_ts // 60)
    jobs: list[Job] = []
    with transaction.atomic():
        row = ClusterSettings.objects.select_for_update().get(pk=settings_row.pk)
        last = row.workload_minute
        if last is not None and last > minute:
            # Ahead of the clock: written by a clock that counted a whole downtime (the
            # simulator catches up at most an hour). Resume from now, or nothing would
            # arrive until the clock got there.
            last = minute - 1
        if last is None:  # first call: fill the empty cluster at once
            gen = WorkloadGenerator(seed=row.seed, cluster_gpus=gpus, load=DEMO_LOAD)
            jobs = [_job(owner, queue_ids, g, now_ts) for g in gen.backlog(pairs, int(gpus * 1.5))]
            last = minute
        elif Job.objects.filter(state=Job.State.PENDING).count() < MAX_PENDING:
            for m in range(max(last + 1, minute - MAX_MINUTES_PER_CALL), minute + 1):
                gen = WorkloadGenerator(
                    seed=row.seed * 1_000_003 + m, cluster_gpus=gpus, load=DEMO_LOAD
                )
                jobs += [
                    _job(owner, queue_ids, g, m * 60.0) for g in gen.next_jobs(m * 60.0, 60, pairs)
                ]
        row.workload_minute = minute
        row.save(update_fields=["workload_minute"])
        created = Job.objects.bulk_create(jobs, batch_size=500)
        JobEvent.objects.bulk_create(
            [JobEvent(job=j, at=j.submitted_at, kind="submitted",
                      message=f"submitted by the demo workload to {name_of[j.queue_id]}: "
                      f"{j.gpus} GPUs, tier {j.tier}")
             for j in created],
            batch_size=500,
        )  # fmt: skip
    return len(created)
