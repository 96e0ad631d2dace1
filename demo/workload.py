"""The simulator demo's job generator: keeps the 10,000-GPU demo busy with trace-like work.

Arrivals come from ``replay.traces.workload`` (distributions derived from the
Philly and ITP traces, shipped in the repo). Each minute of cluster time gets
its own seeded generator, so the stream is reproducible and survives restarts
(the last generated minute is kept in ``ClusterSettings``).

What it offers: ``DEMO_LOAD`` times the cluster's GPUs in GPU-time, every cluster minute,
whatever the cadence of the calls. Beat asks every 5 s of wall time, which on the
simulator at 60x is 5 cluster minutes, and a busy worker runs the task later still; each
call submits every minute since the last one (up to ``MAX_CATCH_UP_MINUTES``: only a jump
of the clock, ``simulator/advance``, goes further back, and then only that much of it
arrives). It used to stop at 30 minutes, so a call a wall minute after the last (an
hour of cluster time at 60x) dropped half the arrivals. The one thing that holds arrivals
back is the backlog: a minute whose arrivals would be submitted while ``MAX_PENDING`` jobs
already wait is dropped (counted in ``Offer.dropped``), so the demo's queue stays a
queue and not an ever-growing pile.

The jobs are submitted by the ``workload`` user through ``scheduling.services.submit_jobs``:
the rules and defaults of every other submission (queue access, tier ceiling, sizes the
cluster holds, shared-storage checkpoints), in bulk, stamped with the cluster minute they
arrived in. Side effects: the jobs, their ``submitted`` events and ``queues.updated``.
"""

from __future__ import annotations

from dataclasses import dataclass

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
MAX_PENDING = 3000  # drop a minute's arrivals while this many jobs already wait
# Every minute since the last call arrives, up to this far back: six wall minutes of a
# stuck worker at 60x; a longer gap is a jump of the clock (simulator/advance).
MAX_CATCH_UP_MINUTES = 360
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


def minutes_due(last: int | None, now_ts: float) -> range:
    """The cluster minutes whose arrivals are due: after ``last`` up to ``now_ts``'s, at
    most ``MAX_CATCH_UP_MINUTES`` of them (the latest)."""
    minute = int(now_ts // 60)
    first = minute if last is None else last + 1
    return range(max(first, minute - MAX_CATCH_UP_MINUTES + 1), minute + 1)


def minute_arrivals(
    minute: int, seed: int, gpus: int, pairs: list[tuple[str, str]]
) -> list[GeneratedJob]:
    """The jobs arriving in one cluster minute (its own seeded generator)."""
    return generator(seed * 1_000_003 + minute, gpus).next_jobs(minute * 60.0, 60, pairs)


def arrivals(
    last: int | None, now_ts: float, seed: int, gpus: int, pairs: list[tuple[str, str]]
) -> list[tuple[GeneratedJob, float]]:
    """The jobs, with their arrival times, from after minute ``last`` up to ``now_ts``.

    The first call (``last`` None) fills the empty cluster at once with one and a half
    times its GPUs; later calls bring every minute since ``last`` (``minutes_due``).
    """
    if last is None:
        return [(g, now_ts) for g in generator(seed, gpus).backlog(pairs, int(gpus * 1.5))]
    return [
        (g, m * 60.0)
        for m in minutes_due(last, now_ts)
        for g in minute_arrivals(m, seed, gpus, pairs)
    ]


@dataclass(frozen=True)
class Offer:
    """One call's arrivals: ``submitted`` jobs (and their GPU-seconds of true run time),
    ``dropped`` jobs of minutes that came while ``MAX_PENDING`` jobs waited, and the
    cluster ``minutes`` covered."""

    submitted: int = 0
    submitted_gpu_s: float = 0.0
    dropped: int = 0
    dropped_gpu_s: float = 0.0
    minutes: int = 0


def _gpu_s(jobs: list[GeneratedJob]) -> float:
    return sum(g.gpus * g.duration_s for g in jobs)


def generate(now_ts: float | None = None) -> int:
    """Submit the demo jobs that arrived since the last call; returns how many."""
    return offer(now_ts).submitted


def offer(now_ts: float | None = None) -> Offer:
    """Submit the demo jobs that arrived since the last call (``generate``), and say what
    was submitted and what the backlog dropped."""
    settings_row = ClusterSettings.load()
    if not settings_row.workload_enabled:
        return Offer()
    owner = get_user_model().objects.filter(username=WORKLOAD_USER).first()
    if owner is None:
        return Offer()
    now_ts = cluster_now_ts() if now_ts is None else now_ts
    pairs = list(Queue.objects.values_list("name", "tier"))
    if not pairs:
        return Offer()
    _, gpus = cluster_shape()
    if gpus <= 0:
        return Offer()
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
        dropped: list[GeneratedJob] = []
        due = minutes_due(last, now_ts)
        if last is None:
            jobs = arrivals(None, now_ts, row.seed, gpus, pairs)
        else:
            waiting = Job.objects.filter(state=Job.State.PENDING).count()
            for m in due:
                batch = minute_arrivals(m, row.seed, gpus, pairs)
                if waiting + len(jobs) >= MAX_PENDING:
                    dropped += batch
                else:
                    jobs += [(g, m * 60.0) for g in batch]
        row.workload_minute = minute
        row.save(update_fields=["workload_minute"])
        # One reading of the cluster clock for the batch (each job's other stamps; its
        # submission time is its arrival minute), not one query per row.
        with clock.pinned(to_datetime(now_ts)):
            created = submit_jobs(
                owner, [job_request(g) for g, _ in jobs],
                submitted_at=[to_datetime(at) for _, at in jobs],
                per_person_bound=False,  # one account for a population, bounded by MAX_PENDING
            )  # fmt: skip
    return Offer(
        submitted=len(created), submitted_gpu_s=_gpu_s([g for g, _ in jobs]),
        dropped=len(dropped), dropped_gpu_s=_gpu_s(dropped), minutes=len(due),
    )  # fmt: skip
