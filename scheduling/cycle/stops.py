"""Requests to stop running jobs: moves off leaving nodes, inference yields, suspensions
(a running job put on hold, ``scheduling.holds``), runs at their time limit
(``scheduling.time_limits``), preemptions, and the plan's migrations (consolidation:
checkpoint, then restart elsewhere).

Every stop is asked of the backend first; only when it accepts does the job become
``preempting`` (with a deadline after which ``reconcile.still_running`` kills it), so a
refused call leaves the job running and the next cycle asks again. Compare-and-set:
only jobs still running are stopped.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Value

from core import clock
from scheduling.clock import to_datetime, to_epoch
from scheduling.cycle.context import Cycle, production_policy
from scheduling.engine import types as et
from scheduling.engine.inference_yield import NodeTenant, yielders
from scheduling.engine.policy import victim_cost_gpu_h
from scheduling.holds import SUSPEND
from scheduling.models import CONSOLIDATION, Allocation, Job, Node
from scheduling.sql import bulk_set
from scheduling.time_limits import TIME_LIMIT, reached
from scheduling.time_limits import stop_words as limit_stop_words
from scheduling.transitions import set_state

# What a preemption writes (``updated_at`` as ``save`` would stamp it), and reads first.
PREEMPT_FIELDS = ("state", "stop_reason", "preempted_for_id", "preempt_deadline",
                  "move_to_node", "updated_at")  # fmt: skip
PREEMPT_READ = ("state", "backend_ref", "submitted_at")

# Why a job is asked to move, as its timeline says it (``Job.stop_reason`` -> words).
MOVE_WORDS = {
    "drain": "its node is being drained",
    "health": "its node is unhealthy",
    "inference": "online inference needs the GPUs back",
}


# The cycle's count of each kind of stop ``request_stops`` asks for (else ``moved``).
STOP_COUNTS = {SUSPEND: "suspended", TIME_LIMIT: "time_limits"}


def jobs_to_move(cycle: Cycle) -> dict[int, str]:
    """Running jobs that must stop, with why: drain, health or inference (they move),
    suspend (put on hold: they stop and wait until released; before moving), or
    time_limit (their run reached its time limit: they stop and fail; first, whatever
    else)."""
    leaving = set(
        Node.objects.filter(state__in=[Node.State.DRAINING, Node.State.UNHEALTHY])
        .values_list("name", flat=True)
    )  # fmt: skip
    stops: dict[int, str] = {}
    if leaving:
        for job_id, node in Allocation.objects.filter(
            node__name__in=leaving, job__state=Job.State.RUNNING
        ).values_list("job_id", "node__state"):
            stops[job_id] = "drain" if node == Node.State.DRAINING else "health"
    suspended = Job.objects.filter(state=Job.State.RUNNING, held_at__isnull=False)
    stops.update(dict.fromkeys(suspended.values_list("pk", flat=True), SUSPEND))
    for job_id in inference_yielders(cycle, set(stops)):
        stops.setdefault(job_id, "inference")
    stops.update(dict.fromkeys(runs_at_time_limit(cycle.now), TIME_LIMIT))
    return stops


# A run's limit as an interval PostgreSQL adds to its start (``runs_at_time_limit``).
_LIMIT = ExpressionWrapper(
    F("time_limit_minutes") * Value(timedelta(minutes=1)), output_field=DurationField()
)


def runs_at_time_limit(now: float) -> list[int]:
    """Running jobs whose run has reached its time limit by ``now`` (``time_limits``): the
    ids only, compared by PostgreSQL (a cycle with thousands of limited runs reads none of
    their times: 19 ms against 5 ms for the running jobs' ids, when they were read)."""
    return list(
        Job.objects.filter(
            state=Job.State.RUNNING, time_limit_minutes__isnull=False, started_at__isnull=False
        )
        .alias(limit_at=ExpressionWrapper(F("started_at") + _LIMIT, output_field=DateTimeField()))
        .filter(limit_at__lte=to_datetime(now))
        .values_list("pk", flat=True)
    )


def stop_words(job: Job, cause: str) -> str:
    """The timeline's line of a stop ``request_stops`` asked for."""
    if cause == TIME_LIMIT:
        return limit_stop_words(job.time_limit_minutes or 0)
    if cause != SUSPEND:
        return f"asked to checkpoint and move: {MOVE_WORDS[cause]}"
    by = job.held_by.username if job.held_by else "a former user"
    fresh = "" if job.checkpoint_path else (
        "; it has no checkpoint path: unless it saves its own progress it restarts from the "
        "beginning when released"
    )  # fmt: skip
    return f"asked to checkpoint and stop: suspended by {by}; it waits, held, until released{fresh}"


def inference_yielders(cycle: Cycle, moving: set[int]) -> set[int]:
    """Jobs that yield GPUs to online inference: on each pressured node, the cheapest
    preemptible jobs that free what inference lacks (``engine.inference_yield``), not
    every job there; jobs already stopping or ``moving`` count first. A backend that
    names pressured nodes without the shortfall has every preemptible job there yield."""
    pressure = cycle.obs.inference_pressure
    if not pressure:
        return set()
    refs = {ref for node_refs in pressure.values() for ref in node_refs}
    shortfall = {o.name: o.inference_shortfall for o in cycle.obs.nodes if o.name in pressure}
    rows = Allocation.objects.filter(
        node__name__in=pressure, job__state__in=[Job.State.RUNNING, Job.State.PREEMPTING]
    ).values_list(
        "node__name", "job_id", "job__state", "job__preemptible", "job__backend_ref",
        "job__gpus", "job__started_at", "job__last_checkpoint_at",
    )  # fmt: skip
    policy = production_policy()
    weight = policy.victim_given_weight
    tenants: dict[str, dict[int, list]] = {}
    for node, job_id, state, preemptible, ref, gpus, started, checkpoint in rows:
        here = tenants.setdefault(node, {})
        if job_id in here:
            here[job_id][1] += 1
            continue
        began = to_epoch(started) or cycle.now
        cost = victim_cost_gpu_h(gpus, began, to_epoch(checkpoint), cycle.now, weight)
        leaving = state != Job.State.RUNNING or job_id in moving
        ok = preemptible and ref in refs
        here[job_id] = [job_id, 1, cost, leaving, ok]
    per_eviction = policy.eviction_cost_gpu_h
    chosen: set[int] = set()
    for node, here in tenants.items():
        listed = [NodeTenant(*t) for t in here.values()]
        need = shortfall.get(node, 0) or sum(t.gpus_here for t in listed)
        chosen.update(yielders(listed, need, per_eviction))
    return chosen


def request_stops(cycle: Cycle) -> None:
    """Ask running jobs to move off draining/unhealthy nodes and off inference peaks, to
    stop while held (suspend), and to stop at their time limit."""
    grace = production_policy().grace_seconds
    stops = jobs_to_move(cycle)
    running = Job.objects.select_for_update(no_key=True)  # as ``launch.start_all``
    for job in running.filter(pk__in=stops, state=Job.State.RUNNING):
        cause = stops[job.pk]
        if cause == SUSPEND and job.held_at is None:
            continue  # compare-and-set: released since it was read
        if cause == TIME_LIMIT and not reached(
            to_epoch(job.started_at), job.time_limit_minutes, cycle.now
        ):
            continue  # compare-and-set: its limit was raised since it was read
        if not cycle.call(f"stop {job.backend_ref}", cycle.backend.checkpoint_and_stop,
                          job.backend_ref, grace):  # fmt: skip
            continue
        set_state(job, Job.State.PREEMPTING)
        job.stop_reason = cause
        job.preempt_deadline = to_datetime(cycle.now + grace)
        job.save(update_fields=["state", "stop_reason", "preempt_deadline", "updated_at"])
        cycle.event(job, "checkpointing", stop_words(job, cause))
        cycle.report.counts[STOP_COUNTS.get(cause, "moved")] += 1


def _lock_jobs(ids: set[int]) -> dict[int, Job]:
    """The jobs the plan stops, read and locked in one statement (in id order)."""
    rows = Job.objects.select_for_update(no_key=True).filter(pk__in=ids).order_by("pk")
    return {j.pk: j for j in rows.only(*PREEMPT_READ)}


def _stopping(
    job: Job, reason: str, for_job_id: int | None, deadline: float, move_to: str = ""
) -> Job:
    """``job`` (in memory) asked to stop by ``deadline`` to make room for ``for_job_id``
    (a move: ``move_to``, the node where room is kept for its restart)."""
    set_state(job, Job.State.PREEMPTING)
    job.stop_reason = reason
    job.move_to_node = move_to
    job.preempted_for_id = for_job_id
    job.preempt_deadline = to_datetime(deadline)
    job.updated_at = clock.now()
    return job


def _write_stopping(stopped: list[Job]) -> None:
    """The jobs the backend agreed to stop, written in one statement."""
    bulk_set(Job, PREEMPT_FIELDS,
             [(j.pk, *(getattr(j, f) for f in PREEMPT_FIELDS)) for j in stopped])  # fmt: skip


def preempt(cycle: Cycle, preemptions: tuple[et.Preemption, ...]) -> None:
    """Stop the plan's victims: gracefully (checkpoint, then stop) or cold (killed).

    The victims are read and locked in one statement, the backend is asked victim by
    victim in the plan's order, and those it accepted are written in one statement.
    """
    if not preemptions:
        return
    victims = _lock_jobs({p.victim_id for p in preemptions})
    stopped: list[Job] = []
    for p in preemptions:
        victim = victims.get(p.victim_id)
        if victim is None or victim.state != Job.State.RUNNING:
            continue  # compare-and-set: it moved on since the snapshot
        grace = max(0.0, p.grace_deadline - cycle.now) if p.mode == et.GRACEFUL else 0.0
        call = cycle.backend.checkpoint_and_stop if grace > 0 else cycle.backend.kill
        args = (victim.backend_ref, grace) if grace > 0 else (victim.backend_ref,)
        if not cycle.call(f"preempt {victim.backend_ref}", call, *args):
            continue
        stopped.append(_stopping(victim, "preemption", p.for_job_id, p.grace_deadline))
        mode = "gracefully: checkpoint, then stop" if grace > 0 else "cold (killed)"
        cycle.event(victim, "preempted",
                    f"preempted {mode} to make room for job #{p.for_job_id}")  # fmt: skip
        cycle.report.counts["preemptions"] += 1
    _write_stopping(stopped)


def moved_for(for_job_id: int | None) -> str:
    """Why a job moves, in words: for a waiting gang (consolidation) or so its node comes
    free whole before one asks (defragmentation, ``for_job_id`` None)."""
    if for_job_id is None:
        return "so its node comes free whole for multi-GPU jobs (defragmentation)"
    return f"to make room for job #{for_job_id} (consolidation)"


def moved_to(node: str) -> str:
    """Where a moved job restarts, in words: ``another node (n07, where room is kept for
    it)`` (``KEPT_ROOM`` reads the node back), or ``another node`` when none was kept."""
    return f"another node ({node}, where room is kept for it)" if node else "another node"


# The node a ``moving`` or ``moved`` event names as kept (``moved_to``), for ``bench_demo``.
KEPT_ROOM = re.compile(r"another node \(([^,()]+), where room is kept for it\)")


def migrate(cycle: Cycle, migrations: tuple[et.Migration, ...]) -> None:
    """Move the plan's jobs for consolidation: each is asked to checkpoint and stop (as a
    graceful preemption), and goes back to pending with its progress to restart elsewhere
    (``finished.requeue_after_stop``); its timeline says it moves to make room, not that it
    was preempted. Read, locked and written in one statement each, like ``preempt``."""
    if not migrations:
        return
    jobs = _lock_jobs({m.job_id for m in migrations})
    stopped: list[Job] = []
    for m in migrations:
        job = jobs.get(m.job_id)
        if job is None or job.state != Job.State.RUNNING:
            continue  # compare-and-set: it moved on since the snapshot
        grace = max(0.0, m.grace_deadline - cycle.now)
        if not cycle.call(f"move {job.backend_ref}", cycle.backend.checkpoint_and_stop,
                          job.backend_ref, grace):  # fmt: skip
            continue
        stopped.append(_stopping(job, CONSOLIDATION, m.for_job_id, m.grace_deadline, m.to_node))
        cycle.event(job, "moving",
                    f"asked to checkpoint and move {moved_for(m.for_job_id)}: it restarts "
                    f"from its checkpoint on {moved_to(m.to_node)}; this is not a "
                    "preemption")  # fmt: skip
        cycle.report.counts["migrations"] += 1
    _write_stopping(stopped)
