"""The benchmark cluster as database rows, rolled back afterwards.

Used by ``bench_cycle --with-db`` and ``bench_pages``.

``scale_dataset`` builds the engine benchmark's random cluster and workload
(``bench.engine.build_snapshot``) as real rows (nodes, lines, queues, running jobs with
GPU allocations and a matching simulator state, pending jobs) inside one transaction
that holds the cluster lock, gives PostgreSQL statistics of them (``ANALYZE``, as
autovacuum would), lets the caller time what it wants, then rolls everything back: the
database is left as it was. Stop the portal's loop first.
``run_db_bench`` times full ``run_cycle`` calls through PostgreSQL on it, phase by phase,
and ``plan()`` alone on the same snapshots.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django.db import connection, transaction

from monitoring.models import Alert
from quotas.models import BusinessLine, Queue
from scheduling import engine
from scheduling.backends.base import run_ref
from scheduling.cluster_lock import try_cluster_lock
from scheduling.cycle import run_cycle
from scheduling.cycle.phases import PHASES, CycleTrace
from scheduling.models import (
    Allocation,
    ClusterSettings,
    Eviction,
    Job,
    JobArray,
    JobEvent,
    Node,
    SchedulingCycle,
    SimulatorState,
)  # fmt: skip
from scheduling.simcore.cluster import SimNode
from scheduling.simcore.simulator import Simulator

from .engine import build_snapshot
from .latency import percentile

NATURE = {"urgent": "urgent_fix", "core": "core_training", "finetune": "fine_tuning",
          "experiment": "experiments"}  # fmt: skip


class _Rollback(Exception):
    pass


class LoopRunning(RuntimeError):
    """The portal's scheduling loop holds the cluster lock: the benchmark would meet it."""


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def load_scale_dataset(gpus: int, pending: int, running: int, seed: int) -> float:
    """Replace the cluster's rows with the benchmark cluster; returns its virtual "now".

    Deletes every job, queue, line, node, cycle and alert first: call it only inside a
    transaction that is rolled back (``scale_dataset``).
    """
    snap = build_snapshot(gpus, pending, running, seed)
    now = max([j.submitted_at for j in snap.pending] + [j.started_at for j in snap.running]) + 60
    for model in (Allocation, JobEvent, Eviction, Job, JobArray, Queue, BusinessLine, Node,
                  SimulatorState, SchedulingCycle, Alert):  # fmt: skip
        model.objects.all().delete()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    lines = {ln.name: BusinessLine.objects.create(
        name=ln.name, display_name=ln.name, quota_gpus=ln.quota_gpus or 10**6,
        guarantee_gpus=ln.guarantee_gpus) for ln in snap.lines}  # fmt: skip
    queues = {q.name: Queue.objects.create(
        name=q.name, business_line=lines[q.line], tier=q.tier.label, nature=NATURE[q.tier.label],
        quota_gpus=q.quota_gpus, guarantee_gpus=q.guarantee_gpus) for q in snap.queues}  # fmt: skip
    state_map = {"draining": "cordoned"}
    Node.objects.bulk_create([
        Node(name=n.name, rack=n.rack, block=n.block, gpu_model=n.gpu_model,
             gpu_memory_gb=n.gpu_memory_gb, gpus_total=n.gpus_total, rdma=n.rdma,
             inference=False, state=state_map.get(n.state, n.state),
             recent_models=list(n.recent_models))
        for n in snap.nodes
    ], batch_size=1000)  # fmt: skip
    node_ids = dict(Node.objects.values_list("name", "id"))
    sim = Simulator(
        [SimNode(name=n.name, rack=n.rack, block=n.block, gpu_model=n.gpu_model,
                 gpu_memory_gb=n.gpu_memory_gb, gpus_total=n.gpus_total, rdma=n.rdma,
                 cordoned=n.state != "ready") for n in snap.nodes],
        seed=seed, now=now,
    )  # fmt: skip
    sim.set_rates(job_failure_rate_per_gpu_hour=0.0, node_fault_rate_per_node_hour=0.0)

    def job_row(j, state: str) -> Job:
        return Job(name=f"bench-{j.id}", owner=user, queue=queues[j.queue], tier=j.tier.label,
                   gpus=j.gpus, state=state, preemptible=j.preemptible,
                   preemption_count=j.preemption_count, model_name=j.model_name or "")  # fmt: skip

    run_rows = Job.objects.bulk_create(
        [job_row(j, "running") for j in snap.running], batch_size=1000
    )
    allocations = []
    for row, j in zip(run_rows, snap.running, strict=True):
        row.attempt = 1
        row.backend_ref = run_ref(row.pk, 1)
        row.started_at = _dt(j.started_at)
        row.exclusive_node = j.exclusive_node
        sim.launch(row.backend_ref, [(s.node, s.gpus) for s in j.placement], 10**7)
        allocations += [Allocation(job_id=row.pk, node_id=node_ids[s.node], gpu_index=g)
                        for s in j.placement for g in s.gpus]  # fmt: skip
    Job.objects.bulk_update(run_rows, ["attempt", "backend_ref", "started_at", "exclusive_node"],
                            batch_size=1000)  # fmt: skip
    Allocation.objects.bulk_create(allocations, batch_size=2000)
    pend_rows = []
    for j in snap.pending:
        row = job_row(j, "pending")
        row.gpus_per_node = j.gpus_per_node
        row.gpu_memory_gb = j.gpu_memory_gb
        row.rdma = j.rdma
        row.exclusive_node = j.exclusive_node
        row.submitted_at = _dt(j.submitted_at)
        pend_rows.append(row)
    Job.objects.bulk_create(pend_rows, batch_size=1000)
    sim.advance(1)
    SimulatorState.objects.create(state=sim.to_dict(), virtual_now=sim.now,
                                  saved_wall=time.time(), speed=0.0)  # fmt: skip
    ClusterSettings.objects.update_or_create(singleton=True, defaults={"workload_enabled": False})
    _analyze()
    return now


