"""Observe and reconcile: the backend's truth wins over what the database remembers.

``reconcile`` brings the ``Node`` rows in line with the observed nodes (discovering new
ones, isolating sick ones, sweeping residual processes, passing cordons both ways) and
the running jobs in line with the observed runs: progress and checkpoints are recorded,
ended runs are settled (``finished.finish_runs``), cancelled jobs release their GPUs,
and a run the database does not know is adopted when it is a lost launch of a waiting
job, killed when its job moved on, and reported as drift when it is foreign work.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Max

from core import events
from core.realtime import publish_on_commit
from scheduling.backends.base import ENDED, FAILED, ObservedJob, ObservedNode
from scheduling.clock import to_datetime, to_epoch
from scheduling.cycle.backoff import BACKOFF_FIELDS
from scheduling.cycle.backoff import clear as clear_backoff
from scheduling.cycle.context import Cycle
from scheduling.cycle.finished import finish_runs, run_row
from scheduling.cycle.isolation import clean_residual, isolate
from scheduling.engine import explain
from scheduling.engine import types as et
from scheduling.models import Allocation, Job, JobRun, Node
from scheduling.sql import bulk_set
from scheduling.transitions import set_state

NODE_FIELDS = ["health", "health_detail", "residual_gpus", "state", "state_reason",
               "uncordon_requested", "updated_at"]  # fmt: skip
# What ``sync_nodes`` compares every node on (``_needs_attention``).
NODE_CHECK = ("name", "health", "health_detail", "residual_gpus", "uncordon_requested", "state")
# What ``sync_jobs`` compares every running job on (``Run``).
RUN_FIELDS = ("id", "state", "backend_ref", "progress_seconds", "last_checkpoint_at",
              "preempt_deadline")  # fmt: skip


def reconcile(cycle: Cycle) -> None:
    """Nodes first (a node isolated now makes its jobs move in this cycle), then jobs."""
    sync_nodes(cycle)
    sync_jobs(cycle)


def _needs_attention(row: tuple, o: ObservedNode) -> bool:
    """Would ``sync_nodes`` change, call or raise anything for this node (``NODE_CHECK`` row)?"""
    _name, health, detail, residual, uncordon, state = row
    ready = state == Node.State.READY
    return (
        (health, detail, residual) != (o.health, o.health_detail, len(o.residual_gpus))
        or uncordon
        or (ready and (o.health != "ok" or o.cordoned))
        or (not ready and not o.cordoned)
        or bool(o.residual_gpus)
    )


def sync_nodes(cycle: Cycle) -> None:
    """Create discovered nodes; update health, residual GPUs and cordons of known ones.

    Every node is compared on a few columns; only those where something is to be done are
    read as rows (most of a large cluster's nodes agree with the backend every cycle).
    """
    known = {row[0]: row for row in Node.objects.values_list(*NODE_CHECK)}
    attention = [o.name for o in cycle.obs.nodes if o.name in known
                 and _needs_attention(known[o.name], o)]  # fmt: skip
    # Locked: these rows are written back whole (``NODE_FIELDS``) after the backend calls
    # below, so a cordon committed meanwhile would be undone; on-call's writers wait instead.
    db_nodes = (
        {n.name: n for n in Node.objects.select_for_update().filter(name__in=attention)}
        if attention
        else {}
    )
    created = []
    changed: list[Node] = []
    for o in cycle.obs.nodes:
        if o.name in known and o.name not in db_nodes:
            continue  # agrees with the backend: nothing to do
        node = db_nodes.get(o.name)
        if node is None:  # discovered on the backend
            created.append(
                Node(name=o.name, rack=o.rack, block=o.block, gpu_model=o.gpu_model,
                     gpu_memory_gb=o.gpu_memory_gb, gpus_total=o.gpus_total, rdma=o.rdma,
                     inference=o.inference, health=o.health, health_detail=o.health_detail,
                     joined_at=cycle.stamp())
            )  # fmt: skip
            cycle.report.drift.append(f"node {o.name} discovered on the backend")
            continue
        dirty = False
        residual = len(o.residual_gpus)
        for attr, value in (("health", o.health), ("health_detail", o.health_detail),
                            ("residual_gpus", residual)):  # fmt: skip
            if getattr(node, attr) != value:
                setattr(node, attr, value)
                dirty = True
        if node.uncordon_requested:
            if cycle.call(f"uncordon {node.name}", cycle.backend.uncordon, node.name):
                node.uncordon_requested = False
                dirty = True
        elif node.state == Node.State.READY and o.health != "ok":
            isolate(cycle, node, o.health_detail or o.health)
            dirty = True
        elif node.state == Node.State.READY and o.cordoned:
            node.state = Node.State.CORDONED
            node.state_reason = "cordoned outside the portal (seen on the backend)"
            cycle.report.drift.append(f"node {node.name} cordoned outside the portal")
            dirty = True
        elif node.state != Node.State.READY and not o.cordoned:
            cycle.call(f"cordon {node.name}", cycle.backend.cordon, node.name, node.state_reason)
        if o.residual_gpus:
            clean_residual(cycle, node, len(o.residual_gpus))
        if dirty:
            # bulk_update sets no auto_now field: the node page's "Last change" is this cycle
            node.updated_at = cycle.stamp()
            changed.append(node)
    if created:
        Node.objects.bulk_create(created)
    if changed:
        Node.objects.bulk_update(changed, NODE_FIELDS)
        for node in changed:
            publish_on_commit(
                *events.node_updated(node.name, node.state, node.state_reason,
                                     health=node.health, residual_gpus=node.residual_gpus)
            )  # fmt: skip


@dataclass
class Run:
    """A running or preempting job as ``sync_jobs`` compares it with its run (``RUN_FIELDS``)."""

    pk: int
    state: str
    backend_ref: str
    progress_seconds: float
    last_checkpoint_at: datetime | None
    preempt_deadline: datetime | None


def sync_jobs(cycle: Cycle) -> None:
    """Running and preempting jobs against the observed runs; then adopt or report the rest.

    All of them are locked and compared on a few columns; only the jobs whose run ended
    or must be killed are read as rows.
    """
    observed = {j.ref: j for j in cycle.obs.jobs}
    runs = [
        Run(*row)
        # The job rows only: their queues locked too would hold every submission to them
        # (an insert takes a key-share lock on its queue) for the rest of the cycle.
        for row in Job.objects.select_for_update(of=("self",), no_key=True)
        .filter(state__in=[Job.State.RUNNING, Job.State.PREEMPTING])
        .values_list(*RUN_FIELDS)
    ]
    known_refs = {r.backend_ref for r in runs}
    ended_runs: list[tuple[int, str, float, str, float | None]] = []
    progressed: list[Run] = []
    overdue: list[int] = []
    for run in runs:
        o = observed.get(run.backend_ref)
        if o is None:
            ended_runs.append(
                (run.pk, FAILED, run.progress_seconds, "vanished from the backend", None)
            )
        elif o.state in ENDED:
            ended_runs.append((run.pk, o.state, o.progress_s, o.end_reason, o.ended_at))
        else:
            still_running(cycle, run, o, progressed, overdue)
    bulk_set(Job, ["progress_seconds", "last_checkpoint_at"],
             [(r.pk, r.progress_seconds, r.last_checkpoint_at) for r in progressed])  # fmt: skip
    if overdue:
        jobs = Job.objects.in_bulk(overdue)
        for pk in overdue:
            job = jobs[pk]
            cycle.call(f"kill {job.backend_ref}", cycle.backend.kill, job.backend_ref)
            cycle.event(job, "killed", "grace period over: stopped cold at the deadline")
    if ended_runs:
        jobs = Job.objects.select_related("queue").in_bulk([pk for pk, *_ in ended_runs])
        finish_runs(cycle, [(jobs[pk], *end) for pk, *end in ended_runs])
    release_cancelled(cycle)
    # Runs the database does not know: adopt lost launches, report foreign work.
    for ref, o in observed.items():
        if ref in known_refs or o.state in ENDED:
            continue
        if o.job_id is not None:
            adopt(cycle, o)
        else:
            cycle.report.drift.append(f"run {ref} was started outside the portal")


def release_cancelled(cycle: Cycle) -> None:
    """Cancelled jobs: stop a run that is still alive; free the GPUs once it has ended."""
    observed = {j.ref: j for j in cycle.obs.jobs}
    for job in Job.objects.filter(state=Job.State.CANCELLED, allocations__isnull=False).distinct():
        o = observed.get(job.backend_ref)
        if o is not None and o.state not in ENDED:
            cycle.call(f"kill {job.backend_ref}", cycle.backend.kill, job.backend_ref)
        else:
            model = min(job.allocations.values_list("node__gpu_model", flat=True), default="")
            freed, _ = job.allocations.all().delete()
            # Never before the cancel itself: its save and its timeline line (cluster time).
            latest = job.events.aggregate(at=Max("at"))["at"]
            ended = cycle.ended(job, o.ended_at if o is not None else None)
            finished = max(t for t in (ended, job.updated_at, latest) if t)
            Job.objects.filter(pk=job.pk).update(finished_at=finished)
            if job.started_at is not None:
                run_row(job, model, finished, JobRun.Outcome.CANCELLED).save()
            # The open job page hears of it (its finish time, its GPUs gone) as of any end.
            cycle.event(job, "stopped", f"its run has ended; {explain.count(freed, 'GPU')} "
                        "freed", at=finished)  # fmt: skip


def still_running(
    cycle: Cycle, run: Run, o: ObservedJob, progressed: list[Run], overdue: list[int]
) -> None:
    """Note new progress (into ``progressed``); a run past its preemption deadline goes
    into ``overdue`` (``sync_jobs`` kills it)."""
    ckpt = to_datetime(o.last_checkpoint_at)
    # Progress is for display: write it when a checkpoint lands or every 5 minutes of work.
    if (ckpt and ckpt != run.last_checkpoint_at) or o.progress_s - run.progress_seconds >= 300:
        run.progress_seconds = o.progress_s
        run.last_checkpoint_at = ckpt or run.last_checkpoint_at
        progressed.append(run)
    if (
        run.state == Job.State.PREEMPTING
        and run.preempt_deadline
        and to_epoch(run.preempt_deadline) <= cycle.now
        and o.state != "stopping"
    ):
        overdue.append(run.pk)


def adopt(cycle: Cycle, o: ObservedJob) -> None:
    """A run of a portal job the database does not know: a launch whose commit was lost.

    Adopted when its job still waits and its GPUs are free in the database; killed
    otherwise (the job moved on, or another job holds the GPUs).
    """
    job = Job.objects.select_for_update(no_key=True).filter(pk=o.job_id).first()
    if job is None or job.state != Job.State.PENDING:
        cycle.call(f"kill orphan {o.ref}", cycle.backend.kill, o.ref)
        cycle.report.drift.append(f"run {o.ref} had no waiting job: killed")
        return
    if not allocate(cycle, job, o.placement):
        cycle.call(f"kill {o.ref}", cycle.backend.kill, o.ref)
        return
    set_state(job, Job.State.RUNNING)
    job.backend_ref = o.ref
    job.attempt = max(job.attempt, int(o.ref.rsplit("-", 1)[1]))
    job.started_at = cycle.stamp(job)  # this run's start (not an earlier run's)
    job.run_start_progress_seconds = job.progress_seconds  # the launch started it from there
    clear_backoff(job)
    job.save(update_fields=["state", "backend_ref", "attempt", "started_at",
                            "run_start_progress_seconds", *BACKOFF_FIELDS, "updated_at"])  # fmt: skip
    cycle.event(job, "adopted", f"found running on the backend as {o.ref}: adopted")
    cycle.report.drift.append(f"run {o.ref} adopted for job {job.pk}")


def allocate(cycle: Cycle, job: Job, slots: tuple[et.Slot, ...]) -> bool:
    """Give ``job`` exactly the GPUs of ``slots``; False (and an error) if any is taken."""
    names = {s.node for s in slots}
    node_ids = dict(Node.objects.filter(name__in=names).values_list("name", "id"))
    rows = [Allocation(job=job, node_id=node_ids[s.node], gpu_index=g)
            for s in slots if s.node in node_ids for g in s.gpus]  # fmt: skip
    try:
        with transaction.atomic():
            Allocation.objects.filter(job=job).delete()
            Allocation.objects.bulk_create(rows)
    except IntegrityError:
        cycle.report.errors.append(f"job {job.pk}: GPUs already allocated; not placed")
        return False
    return True
