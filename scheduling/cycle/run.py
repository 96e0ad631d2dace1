"""``run_cycle``: observe -> reconcile -> stop -> snapshot -> plan -> apply, in one transaction.

``run_cycle`` is the one writer of job placement. It runs under a single-flight lock
(``scheduling.cluster_lock``) and inside one database transaction: a worker that dies
part-way rolls everything back, and the next cycle repairs from the backend's truth.
Runs are named deterministically (``portal-<job>-<attempt>``) so a launch whose commit
was lost is adopted, never launched twice; the ``Allocation`` table's unique (node, GPU)
constraint makes a GPU counted twice impossible. Each step lives in its own module of
this package; this one only orders them and writes the summary row.
"""

from __future__ import annotations

import logging
import time

from django.db import transaction

from core import clock, events
from core.realtime import publish_on_commit
from scheduling import alerts, engine
from scheduling.alerts import raise_alert
from scheduling.backend_factory import get_backend
from scheduling.clock import to_datetime
from scheduling.cluster_lock import try_cluster_lock, wait_cluster_lock
from scheduling.cycle.context import Cycle, production_policy
from scheduling.cycle.launch import start_all
from scheduling.cycle.reconcile import reconcile, release_cancelled
from scheduling.cycle.stops import preempt, request_stops
from scheduling.cycle.telemetry import record_cycle
from scheduling.cycle.verdicts import counts_by_code, write_verdicts
from scheduling.engine import types as et
from scheduling.models import SchedulingCycle
from scheduling.observers import plan_applied
from scheduling.prediction import RuntimePredictor
from scheduling.snapshot import build_snapshot

log = logging.getLogger(__name__)


def apply(cycle: Cycle, plan: et.Plan, rows: dict[int, dict]) -> None:
    """Carry out the engine's plan: preemptions first, then starts, then verdicts."""
    preempt(cycle, plan.preemptions)
    start_all(cycle, plan.starts)
    write_verdicts(cycle, plan, rows)


def plan_and_apply(cycle: Cycle, timings: dict[str, float]) -> tuple[list[str], dict[str, int]]:
    """Snapshot, plan and apply; returns the plan's invariant violations and pending counts."""
    t1 = time.perf_counter()
    ctx = build_snapshot(cycle.obs, production_policy(), RuntimePredictor.from_history())
    plan = engine.plan(ctx.snapshot, cycle.obs.now)
    violations = engine.check_plan(ctx.snapshot, plan)
    timings["plan_ms"] = (time.perf_counter() - t1) * 1000
    t2 = time.perf_counter()
    if violations:
        # Never apply a plan that breaks an invariant; explain and wait.
        log.error("plan violates invariants, not applied: %s", violations[:5])
        write_verdicts(cycle, plan, ctx.jobs)
    else:
        apply(cycle, plan, ctx.jobs)
        plan_applied.send(Cycle, snapshot=ctx.snapshot, plan=plan,
                          not_launched=frozenset(cycle.launch_verdicts))  # fmt: skip
    by_reason = {k: v for k, v in counts_by_code(cycle, plan).items() if v}
    timings["apply_ms"] = (time.perf_counter() - t2) * 1000
    return violations, by_reason


def run_cycle(
    kind: str = "cycle", wall_now: float | None = None, wait_s: float | None = None
) -> SchedulingCycle | None:
    """One loop iteration (``kind="sweep"``: observe and reconcile only, no planning).

    Everything happens in one transaction holding the cluster lock, and the summary
    row is written with it. Returns None (skipped) when another iteration holds the
    lock, or waits up to ``wait_s`` seconds for it (then raises ``ClusterBusy``).
    """
    t0 = time.perf_counter()
    timings = {"observe_ms": 0.0, "plan_ms": 0.0, "apply_ms": 0.0}
    violations: list[str] = []
    by_reason: dict[str, int] = {}
    with transaction.atomic():
        if wait_s is not None:
            wait_cluster_lock(wait_s)
        elif not try_cluster_lock():
            return None
        backend = get_backend(wall_now)
        cycle = Cycle(backend, backend.observe(), kind)
        # Every time this iteration writes (events, alerts, audit, last-change stamps) is its
        # cluster time: one instant, read once.
        with clock.pinned(to_datetime(cycle.now)):
            reconcile(cycle)
            request_stops(cycle)
            if cycle.report.touched_backend:
                cycle.obs = backend.observe()
                release_cancelled(cycle)  # runs killed just now may already be gone
            timings["observe_ms"] = (time.perf_counter() - t0) * 1000
            if kind == "cycle":
                violations, by_reason = plan_and_apply(cycle, timings)
            cycle.flush_events()
            backend.close()
            if cycle.report.errors:
                errors = cycle.report.errors
                raise_alert(
                    alerts.BACKEND_ERROR, alerts.WARNING, backend.name,
                    f"{len(errors)} call(s) to the {backend.name} backend failed in the last cycle "
                    f"(transient ones are retried with backoff); first: {errors[0][:300]}",
                )  # fmt: skip
            record = _record(cycle, timings, violations, by_reason, time.perf_counter() - t0)
            publish_on_commit(*events.cycle_completed(record))
            publish_on_commit(*events.queues_updated(cycle=record.pk))
    return record


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
