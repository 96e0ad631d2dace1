"""The scheduling loop: observe -> reconcile -> snapshot -> plan -> apply, in one transaction.

``run_cycle`` is the one writer of job placement. It runs under a single-flight
lock (``scheduling.tasks``) and inside one database transaction: a worker that
dies part-way rolls everything back, and the next cycle repairs from the
backend's truth. Runs are named deterministically (``portal-<job>-<attempt>``)
so a launch whose commit was lost is adopted, never launched twice; the
``Allocation`` table's unique (node, GPU) constraint makes a GPU counted twice
impossible.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction

from core.realtime import publish_on_commit
from scheduling import alerts, engine
from scheduling.alerts import raise_alert
from scheduling.backends import open_backend
from scheduling.backends.base import (
    ENDED,
    FAILED,
    STOPPED,
    SUCCEEDED,
    BackendError,
    ClusterBackend,
    LaunchRequest,
    Observation,
    ObservedJob,
    run_ref,
)
from scheduling.clock import to_datetime, to_epoch
from scheduling.cluster_lock import try_cluster_lock, wait_cluster_lock
from scheduling.engine import types as et
from scheduling.models import Allocation, Eviction, Job, JobEvent, Node, SchedulingCycle
from scheduling.prediction import RuntimePredictor
from scheduling.snapshot import build_snapshot
from scheduling.sql import bulk_set

log = logging.getLogger(__name__)

RECENT_MODELS_KEPT = 3

# Transient launch errors back off per job, in cluster time: after a failure the job is not
# launched again before ``last failure + clamp(age of its failure streak, MIN, MAX)``, i.e.
# after 10 s, 10 s, 20 s, 40 s ... at most 5 min; it stays pending meanwhile. The streak is
# the run of latest ``launch_retry`` events in the job's timeline: it commits and rolls
# back with the cycle, survives restarts, needs no model field and no Redis, and the user
# sees every attempt. A launch is never retried within the cycle: a launch that timed out
# may have happened after all, and only the next cycle's fresh observation can adopt it.
LAUNCH_RETRY = "launch_retry"
LAUNCH_BACKOFF_MIN_S = 10.0
LAUNCH_BACKOFF_MAX_S = 300.0

# The pending reason of a job the plan starts but the backend has not launched yet: its
# launch failed transiently, or it is still backing off after such a failure. The engine
# knows nothing of launches (it planned a start, so it gave no verdict): the loop writes
# this reason itself, with the verdicts, so the job always says why it waits.
LAUNCH_RETRY_CODE = "LAUNCH_RETRY"
LAUNCH_RETRY_REMEDY = (
    "Nothing to do: the portal retries automatically; if it keeps failing, the on-call "
    "engineer sees a backend_error alert."
)
_RETRY_ERROR = re.compile(r"right now \((.*)\); still waiting", re.S)


def launch_backoff_s(streak_age_s: float) -> float:
    """Wait before the next launch attempt of a job failing since ``streak_age_s`` seconds."""
    return min(max(streak_age_s, LAUNCH_BACKOFF_MIN_S), LAUNCH_BACKOFF_MAX_S)


def launch_due(streak: tuple[int, float, float], now: float) -> bool:
    """May a job with this failure streak (count, first, last) be launched at ``now``?"""
    _, first, last = streak
    return now >= last + launch_backoff_s(last - first) - 1e-3  # event times are in µs


def launch_streaks(job_ids: list[int]) -> dict[int, tuple[int, float, float]]:
    """Jobs whose latest timeline events are transient launch failures: (count, first, last)."""
    retrying = set(
        JobEvent.objects.filter(job_id__in=job_ids, kind=LAUNCH_RETRY).values_list(
            "job_id", flat=True
        )
    )
    streaks: dict[int, tuple[int, float, float]] = {}
    ended: set[int] = set()
    for job_id, kind, at in (
        JobEvent.objects.filter(job_id__in=retrying)
        .order_by("job_id", "-id")  # newest first by insertion (timeline clocks may differ)
        .values_list("job_id", "kind", "at")
    ):
        if job_id in ended:
            continue
        if kind != LAUNCH_RETRY:  # the streak is over: the job did something else since
            ended.add(job_id)
            continue
        count, _, last = streaks.get(job_id, (0, 0.0, to_epoch(at)))
        streaks[job_id] = (count + 1, to_epoch(at), last)
    return streaks


def launch_retry_verdict(attempts: int, first: float, last: float, error: str) -> et.Verdict:
    """The pending reason of a job whose last ``attempts`` launches failed transiently
    (the first at ``first``, the last at ``last``): when the next attempt is, and why."""
    wait = launch_backoff_s(last - first)
    next_at = last + wait
    at = to_datetime(next_at)
    return et.Verdict(
        code=LAUNCH_RETRY_CODE,
        message=(
            f"It is its turn to start, but the cluster could not start it: {error}. "
            f"The portal tries again at {at:%Y-%m-%d %H:%M:%S} UTC, {wait:.0f} s after the "
            f"last attempt ({attempts} failed attempt(s) in a row)."
        ),
        details={
            "attempts": attempts,
            "failing_for_seconds": round(last - first),
            "backoff_seconds": round(wait),
            "next_attempt_at": at.isoformat(),
            "error": error,
        },
        remedy=LAUNCH_RETRY_REMEDY,
        estimated_start=next_at,
    )


def production_policy() -> et.PolicyConfig:
    """The policy the live loop runs (the ``full`` preset)."""
    return et.PolicyConfig.preset(
        "full", grace_seconds=float(getattr(settings, "PREEMPTION_GRACE_SECONDS", 300))
    )


@dataclass
class CycleReport:
    counts: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    touched_backend: bool = False


def _event(job_id: int, at: float, kind: str, message: str, state: str) -> JobEvent:
    publish_on_commit(
        f"job.{job_id}", "job.updated",
        {"id": job_id, "state": state, "event": {"kind": kind, "message": message}},
    )  # fmt: skip
    return JobEvent(job_id=job_id, at=to_datetime(at), kind=kind, message=message)


def _fmt_placement(slots: tuple[et.Slot, ...] | list[et.Slot]) -> str:
    return ", ".join(f"{s.node}[{','.join(map(str, s.gpus))}]" for s in slots)


class Cycle:
    """One iteration against one opened backend. Use ``run_cycle``."""

    def __init__(self, backend: ClusterBackend, obs: Observation, kind: str) -> None:
        self.backend = backend
        self.obs = obs
        self.now = obs.now
        self.kind = kind
        self.report = CycleReport()
        self.events: list[JobEvent] = []
        # pending reasons of planned starts not launched (yet): written with the verdicts
        self.launch_verdicts: dict[int, et.Verdict] = {}

    # -- helpers -------------------------------------------------------------
    def event(self, job: Job | int, kind: str, message: str, state: str = "") -> None:
        job_id = job if isinstance(job, int) else job.pk
        st = state or (job.state if isinstance(job, Job) else "")
        self.events.append(_event(job_id, self.now, kind, message, st))

    def call(self, what: str, fn, *args) -> bool:
        """Call the backend; record and swallow its error (False) so one node or job can't stop the cycle."""
        self.report.touched_backend = True
        try:
            fn(*args)
            return True
        except BackendError as err:
            kind = "permanent" if err.permanent else "transient"
            self.report.errors.append(f"{what}: {kind}: {err}")
            return False

    # -- reconcile: the backend's truth wins ---------------------------------
    def reconcile(self) -> None:
        self._sync_nodes()
        self._sync_jobs()

    def _sync_nodes(self) -> None:
        db_nodes = {n.name: n for n in Node.objects.all()}
        created = []
        changed: list[Node] = []
        for o in self.obs.nodes:
            node = db_nodes.get(o.name)
            if node is None:  # discovered on the backend
                created.append(
                    Node(name=o.name, rack=o.rack, block=o.block, gpu_model=o.gpu_model,
                         gpu_memory_gb=o.gpu_memory_gb, gpus_total=o.gpus_total, rdma=o.rdma,
                         inference=o.inference, health=o.health, health_detail=o.health_detail)
                )  # fmt: skip
                self.report.drift.append(f"node {o.name} discovered on the backend")
                continue
            dirty = False
            residual = len(o.residual_gpus)
            for attr, value in (("health", o.health), ("health_detail", o.health_detail),
                                ("residual_gpus", residual)):  # fmt: skip
                if getattr(node, attr) != value:
                    setattr(node, attr, value)
                    dirty = True
            if node.uncordon_requested:
                if self.call(f"uncordon {node.name}", self.backend.uncordon, node.name):
                    node.uncordon_requested = False
                    dirty = True
            elif node.state == Node.State.READY and o.health != "ok":
                self._isolate(node, o.health_detail or o.health)
                dirty = True
            elif node.state == Node.State.READY and o.cordoned:
                node.state = Node.State.CORDONED
                node.state_reason = "cordoned outside the portal (seen on the backend)"
                self.report.drift.append(f"node {node.name} cordoned outside the portal")
                dirty = True
            elif node.state != Node.State.READY and not o.cordoned:
                self.call(f"cordon {node.name}", self.backend.cordon, node.name, node.state_reason)
            if o.residual_gpus:
                self._clean_residual(node, len(o.residual_gpus))
            if dirty:
                changed.append(node)
        if created:
            Node.objects.bulk_create(created)
        if changed:
            Node.objects.bulk_update(
                changed,
                ["health", "health_detail", "residual_gpus", "state", "state_reason",
                 "uncordon_requested"],
            )  # fmt: skip
            for node in changed:
                publish_on_commit("nodes", "node.updated", _node_payload(node))

    def _isolate(self, node: Node, why: str) -> None:
        """R7: a sick node leaves the pool at once; its jobs move (from checkpoint)."""
        from core import audit

        before = {"state": node.state}
        node.state = Node.State.UNHEALTHY
        node.state_reason = f"isolated automatically: {why}"
        self.call(f"cordon {node.name}", self.backend.cordon, node.name, node.state_reason)
        audit.record(None, "node.isolate", node, reason=node.state_reason, before=before,
                     after={"state": node.state})  # fmt: skip
        raise_alert(
            alerts.NODE_UNHEALTHY, alerts.CRITICAL, node.name,
            f"{node.name} reports {node.health} ({why}); isolated, its jobs move elsewhere "
            "from their last checkpoint.",
        )  # fmt: skip
        self.report.counts["isolated"] += 1

    def _clean_residual(self, node: Node, gpus: int) -> None:
        """R6: stale processes hold GPU memory: kill them and give the GPUs back."""
        if self.call(f"clean {node.name}", self.backend.clean_residual, node.name):
            node.residual_gpus = 0
            raise_alert(
                alerts.RESIDUAL_PROCESS, alerts.WARNING, node.name,
                f"{gpus} GPU(s) on {node.name} were held by processes of finished jobs; "
                "they were killed and the GPUs returned to the pool.",
            )  # fmt: skip
            self.report.counts["residual_cleaned"] += gpus

    def _sync_jobs(self) -> None:
        observed = {j.ref: j for j in self.obs.jobs}
        active = list(
            Job.objects.select_for_update()
            .filter(state__in=[Job.State.RUNNING, Job.State.PREEMPTING])
            .select_related("queue")
        )
        known_refs = {j.backend_ref for j in active}
        ended: list[tuple[Job, str, float, str]] = []
        progressed: list[Job] = []
        for job in active:
            o = observed.get(job.backend_ref)
            if o is None:
                ended.append((job, FAILED, job.progress_seconds, "vanished from the backend"))
            elif o.state in ENDED:
                ended.append((job, o.state, o.progress_s, o.end_reason))
            else:
                self._still_running(job, o, progressed)
        bulk_set(Job, ["progress_seconds", "last_checkpoint_at"],
                 [(j.pk, j.progress_seconds, j.last_checkpoint_at) for j in progressed])  # fmt: skip
        if ended:
            self._finish_runs(ended)
        self.release_cancelled()
        # Runs the database does not know: adopt lost launches, report foreign work.
        for ref, o in observed.items():
            if ref in known_refs or o.state in ENDED:
                continue
            if o.job_id is not None:
                self._adopt(o)
            else:
                self.report.drift.append(f"run {ref} was started outside the portal")

    def release_cancelled(self) -> None:
        """Cancelled jobs: stop a run that is still alive; free the GPUs once it has ended."""
        observed = {j.ref: j for j in self.obs.jobs}
        for job in Job.objects.filter(
            state=Job.State.CANCELLED, allocations__isnull=False
        ).distinct():
            o = observed.get(job.backend_ref)
            if o is not None and o.state not in ENDED:
                self.call(f"kill {job.backend_ref}", self.backend.kill, job.backend_ref)
            else:
                job.allocations.all().delete()
                Job.objects.filter(pk=job.pk).update(finished_at=to_datetime(self.now))

    def _still_running(self, job: Job, o: ObservedJob, progressed: list[Job]) -> None:
        ckpt = to_datetime(o.last_checkpoint_at)
        # Progress is for display: write it when a checkpoint lands or every 5 minutes of work.
        if (ckpt and ckpt != job.last_checkpoint_at) or o.progress_s - job.progress_seconds >= 300:
            job.progress_seconds = o.progress_s
            job.last_checkpoint_at = ckpt or job.last_checkpoint_at
            progressed.append(job)
        if (
            job.state == Job.State.PREEMPTING
            and job.preempt_deadline
            and to_epoch(job.preempt_deadline) <= self.now
            and o.state != "stopping"
        ):
            self.call(f"kill {job.backend_ref}", self.backend.kill, job.backend_ref)
            self.event(job, "killed", "grace period over: stopped cold at the deadline")

    ENDED_FIELDS = (
        "state", "progress_seconds", "finished_at", "failure_reason", "retry_count", "borrowed",
        "preemption_count", "preempt_deadline", "preempted_for_id", "stop_reason", "updated_at",
    )  # fmt: skip

    def _finish_runs(self, ended: list[tuple[Job, str, float, str]]) -> None:
        """Record ended runs in a few statements: free their GPUs, update the jobs,
        write evictions, and remember on each node the model that just ran there."""
        ids = [job.pk for job, *_ in ended]
        nodes_of: dict[int, set[str]] = {}
        for job_id, node in Allocation.objects.filter(job_id__in=ids).values_list(
            "job_id", "node__name"
        ):
            nodes_of.setdefault(job_id, set()).add(node)
        Allocation.objects.filter(job_id__in=ids).delete()
        evictions: list[Eviction] = []
        recent: dict[str, list[str]] = {}
        for job, state, progress, reason in ended:
            self._run_ended(job, state, progress, reason, evictions)
            if job.state == Job.State.SUCCEEDED and job.model_name:
                for node in nodes_of.get(job.pk, ()):
                    recent.setdefault(node, []).append(job.model_name)
            job.updated_at = to_datetime(self.now)
        bulk_set(Job, self.ENDED_FIELDS,
                 [(j.pk, *(getattr(j, f) for f in self.ENDED_FIELDS)) for j, *_ in ended])  # fmt: skip
        Eviction.objects.bulk_create(evictions)
        if recent:
            nodes = list(Node.objects.filter(name__in=recent))
            for node in nodes:
                newest = list(dict.fromkeys(reversed(recent[node.name])))
                kept = [m for m in node.recent_models if m not in newest]
                node.recent_models = (newest + kept)[:RECENT_MODELS_KEPT]
            Node.objects.bulk_update(nodes, ["recent_models"])

    def _run_ended(
        self, job: Job, state: str, progress: float, reason: str, evictions: list[Eviction]
    ) -> None:
        """Decide what an ended run means for its job (in memory; ``_finish_runs`` writes)."""
        lost_s = max(0.0, job.progress_seconds - progress)
        job.progress_seconds = max(0.0, progress)
        if state == SUCCEEDED:
            job.state = Job.State.SUCCEEDED
            job.finished_at = to_datetime(self.now)
            self.event(job, "succeeded", "finished successfully")
            self.report.counts["finished"] += 1
        elif state == STOPPED and job.state == Job.State.PREEMPTING:
            self._requeue_after_stop(job, progress, reason, lost_s, evictions)
        else:  # failed, vanished, or stopped by someone else
            why = reason or "the run stopped"
            job.borrowed = False
            if job.retry_count < job.max_retries:
                job.state = Job.State.PENDING
                job.retry_count += 1
                self.event(
                    job, "retried",
                    f"run failed ({why}); automatic retry {job.retry_count} of {job.max_retries} "
                    f"resumes from the last checkpoint at {progress / 60:.0f} min of progress",
                )  # fmt: skip
                self.report.counts["retried"] += 1
            else:
                job.state = Job.State.FAILED
                job.finished_at = to_datetime(self.now)
                job.failure_reason = f"{why}; no retries left ({job.max_retries} used)"
                self.event(job, "failed", job.failure_reason)
                self.report.counts["failed"] += 1

    def _requeue_after_stop(
        self, job: Job, progress: float, reason: str, lost_s: float, evictions: list[Eviction]
    ) -> None:
        cause = job.stop_reason or "preemption"
        counts_as_eviction = cause in ("preemption", "inference")
        if counts_as_eviction:
            job.preemption_count += 1
            started = to_epoch(job.started_at) or self.now
            evictions.append(
                Eviction(
                    job=job, queue_id=job.queue_id, at=to_datetime(self.now), reason=cause,
                    gpus=job.gpus, gpu_seconds=job.gpus * max(0.0, self.now - started),
                    lost_gpu_seconds=job.gpus * lost_s,
                )
            )  # fmt: skip
        job.state = Job.State.PENDING
        saved = "after its checkpoint" if reason == "checkpoint" else f"({reason})"
        self.event(
            job, "requeued",
            f"stopped {saved} and back in the queue with {progress / 60:.0f} min of progress kept"
            + (f"; preempted {job.preemption_count} time(s)" if counts_as_eviction else ""),
        )  # fmt: skip
        job.preempt_deadline = None
        job.preempted_for = None
        job.stop_reason = ""
        job.borrowed = False
        self.report.counts["requeued"] += 1

    def _adopt(self, o: ObservedJob) -> None:
        job = Job.objects.select_for_update().filter(pk=o.job_id).first()
        if job is None or job.state != Job.State.PENDING:
            self.call(f"kill orphan {o.ref}", self.backend.kill, o.ref)
            self.report.drift.append(f"run {o.ref} had no waiting job: killed")
            return
        if not self._allocate(job, o.placement):
            self.call(f"kill {o.ref}", self.backend.kill, o.ref)
            return
        job.state = Job.State.RUNNING
        job.backend_ref = o.ref
        job.attempt = max(job.attempt, int(o.ref.rsplit("-", 1)[1]))
        job.started_at = job.started_at or to_datetime(self.now)
        job.save(update_fields=["state", "backend_ref", "attempt", "started_at", "updated_at"])
        self.event(job, "adopted", f"found running on the backend as {o.ref}: adopted")
        self.report.drift.append(f"run {o.ref} adopted for job {job.pk}")

    def _allocate(self, job: Job, slots: tuple[et.Slot, ...]) -> bool:
        names = {s.node for s in slots}
        node_ids = dict(Node.objects.filter(name__in=names).values_list("name", "id"))
        rows = [Allocation(job=job, node_id=node_ids[s.node], gpu_index=g)
                for s in slots if s.node in node_ids for g in s.gpus]  # fmt: skip
        try:
            with transaction.atomic():
                Allocation.objects.filter(job=job).delete()
                Allocation.objects.bulk_create(rows)
        except IntegrityError:
            self.report.errors.append(f"job {job.pk}: GPUs already allocated; not placed")
            return False
        return True

    # -- inference yields, drains and health moves ----------------------------
    def request_stops(self) -> None:
        """Ask running jobs to move off draining/unhealthy nodes and off inference peaks."""
        grace = production_policy().grace_seconds
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
        pressured = {ref for refs in self.obs.inference_pressure.values() for ref in refs}
        if pressured:
            for job_id in Job.objects.filter(
                backend_ref__in=pressured, state=Job.State.RUNNING, preemptible=True
            ).values_list("id", flat=True):
                stops.setdefault(job_id, "inference")
        for job in Job.objects.select_for_update().filter(pk__in=stops, state=Job.State.RUNNING):
            cause = stops[job.pk]
            if not self.call(f"stop {job.backend_ref}", self.backend.checkpoint_and_stop,
                             job.backend_ref, grace):  # fmt: skip
                continue
            job.state = Job.State.PREEMPTING
            job.stop_reason = cause
            job.preempt_deadline = to_datetime(self.now + grace)
            job.save(update_fields=["state", "stop_reason", "preempt_deadline", "updated_at"])
            words = {"drain": "its node is being drained", "health": "its node is unhealthy",
                     "inference": "online inference needs the GPUs back"}  # fmt: skip
            self.event(job, "checkpointing", f"asked to checkpoint and move: {words[cause]}")
            self.report.counts["moved"] += 1

    # -- apply the engine's plan ------------------------------------------------
    def apply(self, plan: et.Plan, rows: dict[int, dict]) -> None:
        for p in plan.preemptions:
            victim = Job.objects.select_for_update().filter(pk=p.victim_id).first()
            if victim is None or victim.state != Job.State.RUNNING:
                continue  # compare-and-set: it moved on since the snapshot
            grace = max(0.0, p.grace_deadline - self.now) if p.mode == et.GRACEFUL else 0.0
            call = self.backend.checkpoint_and_stop if grace > 0 else self.backend.kill
            args = (victim.backend_ref, grace) if grace > 0 else (victim.backend_ref,)
            if not self.call(f"preempt {victim.backend_ref}", call, *args):
                continue
            victim.state = Job.State.PREEMPTING
            victim.stop_reason = "preemption"
            victim.preempted_for_id = p.for_job_id
            victim.preempt_deadline = to_datetime(p.grace_deadline)
            victim.save(update_fields=["state", "stop_reason", "preempted_for",
                                       "preempt_deadline", "updated_at"])  # fmt: skip
            mode = "gracefully: checkpoint, then stop" if grace > 0 else "cold (killed)"
            self.event(victim, "preempted",
                       f"preempted {mode} to make room for job #{p.for_job_id}")  # fmt: skip
            self.report.counts["preemptions"] += 1
        self._start_all(plan.starts)
        self._write_verdicts(plan, rows)

    def _start_all(self, starts: tuple[et.Start, ...]) -> None:
        """Launch the plan's starts, then record them in a few statements.

        Compare-and-set: only jobs still pending are started. Each launch is told to
        the backend first; the GPU allocations of all successful launches are written
        in one statement (the unique (node, GPU) constraint guards it), falling back to
        one job at a time if it is refused, so one bad row cannot block the others.
        """
        if not starts:
            return
        jobs = {
            j.pk: j
            for j in Job.objects.select_for_update().filter(
                pk__in=[s.job_id for s in starts], state=Job.State.PENDING
            )
        }
        launched: list[tuple[Job, et.Start]] = []
        streaks = launch_streaks(list(jobs))
        for start in starts:
            job = jobs.get(start.job_id)
            if job is None:
                continue  # cancelled (or adopted) since the snapshot
            streak = streaks.get(job.pk)
            if streak and not launch_due(streak, self.now):
                self.report.counts["launch_backoff"] += 1
                self._launch_backoff(job, streak)
                continue  # backing off after a transient launch failure
            ref = run_ref(job.pk, job.attempt + 1)
            request = LaunchRequest(
                ref=ref, job_id=job.pk, name=job.name, placement=start.placement,
                progress_s=job.progress_seconds,
                checkpoint_interval_s=job.checkpoint_interval_minutes * 60.0,
                checkpoint_path=job.checkpoint_path, exclusive_node=job.exclusive_node,
                sim_duration_s=(job.sim_duration_minutes or 0) * 60.0 or None,
            )  # fmt: skip
            self.report.touched_backend = True
            try:
                self.backend.launch(request)
            except BackendError as err:
                self.report.errors.append(f"launch {ref}: {err}")
                if err.permanent:
                    job.state = Job.State.FAILED
                    job.failure_reason = f"the cluster refused to start it: {err}"
                    job.finished_at = to_datetime(self.now)
                    job.save(update_fields=["state", "failure_reason", "finished_at", "updated_at"])
                    self.event(job, "failed", job.failure_reason)
                    self.report.counts["failed"] += 1
                else:
                    self._launch_retry(job, err, streak)
                continue
            job.backend_ref = ref
            launched.append((job, start))
        placed = self._allocate_many(launched)
        now_dt = to_datetime(self.now)
        for job, start in placed:
            job.state = Job.State.RUNNING
            job.attempt += 1
            job.started_at = now_dt
            job.borrowed = start.borrowed
            job.pending_code = ""
            job.queue_position = None
            job.estimated_start = None
            borrowed = " on borrowed idle capacity (reclaimable)" if start.borrowed else ""
            self.event(job, "started", f"started on {_fmt_placement(start.placement)}{borrowed}")
        fields = ["state", "attempt", "backend_ref", "started_at", "borrowed", "pending_code",
                  "queue_position", "estimated_start"]  # fmt: skip
        bulk_set(Job, fields, [(j.pk, *(getattr(j, f) for f in fields)) for j, _ in placed])
        self.report.counts["starts"] += len(placed)

    def _launch_retry(
        self, job: Job, err: BackendError, streak: tuple[int, float, float] | None
    ) -> None:
        """A transient launch failure: the job stays pending and backs off (``launch_backoff_s``)."""
        attempts = (streak[0] if streak else 0) + 1
        # The event's time as the next cycles read it back (``launch_streaks``): the reason
        # written now is the one they compute, so while unchanged it is not written again.
        last = to_epoch(to_datetime(self.now))
        first = streak[1] if streak else last
        wait = launch_backoff_s(last - first)
        self.event(
            job, LAUNCH_RETRY,
            f"the cluster could not start it right now ({err}); still waiting, next attempt "
            f"in {wait:.0f} s or later (transient failure {attempts})",
        )  # fmt: skip
        self.launch_verdicts[job.pk] = launch_retry_verdict(attempts, first, last, str(err))
        self.report.counts["launch_retries"] += 1

    def _launch_backoff(self, job: Job, streak: tuple[int, float, float]) -> None:
        """A job backing off between launch attempts keeps saying why it waits."""
        attempts, first, last = streak
        details = job.pending_details if isinstance(job.pending_details, dict) else {}
        if job.pending_code == LAUNCH_RETRY_CODE and "error" in details:
            error = str(details["error"])
        else:  # another reason came in between: the error is in the streak's latest event
            message = (
                JobEvent.objects.filter(job_id=job.pk, kind=LAUNCH_RETRY)
                .order_by("-id")
                .values_list("message", flat=True)
                .first()
            ) or ""
            found = _RETRY_ERROR.search(message)
            error = found.group(1) if found else message
        self.launch_verdicts[job.pk] = launch_retry_verdict(attempts, first, last, error)

    def _allocate_many(self, launched: list[tuple[Job, et.Start]]) -> list[tuple[Job, et.Start]]:
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
            if self._allocate(job, start.placement):
                placed.append((job, start))
            else:
                self.call(f"kill {job.backend_ref}", self.backend.kill, job.backend_ref)
        return placed

    def counts_by_code(self, plan: et.Plan) -> dict[str, int]:
        """Pending jobs per reason code: the engine's verdicts and the loop's launch retries."""
        counts = plan.counts_by_code()
        counts[LAUNCH_RETRY_CODE] = len(self.launch_verdicts)
        return counts

    def _write_verdicts(self, plan: et.Plan, rows: dict[int, dict]) -> None:
        """Store each waiting job's verdict, only where it changed, in one statement per batch.

        The engine's verdicts, plus the loop's own for planned starts that were not launched
        (``LAUNCH_RETRY_CODE``): such a job has no engine verdict, it was planned to start.
        """
        changed = []
        for job_id, v in {**plan.verdicts, **self.launch_verdicts}.items():
            row = rows.get(job_id)
            if row is None or row["state"] != Job.State.PENDING:
                continue
            est = to_datetime(v.estimated_start)
            new = (v.code, v.message, v.details, v.remedy, v.position, est)
            old = (row["pending_code"], row["pending_message"], row["pending_details"],
                   row["pending_remedy"], row["queue_position"], row["estimated_start"])  # fmt: skip
            if new != old:
                changed.append((job_id, *new))
                if v.code != row["pending_code"]:  # a new reason: tell the job's watchers
                    publish_on_commit(f"job.{job_id}", "job.updated",
                                      {"id": job_id, "state": "pending", "pending_code": v.code})  # fmt: skip
        if changed:
            _bulk_write_verdicts(changed)
        publish_on_commit("pending", "pending.updated", {"by_reason": self.counts_by_code(plan)})

    def flush_events(self) -> None:
        JobEvent.objects.bulk_create(self.events, batch_size=1000)
        self.events.clear()


