"""``run_cycle``: observe -> reconcile -> stop -> snapshot -> plan -> apply, in one transaction.

Scheduled maintenance moves on first, at the cycle's time (``nodes.maintenance.advance_windows``:
a window starting drains its nodes, one ending returns them), so the same iteration tells the
backend and moves the jobs off.

``run_cycle`` is the one writer of job placement. It runs under a single-flight lock
(``scheduling.cluster_lock``) and inside one database transaction: a worker that dies
part-way rolls everything back, and the next cycle repairs from the backend's truth.
Runs are named deterministically (``portal-<job>-<attempt>``) so a launch whose commit
was lost is adopted, never launched twice; the ``Allocation`` table's unique (node, GPU)
constraint makes a GPU counted twice impossible. Each step lives in its own module of
this package; this one only orders them and writes the summary row.
"""

from __future__ import annotations

import gc
import logging
import time

from django.db import transaction

from core import clock, events
from core.realtime import publish_on_commit
from scheduling import alerts, engine
from scheduling.alerts import raise_alert
from scheduling.arrays import started_ends
from scheduling.backend_factory import get_backend
from scheduling.clock import to_datetime
from scheduling.cluster_lock import try_cluster_lock, wait_cluster_lock
from scheduling.cycle.context import Cycle, production_policy
from scheduling.cycle.dependencies import cancel_unreachable
from scheduling.cycle.finished import remember_models
from scheduling.cycle.launch import start_all
from scheduling.cycle.marks import write_marks
from scheduling.cycle.phases import CycleTrace, PhaseTimer
from scheduling.cycle.reconcile import reconcile, release_cancelled
from scheduling.cycle.stops import migrate, preempt, request_stops
from scheduling.cycle.telemetry import record_cycle
from scheduling.cycle.verdicts import counts_by_code, write_verdicts
from scheduling.dependencies import held_verdicts
from scheduling.engine import types as et
from scheduling.models import SchedulingCycle
from scheduling.nodes.maintenance import advance_windows
from scheduling.observers import plan_applied
from scheduling.prediction import RuntimePredictor
from scheduling.snapshot import build_snapshot

log = logging.getLogger(__name__)


def apply(
    cycle: Cycle, plan: et.Plan, rows: dict[int, dict], timer: PhaseTimer | None = None
) -> None:
    """Carry out the engine's plan: preemptions and migrations first, then the borrowed
    flags, then starts, then verdicts."""
    timer = timer or PhaseTimer()
    with timer.phase("preempt"):
        preempt(cycle, plan.preemptions)
        migrate(cycle, plan.migrations)
    with timer.phase("starts"):
        write_marks(cycle, plan.marks)
        start_all(cycle, plan.starts, plan.swaps)
    with timer.phase("verdicts"):
        write_verdicts(cycle, plan, rows)


def plan_and_apply(
    cycle: Cycle, timer: PhaseTimer, trace: CycleTrace | None = None
) -> tuple[list[str], dict[str, int]]:
    """Snapshot, plan and apply; returns the plan's invariant violations and pending counts."""
    with timer.phase("snapshot"):
        ctx = build_snapshot(cycle.obs, production_policy(), RuntimePredictor.from_history(),
                             cycle.recent_models)  # fmt: skip
    if trace is not None:
        trace.snapshot, trace.now = ctx.snapshot, cycle.obs.now
    cycle.released_at = ctx.released_at
    with timer.phase("plan"):
        plan = engine.plan(ctx.snapshot, cycle.obs.now)
    # after the plan: an array's bound counts the tasks it starts now (``scheduling.arrays``),
    # and a job waiting for others reads those it starts as running
    linked = ctx.links.linked
    started = started_ends(ctx.throttled, plan.starts, ctx.snapshot.pending, cycle.obs.now, linked)
    estimates = {job_id: plan.verdicts[job_id].estimated_start
                 for job_id in linked if job_id in plan.verdicts}  # fmt: skip
    cycle.dependency_verdicts = held_verdicts(
        ctx.held, ctx.links, ctx.snapshot, ctx.jobs, ctx.throttled, started, cycle.obs.now,
        estimates, bounded=ctx.bounded, begins=ctx.begins,
    )  # fmt: skip
    with timer.phase("check"):
        violations = engine.check_plan(ctx.snapshot, plan)
    if violations:
        # Never apply a plan that breaks an invariant; explain and wait.
        log.error("plan violates invariants, not applied: %s", violations[:5])
        with timer.phase("verdicts"):
            write_verdicts(cycle, plan, ctx.jobs)
    else:
        apply(cycle, plan, ctx.jobs, timer)
        with timer.phase("observers"):
            plan_applied.send(Cycle, snapshot=ctx.snapshot, plan=plan, now=cycle.obs.now,
                              not_launched=frozenset(cycle.launch_verdicts))  # fmt: skip
    return violations, {k: v for k, v in counts_by_code(cycle, plan).items() if v}


