"""Launching the plan's starts, with backoff after transient launch errors.

Compare-and-set: only jobs still pending, not put on hold and not asked to begin later,
are started. Each launch is told to the backend first, under the run's deterministic name
(``run_ref``), so a launch whose commit is lost is adopted by the next cycle, never made
twice; a launch is never retried within the cycle. The GPU allocations of all successful
launches are written in one statement (the unique (node, GPU) constraint guards it),
falling back to one job at a time if it is refused, so one bad row cannot block the
others. A permanent launch error fails the job with the backend's words; a transient one
leaves it pending, backing off (``backoff``), with a ``LAUNCH_RETRY`` pending reason. A
start whose node left service after the snapshot is not launched; the job waits with
``NODES_UNAVAILABLE``.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Q

from quotas.models import Queue
from scheduling.backends.base import BackendError, LaunchRequest, run_ref
from scheduling.clock import to_datetime
from scheduling.cycle.backoff import BACKOFF_FIELDS, LAUNCH_RETRY, Streak, clear, record_failure
from scheduling.cycle.context import Cycle, fmt_placement
from scheduling.cycle.reconcile import allocate
from scheduling.cycle.telemetry import record_starts, record_swaps
from scheduling.engine import explain
from scheduling.engine import types as et
from scheduling.models import Allocation, Job, Node
from scheduling.sql import bulk_set
from scheduling.time_limits import for_start, limit_s, limit_words
from scheduling.transitions import set_state

STARTED_FIELDS = ("state", "attempt", "backend_ref", "started_at", "run_start_progress_seconds",
                  "time_limit_minutes",
                  "borrowed", "pending_code", "queue_position", "estimated_start", "move_to_node",
                  *BACKOFF_FIELDS)  # fmt: skip

# What ``launch`` made of one start.
LAUNCHED, REFUSED, RETRY = "launched", "refused", "retry"


def start_all(cycle: Cycle, starts: tuple[et.Start, ...], swaps: tuple[et.Swap, ...] = ()) -> None:
    """Launch the plan's starts, then record them in a few statements; the work a
    launched quota swap displaces is marked borrowed (``mark_displaced``)."""
    if not starts:
        return
    displaced = {sw.job_id: sw.displaced for sw in swaps}
    jobs = {
        j.pk: j
        # FOR NO KEY UPDATE, as every writer of a job row: a FOR UPDATE lock would conflict
        # with the key-share lock a submission's links take on the jobs they wait for when
        # it commits (deferred foreign keys), and two such, taken in other orders, deadlock
        for j in Job.objects.select_for_update(no_key=True).filter(
            # not put on hold since the snapshot either (``scheduling.holds``), nor its
            # start put off (``scheduling.begin_time_services``)
            Q(begin_at__isnull=True) | Q(begin_at__lte=to_datetime(cycle.now)),
            pk__in=[s.job_id for s in starts],
            state=Job.State.PENDING,
            held_at__isnull=True,
        )
    }
    # Held until the cycle commits: a node cordoned, drained or isolated since the snapshot
    # takes no new work (V5), and a cordon arriving from now on waits for this cycle.
    isolated = {
        name: state
        for name, state in Node.objects.select_for_update(no_key=True)
        .filter(name__in={s.node for start in starts for s in start.placement})
        .order_by("name")
        .values_list("name", "state")
        if state != Node.State.READY
    }
    given = queue_limits({j.queue_id for j in jobs.values() if j.time_limit_minutes is None})
    from_queue: set[int] = set()
    launched: list[tuple[Job, et.Start]] = []
    retried: list[Job] = []
    for start in starts:
        job = jobs.get(start.job_id)
        if job is None:
            continue  # cancelled, held, put off (or adopted) since the snapshot
        if lost := {s.node: isolated[s.node] for s in start.placement if s.node in isolated}:
            # its node was isolated since the snapshot: planned again next cycle, and says so
            cycle.launch_verdicts[job.pk] = out_of_service(lost)
            continue
        streak = Streak.of(job)
        if streak and not streak.due(cycle.now):
            # Backing off after a transient launch failure: the backend is not asked.
            cycle.report.counts["launch_backoff"] += 1
            cycle.launch_verdicts[job.pk] = streak.verdict()
            continue
        if job.time_limit_minutes is None and job.queue_id in given:
            # no limit of its own, and its queue bounds runs since it was submitted: the
            # backend is given it, and it is kept once the job runs
            job.time_limit_minutes = given[job.queue_id]
            from_queue.add(job.pk)
        outcome = launch(cycle, job, start)
        if outcome == LAUNCHED:
            launched.append((job, start))
        elif outcome == RETRY:
            retried.append(job)
    bulk_set(Job, BACKOFF_FIELDS,
             [(j.pk, *(getattr(j, f) for f in BACKOFF_FIELDS)) for j in retried])  # fmt: skip
    placed = allocate_many(cycle, launched)
    sizes = {n.name: n.gpus_total for n in cycle.obs.nodes}
    for job, start in placed:
        set_state(job, Job.State.RUNNING)
        job.attempt += 1
        job.started_at = cycle.stamp(job)
        job.run_start_progress_seconds = job.progress_seconds  # from its checkpoint
        job.borrowed = start.borrowed
        job.pending_code = ""
        job.queue_position = None
        job.estimated_start = None
        job.move_to_node = ""  # a moved job restarted: no room kept for it any more
        clear(job)
        borrowed = " on borrowed idle capacity (reclaimable)" if start.borrowed else ""
        if job.pk in displaced:
            n = len(displaced[job.pk])
            borrowed = (f" within its quota; {explain.count(n, 'preemptible job')} of its queue "
                        f"or line now {explain.verb(n, 'runs', 'run')} on borrowed capacity in "
                        "its place")  # fmt: skip
        cycle.event(job, "started", f"started on {fmt_placement(start.placement, sizes)}{borrowed}")
        if job.pk in from_queue:
            cycle.event(job, "time_limit", (
                f"it gave no time limit: its queue's for such jobs applies, "
                f"{limit_words(job.time_limit_minutes or 0)} a run"
            ))  # fmt: skip
    bulk_set(Job, STARTED_FIELDS,
             [(j.pk, *(getattr(j, f) for f in STARTED_FIELDS)) for j, _ in placed])  # fmt: skip
    cycle.report.counts["starts"] += len(placed)
    record_starts([job for job, _ in placed], cycle.released_at)
    mark_displaced(cycle, [(j, displaced[j.pk]) for j, _ in placed if j.pk in displaced])


def queue_limits(queue_ids: set[int]) -> dict[int, int]:
    """By queue (of ``queue_ids``), the time limit a job that gives none starts with now
    (``time_limits.for_start``), for the queues that have one: one query, none without
    ids."""
    if not queue_ids:
        return {}
    rows = Queue.objects.filter(pk__in=queue_ids).values_list(
        "pk", "default_time_limit_minutes", "max_time_limit_minutes"
    )
    return {pk: limit for pk, default, most in rows if (limit := for_start(None, default, most))}


def out_of_service(nodes: dict[str, str]) -> et.Verdict:
    """The pending reason of a planned start skipped because nodes it was placed on left
    service after the snapshot (cordoned, drained or isolated; ``nodes``: name -> state):
    ``NODES_UNAVAILABLE``, naming them, until the next cycle places it again. Without it
    the job showed the reason of the cycle before for one cycle."""
    its = "its node" if len(nodes) == 1 else "its nodes"
    named = ", ".join(f"{name} ({state})" for name, state in sorted(nodes.items()))
    return et.Verdict(
        code=et.Code.NODES_UNAVAILABLE,
        message=(
            f"It was about to start, but {its} {named} went out of service after this cycle "
            "placed it there; the next cycle places it on nodes in service."
        ),
        details={
            "unavailable_nodes": len(nodes),
            explain.NO_ESTIMATE: "it is placed again on the next cycle",
        },
        remedy="Nothing to do: the next cycle, within seconds, places it again.",
    )


def mark_displaced(cycle: Cycle, swaps: list[tuple[Job, tuple[int, ...]]]) -> None:
    """Quota swaps (engine ``quota_swap``) that launched, each a started job and the running
    jobs it displaced: those are on borrowed capacity from now on (``Job.borrowed``: the job
    page and the API say "reclaimable"), each told why on its timeline, and counted for
    ``/metrics``. A job still flagged from an earlier displacement (its scope had fallen
    within quota, so it was displaceable again) gets no second line: its page did not
    change. Only jobs still running are touched (the cycle holds the running jobs' rows,
    so nothing should have moved; the update keeps the guard): a job that stopped is left
    alone."""
    ids = [rid for _, displaced in swaps for rid in displaced]
    if not ids:
        return
    # the running ones, and whether each was flagged already (the cycle holds their rows)
    rows = {
        pk: (queue_id, flagged)
        for pk, queue_id, flagged in Job.objects.filter(pk__in=ids, state=Job.State.RUNNING)
        .values_list("pk", "queue_id", "borrowed")
    }  # fmt: skip
    bulk_set(Job, ("borrowed",), [(rid, True) for rid in rows], where="t.state = 'running'")
    for job, displaced in swaps:
        for rid in displaced:
            if rid in rows and not rows[rid][1]:
                cycle.event(
                    rid, "borrowed",
                    f"now runs beyond its quota, on borrowed capacity, and is among the first "
                    f"reclaimed if the lenders need their GPUs back: job {job.pk}, which may "
                    f"not be preempted, started within the quota in its place",
                    Job.State.RUNNING,
                )  # fmt: skip
    record_swaps([job.queue_id for job, _ in swaps], [q for q, _ in rows.values()])


def launch(cycle: Cycle, job: Job, start: et.Start) -> str:
    """Ask the backend to launch the job's next run: ``LAUNCHED``, ``REFUSED`` for good
    (the job failed), or ``RETRY`` (a transient error: the job backs off)."""
    ref = run_ref(job.pk, job.attempt + 1)
    request = LaunchRequest(
        ref=ref, job_id=job.pk, name=job.name, placement=start.placement,
        progress_s=job.progress_seconds,
        checkpoint_interval_s=job.checkpoint_interval_minutes * 60.0,
        checkpoint_path=job.checkpoint_path, exclusive_node=job.exclusive_node,
        sim_duration_s=(job.sim_duration_minutes or 0) * 60.0 or None,
        array_id=job.array_id, array_index=job.array_index,
        time_limit_s=limit_s(job.time_limit_minutes),
    )  # fmt: skip
    cycle.report.touched_backend = True
    try:
        cycle.backend.launch(request)
    except BackendError as err:
        cycle.report.errors.append(f"launch {ref}: {err}")
        if not err.permanent:
            launch_retry(cycle, job, err)
            return RETRY
        set_state(job, Job.State.FAILED)
        job.failure_reason = f"the cluster refused to start it: {err}"
        job.finished_at = cycle.stamp(job)
        job.save(update_fields=["state", "failure_reason", "finished_at", "updated_at"])
        cycle.event(job, "failed", job.failure_reason)
        cycle.report.counts["failed"] += 1
        return REFUSED
    job.backend_ref = ref
    return LAUNCHED


def launch_retry(cycle: Cycle, job: Job, err: BackendError) -> None:
    """A transient launch failure: the job stays pending and backs off (``launch_backoff_s``).

    The streak grows on the job (written by ``start_all``); the reason written now is the
    one the next cycles compute from it, so while unchanged it is not written again.
    """
    streak = record_failure(job, cycle.now, str(err))
    cycle.event(
        job, LAUNCH_RETRY,
        f"the cluster could not start it right now ({err}); still waiting, next attempt "
        f"in {streak.wait_s:.0f} s or later (transient failure {streak.attempts})",
    )  # fmt: skip
    cycle.launch_verdicts[job.pk] = streak.verdict()
    cycle.report.counts["launch_retries"] += 1


def allocate_many(cycle: Cycle, launched: list[tuple[Job, et.Start]]) -> list[tuple[Job, et.Start]]:
    """Write the allocations of launched runs; a run whose GPUs are refused is killed."""
    node_ids = dict(Node.objects.values_list("name", "id"))
    rows = [
        Allocation(job_id=job.pk, node_id=node_ids[s.node], gpu_index=g)
        for job, start in launched for s in start.placement for g in s.gpus
    ]  # fmt: skip
    try:
        with transaction.atomic():
            Allocation.objects.bulk_create(rows, batch_size=2000)
        return launched
    except IntegrityError:
        pass
    placed = []
    for job, start in launched:
        if allocate(cycle, job, start.placement):
            placed.append((job, start))
        else:
            cycle.call(f"kill {job.backend_ref}", cycle.backend.kill, job.backend_ref)
    return placed