def _analyze() -> None:
    """Give PostgreSQL's planner statistics of the rows just loaded.

    A live portal's tables are analyzed by autovacuum as they grow; rows loaded in a
    transaction that is never committed are invisible to it, and with the statistics of
    (say) empty tables the planner picks nested loops that take seconds at this scale. The
    statistics are part of the transaction and rolled back with it.
    """
    tables = [m._meta.db_table for m in (Allocation, Job, JobEvent, Node, Queue, BusinessLine)]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE " + ", ".join(f'"{t}"' for t in tables))


@contextmanager
def scale_dataset(
    gpus: int, pending: int, running: int, seed: int = 0, dependents: int = 0
) -> Iterator[float]:
    """The benchmark cluster loaded for the ``with`` block, then rolled back; yields load seconds.
    ``dependents``: that many of its pending jobs wait for a whole array (``make_pipeline``).

    Holds the cluster lock for the whole block, so no cycle of a running portal can
    meet it: raises ``LoopRunning`` at once if the loop holds the lock. What the block
    writes is rolled back too, and an exception in it propagates after the rollback.
    """
    try:
        with transaction.atomic():
            if not try_cluster_lock():
                raise LoopRunning("the scheduling loop is running; stop the portal first")
            t0 = time.perf_counter()
            load_scale_dataset(gpus, pending, running, seed)
            if dependents:
                make_pipeline(dependents)
            yield time.perf_counter() - t0
            raise _Rollback
    except _Rollback:
        pass


def make_pipeline(dependents: int) -> None:
    """A pipeline of sweeps in the loaded cluster: the first ``dependents`` pending jobs
    become the tasks of an array (at most ``arrays.SIZE_MAX``) and the next ``dependents``
    the tasks of a second one, every task of which waits for the whole first
    (``Job.after_arrays``): what an evaluation sweep after a training sweep asks of the loop."""
    from scheduling.arrays import SIZE_MAX

    size = min(dependents, SIZE_MAX)
    pending = list(Job.objects.filter(state=Job.State.PENDING).order_by("pk")[: 2 * size])
    if len(pending) < 2 * size:
        raise ValueError(f"--dependents {dependents} needs {2 * size} pending jobs")
    user = get_user_model().objects.get(username="bench")
    made = []
    for part in (pending[:size], pending[size:]):
        array = JobArray.objects.create(name=f"sweep-{len(made)}", owner=user,
                                        queue=part[0].queue, spec=f"0-{size - 1}", size=size)  # fmt: skip
        for index, job in enumerate(part):
            job.array, job.array_index, job.queue = array, index, array.queue
            job.tier = part[0].tier
        Job.objects.bulk_update(part, ["array", "array_index", "queue", "tier"], batch_size=1000)
        made.append(array)
    first, second = made
    Job.after_arrays.through.objects.bulk_create(
        [Job.after_arrays.through(job_id=job.pk, jobarray_id=first.pk) for job in pending[size:]],
        batch_size=1000,
    )


