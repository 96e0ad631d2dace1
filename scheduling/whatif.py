"""The submit form's "would it start now, and when?": the real ``plan()`` plus the candidate.

The submit form's answer is the scheduler's own: the snapshot the next cycle would plan
on (``scheduling.snapshot.build_snapshot``, the cycle's code) with the candidate job
added as one more pending job (built from ``services.resolve_job_request``, so with the
defaults, tier and preemptibility a real submission gets, and by ``snapshot.pending_job``,
as the cycle builds every waiting job), planned by ``engine.plan`` with the live policy
(``cycle.context.production_policy``). The candidate either starts in that plan (perhaps
on borrowed capacity) or gets the engine's verdict: code, message, details, remedy,
place in line and estimated start.

A what-if only: it writes nothing, moves no clock, takes no lock and makes no backend call
that changes anything. The cluster is what the backend reports, asked read-only: on the
simulator its saved state as the last cycle (or clock advance) left it, read without
locking its row; elsewhere the backend's ``observe``. The database rows (nodes' states,
active jobs, allocations, contracts) are read in the same read-only, repeatable-read
transaction, which PostgreSQL serves without waiting on the cycle's locks. What the
next cycle's reconcile step would do first is done to that view too: GPUs of residual
processes are free, nodes the portal asked to uncordon are, and runs that ended no
longer hold GPUs.

Building a 10,000-GPU snapshot takes a good part of a second, so it is kept per process
(``baseline``) while the cluster's fingerprint (the last cycle, the newest job, the
number of active jobs, the simulator's clock, the nodes' states, the contracts) is
unchanged and for at most ``CACHE_SECONDS``; the plan itself runs for every question.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from quotas.models import BusinessLine, Queue
from scheduling import arrays, begin_time, dependencies, engine, holds, verdict_text
from scheduling.array_services import parse_spec
from scheduling.backend_factory import read_only_backend
from scheduling.backends.base import ENDED, BackendError, Observation
from scheduling.clock import cluster_now_ts, to_datetime
from scheduling.cycle.context import production_policy
from scheduling.engine import explain
from scheduling.engine import types as et
from scheduling.models import Job, Node, SchedulingCycle, SimulatorState
from scheduling.prediction import RuntimePredictor
from scheduling.services import (
    JobRequest,
    check_active_jobs,
    check_dependencies,
    resolve_job_request,
)
from scheduling.snapshot import SnapshotContext, build_snapshot, pending_job

CACHE_SECONDS = 5.0

# Why a waiting job has no estimated start (the engine predicts one only when it can).
NO_ESTIMATE: dict[str, str] = {
    et.Code.NEVER_FITS: "never: it cannot run as asked",
    et.Code.QUOTA_EXCEEDED: "unknown: it waits for quota (running jobs of its queue or "
    "line to end, or a quota increase), not for GPUs",
    et.Code.NODES_UNAVAILABLE: "unknown: it waits for matching nodes to come back",
    et.Code.DEMOTED: "unknown: demoted jobs start only when nothing else wants the GPUs",
    dependencies.DEPENDENCY_CODE: "unknown: it queues once the jobs it waits for are done "
    "(succeeded, ended, or failed: as it asks), and one of them has no predicted end",
}
NO_ESTIMATE_DEFAULT = (
    "unknown: the scheduler predicts a start only for the first few jobs blocked for GPUs"
)


class ClusterUnavailable(Exception):
    """The backend could not be read (its error in words): no answer now, nothing changed."""


@dataclass(frozen=True)
class Baseline:
    """The snapshot the next cycle would plan on, without the candidate, and where it came from."""

    snapshot: et.Snapshot
    key: tuple
    predictor: RuntimePredictor
    cycle_id: int | None
    cycle_at: datetime | None
    next_job_id: int
    built_at: float  # time.monotonic()
    build_ms: float
    # the waiting jobs' predicted runtimes, held ones included (a dependency's end)
    runtimes: dict[int, float | None]


@dataclass(frozen=True)
class WhatIf:
    """The engine's answer for a candidate job. ``status``: ``fits_now`` (it would start in
    this plan), ``would_wait`` or ``never_fits``; ``code`` the pending code ("" when it
    starts); times are cluster time (epoch seconds)."""

    status: str
    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    remedy: str = ""
    estimated_start: float | None = None
    position: int | None = None
    borrowed: bool = False
    nodes: tuple[str, ...] = ()
    now: float = 0.0
    cycle_id: int | None = None
    cycle_at: datetime | None = None
    plan_ms: float = 0.0
    snapshot_ms: float = 0.0
    cached: bool = False
    tasks: Tasks | None = None  # a job array's: its tasks, how many would start now

    @property
    def starts(self) -> bool:
        return self.status == "fits_now"

    @property
    def estimated_start_text(self) -> str:
        """When, in words: the time and how far off, or why it is unknown."""
        if self.estimated_start is None:
            return NO_ESTIMATE.get(self.code, NO_ESTIMATE_DEFAULT)
        return when_text(self.estimated_start, self.now)

    def as_dict(self) -> dict[str, Any]:
        start = to_datetime(self.estimated_start)
        return {
            "status": self.status,
            "code": self.code,
            "message": self.message,
            "details": dict(self.details),
            "remedy": self.remedy,
            "estimated_start": start.isoformat() if start else None,
            "estimated_start_text": self.estimated_start_text,
            "position": self.position,
            "borrowed": self.borrowed,
            "nodes": list(self.nodes),
            "as_of": {
                "cycle": self.cycle_id,
                "cycle_at": self.cycle_at.isoformat() if self.cycle_at else None,
                "cluster_time": to_datetime(self.now).isoformat(),  # type: ignore[union-attr]
            },
            "timing_ms": {"plan": round(self.plan_ms, 1), "snapshot": round(self.snapshot_ms, 1)},
            **({"tasks": asdict(self.tasks)} if self.tasks else {}),
        }


def duration_text(seconds: float) -> str:
    """To the nearest minute: 25 s -> ``"under a minute"``, 5400 -> ``"1 h 30 min"``,
    200000 -> ``"2 d 7 h"``."""
    minutes = int((seconds + 30) // 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days:,} d {hours} h" if hours else f"{days:,} d"


def when_text(ts: float, now: float) -> str:
    """``"2026-12-01 00:30 UTC (in 1 h 20 min)"``; ``"now"`` for a start at ``now``."""
    if ts <= now + 1:
        return "now"
    at = to_datetime(ts).strftime("%Y-%m-%d %H:%M UTC")  # type: ignore[union-attr]
    return f"{at} (in {duration_text(ts - now)})"


# -- the snapshot -------------------------------------------------------------------------------


def _fingerprint_sql() -> str:
    job, cycle = Job._meta.db_table, SchedulingCycle._meta.db_table
    node, line, queue = Node._meta.db_table, BusinessLine._meta.db_table, Queue._meta.db_table
    sim = SimulatorState._meta.db_table
    active = ", ".join(f"'{s}'" for s in Job.ACTIVE_STATES)
    return f"""
        SELECT (SELECT max(id) FROM {cycle}),
               (SELECT cluster_time FROM {cycle} ORDER BY id DESC LIMIT 1),
               (SELECT max(id) FROM {job}),
               (SELECT count(*) FROM {job} WHERE state IN ({active})),
               (SELECT max(virtual_now) FROM {sim}),
               (SELECT md5(coalesce(string_agg(concat_ws(',', id, state, health, residual_gpus,
                                                         uncordon_requested),
                                               ';' ORDER BY id), '')) FROM {node}),
               (SELECT md5(coalesce(string_agg(concat_ws(',', id, quota_gpus, guarantee_gpus),
                                               ';' ORDER BY id), '')) FROM {line}),
               (SELECT md5(coalesce(string_agg(concat_ws(',', id, business_line_id, tier,
                                                         quota_gpus, guarantee_gpus,
                                                         preempts_tiers::text),
                                               ';' ORDER BY id), '')) FROM {queue})
    """  # noqa: S608 - table names from the models, no input


def fingerprint() -> tuple:
    """What changes the snapshot between two cycles, in one query: the last cycle (id,
    cluster time), the newest job and the number of active ones (a submission, a cancel),
    the simulator's clock (an advance), the nodes' states (cordon, drain, resume) and the
    contracts. Times are not used for the rest: a paused clock stamps every change alike."""
    with connection.cursor() as cur:
        cur.execute(_fingerprint_sql())
        return tuple(cur.fetchone())


def observe_read_only() -> Observation:
    """What the cluster reports, asked without changing it: the simulator as the last cycle
    (or clock advance) saved it, its clock not moved; another backend's ``observe`` (a read).
    Raises ``ClusterUnavailable`` when the backend cannot be read."""
    try:
        with read_only_backend() as backend:
            return backend.observe()
    except BackendError as exc:
        raise ClusterUnavailable(f"the cluster did not answer: {exc}") from exc


def as_the_cycle_would(obs: Observation) -> Observation:
    """The observation as the next cycle plans on it, after its reconcile step: GPUs held by
    residual processes are cleaned (free), and nodes the portal asked to uncordon are."""
    uncordon = set(Node.objects.filter(uncordon_requested=True).values_list("name", flat=True))
    nodes = []
    for o in obs.nodes:
        if o.residual_gpus or o.name in uncordon:
            o = replace(
                o,
                free_gpus=tuple(sorted({*o.free_gpus, *o.residual_gpus})),
                residual_gpus=(),
                cordoned=o.cordoned and o.name not in uncordon,
            )
        nodes.append(o)
    return replace(obs, nodes=tuple(nodes))


def still_running(ctx: SnapshotContext, obs: Observation) -> tuple[et.RunningJob, ...]:
    """The running jobs whose runs the backend still reports (a run that ended since the
    last cycle is settled by the next one's reconcile step: its GPUs are free already)."""
    alive = {j.ref for j in obs.jobs if j.state not in ENDED}
    return tuple(r for r in ctx.snapshot.running if ctx.jobs[r.id]["backend_ref"] in alive)


def _read_only_snapshot() -> None:
    """Make the current (outermost) transaction one consistent, read-only view."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")


def build_baseline() -> Baseline:
    """Read the cluster and build the snapshot the next cycle would plan on (no candidate)."""
    t0 = time.perf_counter()
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:
            _read_only_snapshot()
        key = fingerprint()
        predictor = RuntimePredictor.from_history()
        obs = as_the_cycle_would(observe_read_only())
        ctx = build_snapshot(obs, production_policy(), predictor)
    return Baseline(
        snapshot=replace(ctx.snapshot, running=still_running(ctx, obs)),
        key=key,
        predictor=predictor,
        cycle_id=key[0],
        cycle_at=key[1],
        next_job_id=(key[2] or 0) + 1,
        built_at=time.monotonic(),
        build_ms=(time.perf_counter() - t0) * 1000,
        runtimes={
            job.id: job.predicted_runtime_s for job in (*ctx.snapshot.pending, *ctx.held.values())
        },  # fmt: skip
    )


_lock = threading.Lock()
_cached: Baseline | None = None


def baseline() -> tuple[Baseline, bool]:
    """The snapshot for what-ifs, and whether it came from the cache (see the module doc)."""
    global _cached
    key = fingerprint()
    with _lock:  # one build at a time; the others wait and share it
        got = _cached
        if got is not None and got.key == key and time.monotonic() - got.built_at < CACHE_SECONDS:
            return got, True
        got = build_baseline()
        _cached = got
        return got, False


def clear_cache() -> None:
    """Forget the cached snapshot (tests; a process that changed the cluster behind our back)."""
    global _cached
    with _lock:
        _cached = None


# -- the question -------------------------------------------------------------------------------


def candidate_row(fields: dict[str, Any], owner: str, job_id: int, now: float) -> dict[str, Any]:
    """The candidate as the job row a submission would write now (``snapshot.JOB_FIELDS``
    keys). Its submission time is stamped as the row's would be: the field's default, or
    cluster time, as a datetime (microseconds, as stored), so that ties in the queue's
    order (same instant: the simulator's clock stands still) break the same way."""
    submitted = Job._meta.get_field("submitted_at").get_default() or to_datetime(now)
    return {
        "id": job_id, "state": Job.State.PENDING, "tier": fields["tier"], "gpus": fields["gpus"],
        "gpus_per_node": fields["gpus_per_node"], "gpu_memory_gb": fields["gpu_memory_gb"],
        "rdma": fields["rdma"], "exclusive_node": fields["exclusive_node"],
        "avoid_inference": fields["avoid_inference"], "preemptible": fields["preemptible"],
        "preemption_count": 0, "model_name": fields["model_name"],
        "estimated_runtime_minutes": fields["estimated_runtime_minutes"],
        "time_limit_minutes": fields["time_limit_minutes"],
        "owner__username": owner, "submitted_at": submitted, "move_to_node": "",
        **dict.fromkeys(holds.HOLD_FIELDS, ""),  # not on hold
        **dict.fromkeys(arrays.ARRAY_FIELDS),  # not an array's task
    }  # fmt: skip


def answer(plan: et.Plan, job_id: int) -> dict[str, Any]:
    """What the plan says of ``job_id``: a start (with its nodes) or its verdict."""
    start = next((s for s in plan.starts if s.job_id == job_id), None)
    if start is not None:
        nodes = tuple(s.node for s in start.placement)
        message = f"It would start now, on {_where(nodes)}."
        if start.borrowed:
            message += (
                " It would run beyond its quota on borrowed idle GPUs, and be the first to be "
                "preempted when their owners need them back."
            )
        swap = next((sw for sw in plan.swaps if sw.job_id == job_id), None)
        if swap is not None:
            message += (
                " It would start within its quota: "
                f"{explain.count(len(swap.displaced), 'preemptible job')} of its queue or line "
                "would run on as borrowed capacity in its place."
            )
        return {"status": "fits_now", "code": "", "message": message, "borrowed": start.borrowed,
                "nodes": nodes, "estimated_start": plan.now}  # fmt: skip
    return verdict_answer(plan.verdicts[job_id])


@dataclass(frozen=True)
class Tasks:
    """A job array's what-if in numbers: its tasks, how many would start now, and its bound
    (``%N``; None: none)."""

    total: int
    start_now: int
    at_once: int | None


def tasks_answer(plan: et.Plan, tasks: list[et.PendingJob], spec: arrays.ArraySpec) -> dict:
    """What ``plan`` says of an array's candidate ``tasks`` (those its bound lets the engine
    see, in index order): every task starts (``fits_now``, on the union of their nodes); or
    the count that would start and the first waiting task's verdict; or, when every task
    the bound lets in starts, that the others wait for their places (``ARRAY_LIMIT``, the
    first predicted to open when a started task is predicted to end)."""
    total, bound = len(spec.indices), spec.max_running
    starts = {s.job_id: s for s in plan.starts}
    started = [starts[t.id] for t in tasks if t.id in starts]
    counts = Tasks(total, len(started), bound)
    if len(started) == total:
        said = answer(plan, tasks[0].id)
        nodes = tuple(dict.fromkeys(slot.node for s in started for slot in s.placement))
        borrowed = any(s.borrowed for s in started)
        message = f"All {explain.count(total, 'task')} would start now, on {_where(nodes)}."
        if borrowed:
            message += (
                " Some would run beyond the quota on borrowed idle GPUs, and be the first to be "
                "preempted when their owners need them back."
            )
        return {**said, "message": message, "nodes": nodes, "borrowed": borrowed, "tasks": counts}
    some = f"{len(started):,} of its {total:,} tasks would start now" if started else (
        f"None of its {total:,} tasks would start now"
    )  # fmt: skip
    first = next((t for t in tasks if t.id not in starts), None)
    if first is not None:
        said = verdict_answer(plan.verdicts[first.id])
        names = {t.id: f"task {spec.indices[i]} of this array" for i, t in enumerate(tasks)}
        said["message"] = f"{some}; task {spec.indices[tasks.index(first)]} would wait: " + (
            _name_tasks(said["message"], names)
        )
        return {**said, "tasks": counts}
    runtime = tasks[0].predicted_runtime_s
    opens = plan.now + runtime if runtime else None
    message = (
        f"{some}, at most {bound:,} at once: the other {total - len(started):,} wait for their "
        "places"
        + (f", the first predicted to open {explain.when(explain.minute_up(opens))}." if opens
           else ".")
    )  # fmt: skip
    return {
        "status": "would_wait", "code": arrays.ARRAY_LIMIT_CODE, "message": message,
        "details": {"max_running": bound}, "remedy": arrays.ARRAY_LIMIT_REMEDY,
        "estimated_start": explain.minute_up(opens) if opens else None, "position": None,
        "tasks": counts,
    }  # fmt: skip


def _where(nodes: tuple[str, ...]) -> str:
    """Where a start would land, in words: ``node r010-n01``, ``12 nodes (a, b, c, d and 8
    more)``."""
    shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
    return f"node {shown}" if len(nodes) == 1 else f"{len(nodes):,} nodes ({shown})"


def _name_tasks(message: str, names: dict[int, str]) -> str:
    """A verdict's words with the array's other candidate tasks, which have no job ids yet,
    named by index (``job 1235`` -> ``task 3 of this array``): the jobs a verdict names, as
    the job page finds them (``verdict_text.REFERENCE``)."""

    def named(m: re.Match) -> str:
        return names.get(int(m[1]), m[0]) if m[1] else m[0]

    return verdict_text.REFERENCE.sub(named, message)


def verdict_answer(v: et.Verdict) -> dict[str, Any]:
    """A waiting verdict in the what-if's terms (the engine's, or the loop's own)."""
    return {
        "status": "never_fits" if v.code == et.Code.NEVER_FITS else "would_wait",
        "code": v.code, "message": v.message, "details": dict(v.details), "remedy": v.remedy,
        "estimated_start": v.estimated_start, "position": v.position,
    }  # fmt: skip


def waiting_estimates(ids: frozenset[int]) -> dict[int, float]:
    """The estimated starts the last cycle gave the waiting jobs of ``ids`` (one query):
    with their predicted runtimes, when a candidate's dependencies would end at the
    earliest, as the loop reckons it."""
    rows = Job.objects.filter(pk__in=ids, state=Job.State.PENDING, estimated_start__isnull=False)
    return {pk: at.timestamp() for pk, at in rows.values_list("pk", "estimated_start")}


def what_if(user: Any, req: JobRequest, array: str | None = None) -> WhatIf:
    """Would ``req``, submitted by ``user`` now, start at the next cycle, and if not, why and
    when? With ``array`` (a job array's spec, Slurm's: ``0-15%4``), the same for its tasks,
    each one more candidate up to the array's bound, as the loop would give them to the
    engine, said together (``tasks_answer``). Raises ``ValidationError`` when a submission
    would be refused (the service's rules) and ``ClusterUnavailable`` when the cluster
    cannot be read."""
    fields = resolve_job_request(user, req)
    spec = parse_spec(array) if array else None
    deps = check_dependencies(user, req, spec.indices if spec else None)
    check_active_jobs(user, len(spec.indices) if spec else 1)  # as the submission checks
    base, cached = baseline()
    now = cluster_now_ts()
    queue: Queue = fields["queue"]
    row = candidate_row(fields, user.username, base.next_job_id, now)
    predicted = base.predictor.new_run_s(row, queue.name)
    candidate = pending_job(row, queue, predicted, now)
    # an array's first task: what every task waits for, and the tasks of its own index
    # (``after_corresponding``: the answer is the first task's)
    waits_for = deps.task_jobs(spec.indices[0]) if spec else deps.jobs
    links = dependencies.unmet_links(
        candidate.id, waits_for, queue.business_line_id, deps.arrays, deps.condition
    ) if deps else None  # fmt: skip
    begin = fields["begin_at"].timestamp() if fields["begin_at"] else None
    begins = {candidate.id: begin} if begin_time.waits(begin, now) else {}
    t0 = time.perf_counter()
    if (links and links.unmet) or begins:  # held for its dependencies, or until its earliest
        # start, as the loop holds it: the engine never sees it
        verdicts = dependencies.held_verdicts(
            {candidate.id: candidate}, links or dependencies.PendingLinks(), base.snapshot,
            {candidate.id: row}, begins=begins,
            estimates=waiting_estimates(links.linked) if links else {},
            waiting_runtimes=base.runtimes,
        )  # fmt: skip
        said = verdict_answer(verdicts[candidate.id])  # every task's: they wait alike
        if spec is not None:
            said["tasks"] = Tasks(len(spec.indices), 0, spec.max_running)
    elif spec is None:
        snapshot = replace(base.snapshot, pending=(*base.snapshot.pending, candidate))
        said = answer(engine.plan(snapshot, now), candidate.id)
    else:
        given = len(spec.indices) if spec.max_running is None else spec.max_running
        tasks = [candidate] + [
            pending_job(candidate_row(fields, user.username, candidate.id + i, now), queue,
                        predicted, now)
            for i in range(1, min(given, len(spec.indices)))
        ]  # fmt: skip
        snapshot = replace(base.snapshot, pending=(*base.snapshot.pending, *tasks))
        said = tasks_answer(engine.plan(snapshot, now), tasks, spec)
    plan_ms = (time.perf_counter() - t0) * 1000
    return WhatIf(
        **said,
        now=now,
        cycle_id=base.cycle_id,
        cycle_at=base.cycle_at,
        plan_ms=plan_ms,
        snapshot_ms=0.0 if cached else base.build_ms,
        cached=cached,
    )


def verdict_of(job: Job) -> tuple[str, str]:
    """A job's outcome in the what-if's terms: ``("fits_now", "")`` once it started (running,
    or already past it), else its status and pending code (tests and checks compare them)."""
    if job.state == Job.State.PENDING:
        status = "never_fits" if job.pending_code == et.Code.NEVER_FITS else "would_wait"
        return status, job.pending_code
    return "fits_now", ""
