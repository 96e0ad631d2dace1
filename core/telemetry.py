"""Counters and histograms recorded where the work happens (prometheus_client).

``/metrics`` (``portal.metrics``) used to recount these from tables that grow without
bound (cycles, evictions); now the scheduling loop records each event once, when its
transaction commits, and a scrape reads the values, whatever the number of rows.

Processes: with ``PROMETHEUS_MULTIPROC_DIR`` set (a directory shared by the web and
worker processes of a host or pod, emptied before they start), prometheus_client writes
each process's values to memory-mapped files there and ``/metrics`` sums them
(``multiprocess.MultiProcessCollector``). Without it the values live in this process
(``REGISTRY``): right for one process (tests). ``make run`` sets a directory per run
(``portal/devstack.py``), compose a shared volume. Values
start at 0 with each process, as Prometheus counters do after a restart.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from django.db import transaction
from prometheus_client import CollectorRegistry, Counter, Histogram, values


def _process_identifier() -> str:
    """Host name and pid: web and worker containers share the directory (a compose volume)
    and each has its own pid 1, so the pid alone would make two processes write one file."""
    return f"{socket.gethostname()}-{os.getpid()}"


if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    values.ValueClass = values.MultiProcessValue(process_identifier=_process_identifier)

REGISTRY = CollectorRegistry(auto_describe=True)

# A steady 10,000-GPU cycle takes ~0.7 s (docs/benchmarks.md).
CYCLE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# From a minute to a week: Kueue users read p50/p90/p99 of admission waits.
WAIT_BUCKETS_S = (10, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200, 604800)
CYCLE_KINDS = ("cycle", "sweep")
EVICTION_REASONS = ("preemption", "inference")

CYCLE_DURATION = Histogram(
    "gpuportal_scheduling_cycle_duration_seconds",
    "Wall-clock duration of scheduling-loop iterations (kind: cycle or sweep)",
    ["kind"], buckets=CYCLE_BUCKETS_S, registry=REGISTRY,
)  # fmt: skip
PREEMPTIONS = Counter(
    "gpuportal_preemptions",
    "Running jobs stopped to make room, by queue and reason (preemption, inference)",
    ["queue", "reason"], registry=REGISTRY,
)  # fmt: skip
EVICTED_GPU_SECONDS = Counter(
    "gpuportal_evicted_gpu_seconds",
    "GPU-seconds of runs stopped to make room, by queue",
    ["queue"], registry=REGISTRY,
)  # fmt: skip
MIGRATIONS = Counter(
    "gpuportal_migrations",
    "Running jobs moved by consolidation to make room for a gang (checkpoint, then restart "
    "elsewhere), by queue; not preemptions, and not in the eviction ratio",
    ["queue"], registry=REGISTRY,
)  # fmt: skip
QUOTA_SWAPS = Counter(
    "gpuportal_quota_swaps",
    "Jobs that may not borrow started within their quota by a quota swap, by queue: "
    "preemptible work of their queue or line became the borrowed part instead",
    ["queue"], registry=REGISTRY,
)  # fmt: skip
SWAP_DISPLACED = Counter(
    "gpuportal_quota_swap_displaced",
    "Running jobs a quota swap turned into borrowed (reclaimable) work, by their queue; "
    "nothing stopped",
    ["queue"], registry=REGISTRY,
)  # fmt: skip
TIMED_OUT = Counter(
    "gpuportal_jobs_timed_out",
    "Jobs failed on their time limit (a run reached it: Slurm's TIMEOUT), per queue",
    ["queue"], registry=REGISTRY,
)  # fmt: skip
JOB_WAIT = Histogram(
    "gpuportal_job_wait_seconds",
    "Cluster-time seconds from submission (or, for a job that waited for others, from when "
    "the last of them ended) to first start, per queue (observed at start)",
    ["queue"], buckets=WAIT_BUCKETS_S, registry=REGISTRY,
)  # fmt: skip
JOBS_ADMITTED = Counter(
    "gpuportal_jobs_admitted",
    "Job runs started (admitted to the cluster), per queue; restarts count again",
    ["queue"], registry=REGISTRY,
)  # fmt: skip


def on_commit(record: Callable[[], None]) -> None:
    """Record after the current transaction commits (a rolled-back cycle counts nothing)."""
    transaction.on_commit(record)


def touch(queues: list[str]) -> None:
    """Zero-valued series for every known queue, kind and reason (a rate() of a series
    that did not exist yet is empty, not 0)."""
    for kind in CYCLE_KINDS:
        CYCLE_DURATION.labels(kind)
    for queue in queues:
        JOB_WAIT.labels(queue)
        JOBS_ADMITTED.labels(queue)
        EVICTED_GPU_SECONDS.labels(queue)
        MIGRATIONS.labels(queue)
        QUOTA_SWAPS.labels(queue)
        SWAP_DISPLACED.labels(queue)
        TIMED_OUT.labels(queue)
        for reason in EVICTION_REASONS:
            PREEMPTIONS.labels(queue, reason)


def reset() -> None:
    """Forget every recorded value of this process (tests)."""
    for metric in (
        CYCLE_DURATION, PREEMPTIONS, EVICTED_GPU_SECONDS, MIGRATIONS, QUOTA_SWAPS,
        SWAP_DISPLACED, TIMED_OUT, JOB_WAIT, JOBS_ADMITTED,
    ):  # fmt: skip
        metric.clear()