def _bulk_write_verdicts(changed: list[tuple]) -> None:
    bulk_set(
        Job,
        ["pending_code", "pending_message", "pending_details", "pending_remedy",
         "queue_position", "estimated_start"],
        changed,
        where="t.state = 'pending'",
    )  # fmt: skip


def _node_payload(node: Node) -> dict:
    return {"name": node.name, "state": node.state, "health": node.health,
            "residual_gpus": node.residual_gpus, "state_reason": node.state_reason}  # fmt: skip


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
        backend = open_backend(wall_now)
        obs = backend.observe()
        cycle = Cycle(backend, obs, kind)
        cycle.reconcile()
        cycle.request_stops()
        if cycle.report.touched_backend:
            cycle.obs = obs = backend.observe()
            cycle.release_cancelled()  # runs killed just now may already be gone
        timings["observe_ms"] = (time.perf_counter() - t0) * 1000
        if kind == "cycle":
            t1 = time.perf_counter()
            ctx = build_snapshot(obs, production_policy(), RuntimePredictor.from_history())
            plan = engine.plan(ctx.snapshot, obs.now)
            violations = engine.check_plan(ctx.snapshot, plan)
            timings["plan_ms"] = (time.perf_counter() - t1) * 1000
            t2 = time.perf_counter()
            if violations:
                # Never apply a plan that breaks an invariant; explain and wait.
                log.error("plan violates invariants, not applied: %s", violations[:5])
                cycle._write_verdicts(plan, ctx.jobs)
            else:
                cycle.apply(plan, ctx.jobs)
            by_reason = {k: v for k, v in cycle.counts_by_code(plan).items() if v}
            timings["apply_ms"] = (time.perf_counter() - t2) * 1000
        cycle.flush_events()
        backend.close()
        if cycle.report.errors:
            errors = cycle.report.errors
            raise_alert(
                alerts.BACKEND_ERROR, alerts.WARNING, backend.name,
                f"{len(errors)} call(s) to the {backend.name} backend failed in the last cycle "
                f"(transient ones are retried with backoff); first: {errors[0][:300]}",
            )  # fmt: skip
        counts = cycle.report.counts
        record = SchedulingCycle.objects.create(
            kind=kind,
            cluster_time=to_datetime(obs.now),
            duration_ms=(time.perf_counter() - t0) * 1000,
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
        publish_on_commit("cycles", "cycle.completed", cycle_payload(record))
        publish_on_commit("queues", "queues.updated", {"cycle": record.pk})
    return record


def cycle_payload(record: SchedulingCycle) -> dict:
    return {
        "id": record.pk, "kind": record.kind, "cluster_time": record.cluster_time.isoformat(),
        "duration_ms": round(record.duration_ms, 1), "starts": record.starts,
        "preemptions": record.preemptions, "finished": record.finished, "failed": record.failed,
        "requeued": record.requeued, "pending": record.pending,
        "pending_by_reason": record.pending_by_reason, "errors": record.errors[:5],
        "violations": record.violations[:5], "drift": record.drift[:5],
    }  # fmt: skip