def run_db_bench(
    gpus: int, pending: int, running: int, runs: int, seed: int = 0, dependents: int = 0
) -> dict:
    """Time ``runs`` full cycles at the given scale; everything is rolled back afterwards.

    Besides each cycle's wall-clock time, every phase of it (``CycleTrace``) and, for the
    same snapshot in the same run, ``plan()`` alone as ``bench.engine`` times it: on a
    shared machine the ratios (``cycle_over_plan_alone``, ``plan_in_cycle_over_alone``)
    mean more than the absolute figures. Medians are over the steady cycles after the
    first (which starts most jobs).
    """
    cycles, traces, alone, alone_check, cpu = [], [], [], [], []
    with scale_dataset(gpus, pending, running, seed, dependents) as load_s:
        for _ in range(runs):
            trace = CycleTrace()
            c0 = time.process_time()
            cycles.append(run_cycle(trace=trace))
            cpu.append((time.process_time() - c0) * 1000)
            traces.append(trace)
            assert trace.snapshot is not None and trace.now is not None
            t0 = time.perf_counter()
            result = engine.plan(trace.snapshot, trace.now)
            t1 = time.perf_counter()
            engine.check_plan(trace.snapshot, result)
            alone.append((t1 - t0) * 1000)
            alone_check.append((time.perf_counter() - t0) * 1000)
        cascade = _cascade() if dependents else None
    steady = slice(1, None) if runs > 1 else slice(None)
    times = [c.duration_ms for c in cycles]

    def med(values: list[float]) -> float:
        return round(statistics.median(values[steady]), 1)

    phases = {name: med([t.phases.get(name, 0.0) for t in traces]) for name in PHASES}
    median_ms, plan_alone = med(times), med(alone)
    return {
        "gpus": gpus, "pending": pending, "running": running, "runs": runs,
        "seed": seed, "dependents": dependents, "load_s": round(load_s, 2),
        "loadavg": _loadavg(),
        "first_ms": round(times[0], 1),
        "median_ms": median_ms,
        "p95_ms": round(percentile(times[steady], 95), 1),
        "cpu_median_ms": med(cpu),
        "phases_median_ms": phases,
        "phases_cpu_median_ms": {n: med([t.cpu.get(n, 0.0) for t in traces]) for n in PHASES},
        "plan_median_ms": round(statistics.median(c.plan_ms for c in cycles[steady]), 1),
        "plan_alone_median_ms": plan_alone,
        "plan_check_alone_median_ms": med(alone_check),
        "cycle_over_plan_alone": round(median_ms / plan_alone, 2) if plan_alone else None,
        "plan_in_cycle_over_alone": round(phases["plan"] / plan_alone, 2) if plan_alone else None,
        "starts_first": cycles[0].starts,
        "pending_by_reason_last": cycles[-1].pending_by_reason,
        "errors": sum(len(c.errors) for c in cycles),
        "violations": sum(len(c.violations) for c in cycles),
        **({"cascade": cascade} if cascade else {}),
    }  # fmt: skip


def _cascade() -> dict:
    """With a pipeline (``make_pipeline``): the first array's lowest waiting or running task
    cancelled by its owner, then one cycle timed, which cancels every task of the second
    array (they wait for the whole first): what a cascade of that many cancels costs, beside
    the steady cycles of the same run. Then the rest of the first array cancelled at once
    by its owner (``cancel_array``, the array page's button), timed."""
    from scheduling.array_services import cancel_array
    from scheduling.services import cancel_job

    first = JobArray.objects.order_by("pk").first()
    assert first is not None
    victim = first.tasks.filter(state__in=Job.ACTIVE_STATES).order_by("array_index").first()
    assert victim is not None, "every task of the first array has ended"
    cancel_job(first.owner, victim.pk)
    trace = CycleTrace()
    c0 = time.process_time()
    record = run_cycle(trace=trace)
    cpu = (time.process_time() - c0) * 1000
    second = JobArray.objects.order_by("pk").last()
    cancelled = second.tasks.filter(state=Job.State.CANCELLED).count()  # type: ignore[union-attr]
    # then the owner cancels what is left of the first array at once (the array page's
    # button, ``cancel_array``): one request's work, its tasks written together
    t0 = time.perf_counter()
    left = cancel_array(first.owner, first.pk)
    return {
        "cancelled": cancelled,
        "cycle_ms": round(record.duration_ms, 1),
        "cpu_ms": round(cpu, 1),
        "dependencies_ms": round(trace.phases.get("dependencies", 0.0), 1),
        "dependencies_cpu_ms": round(trace.cpu.get("dependencies", 0.0), 1),
        "events_ms": round(trace.phases.get("events", 0.0), 1),
        "cancel_array_tasks": len(left),
        "cancel_array_ms": round((time.perf_counter() - t0) * 1000, 1),
    }


def _loadavg() -> float | None:
    """The 1-minute load average while the benchmark ran (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None
