"""Build the engine's snapshot from the database and the backend's observation."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from operator import itemgetter
from typing import Any

from django.db import connection
from django.db.models import FloatField, Func

from quotas.models import BusinessLine, Queue
from scheduling import arrays, begin_time, borrow_inputs, dependencies, holds, time_limits
from scheduling.backends.base import Observation
from scheduling.clock import to_datetime, to_epoch
from scheduling.engine import inference_forecast as forecast
from scheduling.engine import types as et
from scheduling.models import CONSOLIDATION, Allocation, Job, Node
from scheduling.nodes.selectors import upcoming_maintenance
from scheduling.prediction import RuntimePredictor


@dataclass
class SnapshotContext:
    """The snapshot plus the rows it came from, for applying the plan."""

    snapshot: et.Snapshot
    jobs: dict[int, dict]  # active job rows by id (values() dicts of ``JOB_FIELDS``)
    nodes: dict[str, dict]  # registered nodes by name (``NODE_FIELDS``)
    # pending jobs left out of ``snapshot.pending``: they are on hold (``scheduling.holds``),
    # wait for other jobs to succeed or end (``scheduling.dependencies``, with those links) or are
    # tasks past their array's bound (``scheduling.arrays``, ``throttled``)
    held: dict[int, et.PendingJob] = field(default_factory=dict)
    links: dependencies.PendingLinks = field(default_factory=dependencies.PendingLinks)
    throttled: dict[int, arrays.Throttle] = field(default_factory=dict)
    # pending jobs that queue from later than their submission (epoch seconds): the last of
    # their dependencies ended, or their hold was released, then
    released_at: dict[int, float] = field(default_factory=dict)
    # pending jobs held for a time limit above their queue's max now (``time_limits``): by
    # id, the queue's name and max (minutes)
    bounded: dict[int, tuple[str, int]] = field(default_factory=dict)
    # pending jobs held until their earliest start (``begin_time``): by id, epoch seconds
    begins: dict[int, float] = field(default_factory=dict)


# The columns of an active job the engine, the predictor and the verdict writer read
# (``verdicts.VERDICT_FIELDS``: what each waiting job said before), and the run's name.
JOB_FIELDS = (
    "id", "name", "state", "queue_id", "tier", "gpus", "gpus_per_node", "gpu_memory_gb", "rdma",
    "exclusive_node", "avoid_inference", "preemptible", "preemption_count", "model_name",
    "estimated_runtime_minutes", "time_limit_minutes", "time_limit_past_queue_max", "owner__username", "preempted_for_id", "borrowed",
    "backend_ref", "pending_code", "pending_message", "pending_details", "pending_remedy",
    "queue_position", "estimated_start", "progress_seconds", "run_start_progress_seconds",
    "checkpoint_path", "stop_reason", "move_to_node", *holds.HOLD_FIELDS, *arrays.ARRAY_FIELDS,
)  # fmt: skip
# The times the engine reads, as epoch seconds computed by PostgreSQL (``<field>_ts``): a
# float is cheap to send and read, where a timestamp is formatted by the server and parsed
# in Python, thousands of times a cycle. ``date_part`` divides the stored microseconds by
# a million as ``datetime.timestamp()`` does: the same float.
EPOCH_FIELDS = ("submitted_at", "started_at", "last_checkpoint_at", "preempt_deadline",
                "held_at", "released_at", "begin_at", "first_among_own_at")  # fmt: skip
# A time in ``JOB_FIELDS`` read as a datetime (the verdict writer compares it with the new
# one): sent as epoch seconds too and turned into a datetime here, once per distinct
# instant (thousands of waiting jobs share a few estimated starts); ``fromtimestamp``
# rounds to the stored microsecond. psycopg parses a timestamp in Python (~4 µs each).
DATETIME_FIELDS = ("estimated_start",)
# The order of ``Job.Meta.ordering`` (newest submission first, then the highest id),
# applied in Python on the epochs: the server sorted thousands of wide rows, or walked the
# ``submitted_at`` index backwards fetching them one by one, for this order.
ORDER = ("submitted_at_ts", "id")
NODE_FIELDS = ("id", "name", "state", "recent_models", "inference_gpus", "inference_profile")


def inference_rise(node: dict[str, Any]) -> tuple[int, ...]:
    """What online inference was seen to want on a shared node, per UTC hour, beyond what
    it held at the last plan (``engine.inference_forecast``; empty: nothing learned)."""
    return forecast.rise(forecast.hourly_peaks(node["inference_profile"]), node["inference_gpus"])


_tier = lru_cache(maxsize=64)(et.Tier.parse)  # a few labels, parsed for thousands of rows


def _job_fields(r: dict, queue: Queue) -> dict:
    """What the engine knows of every job, waiting or holding GPUs (``r``: ``JOB_FIELDS``)."""
    return {
        "id": r["id"], "queue": queue.name, "line": queue.business_line.name,
        "tier": _tier(r["tier"]), "gpus": r["gpus"],
        "exclusive_node": r["exclusive_node"], "preemptible": r["preemptible"],
        "preemption_count": r["preemption_count"], "model_name": r["model_name"] or None,
        "owner": r["owner__username"],
    }  # fmt: skip


class Epoch(Func):
    """A timestamp column as epoch seconds (``double precision``), NULL as NULL."""

    template = "date_part('epoch', %(expressions)s)"
    output_field = FloatField()


def pending_job(r: dict, queue: Queue, predicted: float | None, now: float) -> et.PendingJob:
    """A waiting job as the engine sees it, from its row (the what-if's: ``submitted_at``
    a datetime)."""
    return _pending_job(r, queue, predicted, to_epoch(r["submitted_at"]) or now)


def _pending_job(
    r: dict,
    queue: Queue,
    predicted: float | None,
    submitted_at: float,
    last_evicted_at: float | None = None,
) -> et.PendingJob:
    return et.PendingJob(
        **_job_fields(r, queue),
        gpus_per_node=r["gpus_per_node"],
        gpu_memory_gb=r["gpu_memory_gb"],
        rdma=r["rdma"],
        avoid_inference=r["avoid_inference"],
        submitted_at=submitted_at,
        predicted_runtime_s=predicted,
        estimated_runtime_s=(r["estimated_runtime_minutes"] or 0) * 60 or None,
        last_evicted_at=last_evicted_at,
        move_to=r["move_to_node"] or None,  # moved: it restarts in the room kept for it
        # put first among its owner's jobs (the what-if's row has no such time)
        first_among_own=r.get("first_among_own_at_ts") or 0.0,
    )


class _Previous(threading.local):
    """What this thread's previous snapshot built, reused where its inputs are unchanged.

    ``rows``: each active job's row dict by the very values fetched for it (a row is a
    function of them alone); ``pending``: each waiting job's engine view by job id, with
    the row object and the other inputs it was built from (queue, line, prediction,
    submission time). Between two cycles most of thousands of waiting jobs are unchanged:
    their rows and views are taken back instead of being built again. Both are replaced
    by what the current snapshot used, so nothing outlives one cycle more. Rows and views
    are read, never changed, by everything that gets them.
    """

    def __init__(self) -> None:
        self.rows: dict[tuple, dict] = {}
        self.pending: dict[int, tuple[dict, tuple, et.PendingJob]] = {}


_previous = _Previous()


def active_job_rows() -> dict[int, dict]:
    """The active jobs' rows by id: ``JOB_FIELDS`` and the ``<field>_ts`` epochs of
    ``EPOCH_FIELDS``, equal to what ``values()`` gives, in the model's order.

    Django's ``values()`` query, read through a plain cursor: at thousands of rows its
    per-value converters and per-row dictionaries cost more than the query itself. The
    columns converted here: ``DATETIME_FIELDS`` (see there) and ``pending_details`` (JSON
    text), decoded by its field's ``from_db_value`` as ``values()`` would, once per
    distinct text: waiting jobs blocked by the same quota or the same shortage say the
    same (at 7,000 jobs a few hundred texts), so rows with equal texts share one decoded
    dict. A row fetched with the same values as in this thread's previous call is that
    call's dict (``_Previous``).
    """
    as_epochs = (*EPOCH_FIELDS, *DATETIME_FIELDS)
    columns = [name for name in JOB_FIELDS if name not in DATETIME_FIELDS]
    query = (
        Job.objects.filter(state__in=Job.ACTIVE_STATES)
        .order_by()
        .values(*columns, **{f"{name}_ts": Epoch(name) for name in as_epochs})
        .query
    )
    names = [*query.extra_select, *query.values_select, *query.annotation_select]
    details = Job._meta.get_field("pending_details")
    sql, params = query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        fetched = cursor.fetchall()
    fetched.sort(key=itemgetter(*(names.index(name) for name in ORDER)), reverse=True)
    previous, current = _previous.rows, {}
    rows = {}
    decoded: dict[str | None, Any] = {}
    instants: dict[float | None, datetime | None] = {None: None}
    for values in fetched:
        r = previous.get(values)
        if r is None:
            r = dict(zip(names, values, strict=True))
            text = r["pending_details"]
            if text not in decoded:
                decoded[text] = details.from_db_value(text, None, connection)
            r["pending_details"] = decoded[text]
            for name in DATETIME_FIELDS:
                ts = r.pop(f"{name}_ts")
                if ts not in instants:
                    instants[ts] = datetime.fromtimestamp(ts, UTC)
                r[name] = instants[ts]
        current[values] = rows[r["id"]] = r
    _previous.rows = current
    return rows


def build_snapshot(
    obs: Observation, policy: et.PolicyConfig, predictor: RuntimePredictor,
    recent_models: Mapping[str, list[str]] | None = None,
) -> SnapshotContext:  # fmt: skip
    """Nodes and free GPUs from the observation (the truth); contracts and jobs from the DB.

    ``recent_models``: nodes' recent models the cycle has changed but not written yet
    (``Cycle.recent_models``), taken over the stored ones.
    """
    recent = recent_models or {}
    now = obs.now
    db_nodes = {n["name"]: n for n in Node.objects.values(*NODE_FIELDS)}
    node_name = {n["id"]: name for name, n in db_nodes.items()}
    # borrowing (#19): demand peaks, recent evictions, eviction ratios (borrow_inputs)
    at = to_datetime(now)
    assert at is not None
    peaks = borrow_inputs.entitled_demand_peaks(at) if policy.borrowing else ()
    evicted_job, evicted_queue = borrow_inputs.recent_evictions(
        at, max(policy.borrow_cooldown_s, policy.borrow_queue_cooldown_s)
    )
    readings = borrow_inputs.queue_eviction_readings() if policy.borrow_eviction_target > 0 else {}
    lines = tuple(
        et.LineView(
            name=ln.name,
            quota_gpus=ln.quota_gpus,
            guarantee_gpus=ln.guarantee_gpus,
        )
        for ln in BusinessLine.objects.all()
    )
    queue_rows = list(Queue.objects.select_related("business_line"))
    queue_of = {q.pk: q for q in queue_rows}
    queues = tuple(
        et.QueueView(
            name=q.name,
            line=q.business_line.name,
            tier=et.Tier.parse(q.tier),
            quota_gpus=q.quota_gpus,
            guarantee_gpus=q.guarantee_gpus,
            preempts_tiers=frozenset(et.Tier.parse(t) for t in q.preempts_tiers)
            if q.preempts_tiers
            else None,
            last_reclaim_at=evicted_queue.get(q.pk),
            **borrow_inputs.queue_view_fields(readings.get(q.pk)),
        )  # fmt: skip
        for q in queue_rows
    )
    rows = active_job_rows()
    links = dependencies.read_pending_links()  # after the rows: a job in them has its links
    placements: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for job_id, node_id, gpu in Allocation.objects.values_list("job_id", "node_id", "gpu_index"):
        placements[job_id][node_name[node_id]].append(gpu)

    exclusive_nodes: set[str] = set()
    running, pending = [], []
    built, reused = {}, _previous.pending
    held: dict[int, et.PendingJob] = {}
    released: dict[int, float] = {}
    bounded: dict[int, tuple[str, int]] = {}
    begins: dict[int, float] = {}
    for r in rows.values():
        queue = queue_of[r["queue_id"]]
        if r["state"] == Job.State.PENDING:
            predicted = predictor.waiting_s(r, queue.name, policy.overrun_s)
            # a job that waited for others queues from when the last of them ended, a job
            # that was held from its release, one asked to begin later from then
            submitted = r["submitted_at_ts"] or now
            queued_at = max(
                submitted, links.released_at.get(r["id"], 0.0), r["released_at_ts"] or 0.0,
                min(r["begin_at_ts"] or 0.0, now),
            )  # fmt: skip
            if queued_at > submitted:
                released[r["id"]] = queued_at
            inputs = (
                queue.name,
                queue.business_line.name,
                predicted,
                queued_at,
                evicted_job.get(r["id"]),
            )
            before = reused.get(r["id"])
            if before is not None and before[0] is r and before[1] == inputs:
                view = before[2]
            else:
                view = _pending_job(r, queue, predicted, inputs[3], inputs[4])
            built[r["id"]] = (r, inputs, view)
            most = queue.max_time_limit_minutes
            if (
                most is not None
                and not r["time_limit_past_queue_max"]  # an admin's choice
                and time_limits.above_queue_max(r["time_limit_minutes"], most)
            ):
                bounded[r["id"]] = (queue.name, most)
            if begin_time.waits(r["begin_at_ts"], now):
                begins[r["id"]] = r["begin_at_ts"]
            if (
                holds.is_held(r) or r["id"] in links.unmet or r["id"] in bounded
                or r["id"] in begins
            ):  # fmt: skip
                held[r["id"]] = view  # not the engine's to plan
            else:
                pending.append(view)
            continue
        job = _job_fields(r, queue)
        slots = tuple(
            et.Slot(node, tuple(sorted(g))) for node, g in sorted(placements[r["id"]].items())
        )
        if r["exclusive_node"]:
            exclusive_nodes.update(s.node for s in slots)
        started = r["started_at_ts"] or now
        running.append(
            et.RunningJob(
                **job,
                placement=slots,
                started_at=started,
                last_checkpoint_at=r["last_checkpoint_at_ts"],
                predicted_end=predictor.run_end(r, queue.name, started, now),
                state=et.PREEMPTING if r["state"] == Job.State.PREEMPTING else et.RUNNING,
                preempted_for=r["preempted_for_id"],
                preempt_deadline=r["preempt_deadline_ts"],
                borrowed=r["borrowed"],
                # shared-storage checkpoints: consolidation may move it (#19)
                checkpointable=bool(r["checkpoint_path"]),
                migrating=r["stop_reason"] == CONSOLIDATION,
                move_to=r["move_to_node"] or None,  # the room kept while it checkpoints
            )
        )

    maintenance = upcoming_maintenance()  # NodeView.unavailable_from, maintenance_reason
    nodes = []
    for o in obs.nodes:
        db = db_nodes.get(o.name)
        if db is None:
            continue  # discovered but not registered yet: the reconcile step adds it
        state = db["state"]
        if state == Node.State.READY and (o.cordoned or o.health != "ok"):
            state = Node.State.CORDONED if o.health == "ok" else Node.State.UNHEALTHY
        nodes.append(
            et.NodeView(
                name=o.name,
                rack=o.rack,
                block=o.block,
                gpu_model=o.gpu_model,
                gpu_memory_gb=o.gpu_memory_gb,
                gpus_total=o.gpus_total,
                free_gpus=tuple(o.free_gpus),
                rdma=o.rdma,
                state=state,
                recent_models=tuple(recent.get(o.name, db["recent_models"])),
                inference=o.inference,
                exclusive=o.name in exclusive_nodes,
                inference_rise=inference_rise(db) if o.inference else (),
                inference_day_learned=o.inference
                and forecast.knows_whole_day(db["inference_profile"], now),
                unavailable_from=to_epoch(maintenance[o.name][0])
                if o.name in maintenance
                else None,
                maintenance_reason=maintenance[o.name][1] if o.name in maintenance else "",
            )  # fmt: skip
        )
    _previous.pending = built
    # an array's tasks past its bound wait as held jobs do (``scheduling.arrays``)
    throttled = arrays.throttled(rows.values(), (job.id for job in pending))
    if throttled:
        held.update((job.id, job) for job in pending if job.id in throttled)
        pending = [job for job in pending if job.id not in throttled]
    snapshot = et.Snapshot(
        nodes=tuple(nodes), lines=lines, queues=queues, running=tuple(running),
        pending=tuple(pending), policy=policy, demand_peaks=peaks,
    )  # fmt: skip
    return SnapshotContext(snapshot=snapshot, jobs=rows, nodes=db_nodes, held=held, links=links,
                           throttled=throttled, released_at=released,
                           bounded=bounded, begins=begins)  # fmt: skip