def run_cycle(
    kind: str = "cycle", wall_now: float | None = None, wait_s: float | None = None,
    trace: CycleTrace | None = None,
) -> SchedulingCycle | None:  # fmt: skip
    """One loop iteration (``kind="sweep"``: observe and reconcile only, no planning).

    Everything happens in one transaction holding the cluster lock, and the summary
    row is written with it. Returns None (skipped) when another iteration holds the
    lock, or waits up to ``wait_s`` seconds for it (then raises ``ClusterBusy``).
    ``trace`` (optional) receives the time of every phase and the engine's snapshot.
    """
    t0 = time.perf_counter()
    timer = PhaseTimer()
    violations: list[str] = []
    by_reason: dict[str, int] = {}
    paused = PausedGc()
    with paused, transaction.atomic():
        with timer.phase("lock"):
            if wait_s is not None:
                wait_cluster_lock(wait_s)
            elif not try_cluster_lock():
                return None
        with timer.phase("observe"):
            backend = get_backend(wall_now)
            cycle = Cycle(backend, backend.observe(), kind)
        # Every time this iteration writes (events, alerts, audit, last-change stamps) is its
        # cluster time: one instant, read once.
        with clock.pinned(to_datetime(cycle.now)):
            with timer.phase("reconcile"):
                advance_windows(to_datetime(cycle.now))  # maintenance starts (drain) and ends
                reconcile(cycle)
            with timer.phase("stops"):
                request_stops(cycle)
            if cycle.report.touched_backend:
                with timer.phase("observe"):
                    cycle.obs = backend.observe()
                with timer.phase("reconcile"):
                    release_cancelled(cycle)  # runs killed just now may already be gone
            if kind == "cycle":
                violations, by_reason = plan_and_apply(cycle, timer, trace)
            with timer.phase("dependencies"):
                # after everything that ended a job this iteration (runs, refused launches)
                cancel_unreachable(cycle)
            with timer.phase("events"):
                cycle.flush_events()
            with timer.phase("close"):
                backend.close()
            if cycle.report.errors:
                errors = cycle.report.errors
                raise_alert(
                    alerts.BACKEND_ERROR, alerts.WARNING, backend.name,
                    f"{len(errors)} call(s) to the {backend.name} backend failed in the last cycle "
                    f"(transient ones are retried with backoff); first: {errors[0][:300]}",
                )  # fmt: skip
            with timer.phase("record"):
                remember_models(cycle)  # last: it locks those nodes' rows until the commit
                timings = {
                    "observe_ms": timer.total("lock", "observe", "reconcile", "stops"),
                    "plan_ms": timer.total("snapshot", "plan", "check"),
                    "apply_ms": timer.total(
                        "preempt", "starts", "verdicts", "observers", "dependencies"
                    ),
                }
                record = _record(cycle, timings, violations, by_reason, time.perf_counter() - t0)
                publish_on_commit(*events.cycle_completed(record))
                publish_on_commit(*events.queues_updated(cycle=record.pk))
    if trace is not None:
        trace.phases, trace.cpu = dict(timer.wall_ms), dict(timer.cpu_ms)
        # After the commit: not in duration_ms.
        trace.phases["collect"], trace.cpu["collect"] = paused.collect_ms, paused.collect_cpu_ms
    return record


class PausedGc:
    """The cyclic garbage collector paused for one iteration (as ``engine.plan`` does), and
    one young-generation collection once it is over (``collect_ms``).

    An iteration makes hundreds of thousands of short-lived objects (rows, model
    instances, engine views) beside the simulator's long-lived state; the collections they
    trigger cost about a third of the cycle at 10,000 GPUs. Reference counting frees
    almost all of them; what it cannot (reference cycles) is collected once, right after
    the transaction ends, so the cluster lock is not held for it and the next iteration
    does not start with it. A collector the caller had paused stays paused, uncollected.
    """

    def __init__(self) -> None:
        self.collect_ms = self.collect_cpu_ms = 0.0
        self.was_enabled = False

    def __enter__(self) -> PausedGc:
        self.was_enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.was_enabled:
            gc.enable()
            t0, c0 = time.perf_counter(), time.process_time()
            gc.collect(0)
            self.collect_ms = (time.perf_counter() - t0) * 1000
            self.collect_cpu_ms = (time.process_time() - c0) * 1000


def _record(
    cycle: Cycle, timings: dict[str, float], violations: list[str], by_reason: dict[str, int],
    duration_s: float,
) -> SchedulingCycle:  # fmt: skip
    """The iteration's summary row (``SchedulingCycle``)."""
    counts = cycle.report.counts
    record_cycle(cycle.kind, duration_s)
    return SchedulingCycle.objects.create(
        kind=cycle.kind,
        cluster_time=to_datetime(cycle.obs.now),
        duration_ms=duration_s * 1000,
        starts=counts["starts"],
        preemptions=counts["preemptions"],
        finished=counts["finished"],
        failed=counts["failed"],
        requeued=counts["requeued"] + counts["retried"],
        pending=sum(by_reason.values()),
        pending_by_reason=by_reason,
        violations=violations[:50],
        errors=cycle.report.errors[:50],
        drift=cycle.report.drift[:50],
        **timings,
    )


# The summary of one iteration as the API, the command and the live event give it.
cycle_payload = events.cycle_summary
