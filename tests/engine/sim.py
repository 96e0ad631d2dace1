"""A tiny virtual-time stepper for engine tests: applies plans to a cluster.

Jobs have a true duration hidden from the engine; running jobs checkpoint every
``ckpt_interval`` seconds; a graceful preemption stops the victim at its grace
deadline with its progress kept (it checkpoints on the way out) and requeues it
with ``preemption_count + 1``; a cold one requeues it at once, losing progress
since the last checkpoint. A migration (consolidation) stops the job at its deadline the
same way but requeues it with its ``preemption_count`` unchanged; jobs listed in
``checkpointable`` run as checkpointable (movable). Running jobs' borrowed flags follow the
plan, as the loop writes them: ``Plan.marks``, then the jobs a quota swap displaced. Every
plan is checked with ``check_plan`` and with the stepper's own bookkeeping (a GPU can only
be allocated if it is free).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scheduling.engine import check_plan, plan
from scheduling.engine import types as et

# What a running job keeps of its pending spec.
KEPT_FIELDS = [
    "id",
    "queue",
    "line",
    "tier",
    "gpus",
    "preemptible",
    "preemption_count",
    "exclusive_node",
    "model_name",
    "owner",
]


@dataclass
class Truth:
    duration: float  # true total runtime
    done: float = 0.0  # progress kept so far (seconds)
    ckpt_interval: float = 3600.0


class Stepper:
    def __init__(
        self,
        nodes: Sequence[et.NodeView],
        lines: Sequence[et.LineView],
        queues: Sequence[et.QueueView],
        policy: et.PolicyConfig | None = None,
        now: float = 0.0,
    ) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.free = {n.name: set(n.free_gpus) for n in nodes}
        self.lines = tuple(lines)
        self.queues = tuple(queues)
        self.policy = policy or et.PolicyConfig()
        self.now = float(now)
        self.pending: dict[int, et.PendingJob] = {}
        self.running: dict[int, et.RunningJob] = {}
        self.truth: dict[int, Truth] = {}
        self.specs: dict[int, et.PendingJob] = {}
        self.finished: dict[int, float] = {}
        self.plans: list[tuple[float, et.Snapshot, et.Plan]] = []
        self.preempted: list[tuple[float, int, int]] = []  # (time, victim, for)
        self.moved: list[tuple[float, int, int, str]] = []  # (time, job, for, to node)
        self.checkpointable: set[int] = set()

    # -- setup -------------------------------------------------------------------
    def submit(self, job: et.PendingJob, duration: float, ckpt_interval: float = 3600.0) -> None:
        self.pending[job.id] = job
        self.specs[job.id] = job
        self.truth[job.id] = Truth(duration, 0.0, ckpt_interval)

    def place(
        self,
        job: et.PendingJob,
        slots: dict[str, Iterable[int]],
        duration: float,
        started_at: float,
        ckpt_interval: float = 3600.0,
        predicted_end: float | None = None,
        borrowed: bool = False,
    ) -> None:
        """Put a job directly into the running state (history before the test)."""
        self.specs[job.id] = job
        self.truth[job.id] = Truth(duration, 0.0, ckpt_interval)
        placement = tuple(et.Slot(n, tuple(sorted(g))) for n, g in slots.items())
        self._run(job, placement, started_at, predicted_end or started_at + duration, borrowed)

    def set_node(self, name: str, **changes: object) -> None:
        self.nodes[name] = dataclasses.replace(self.nodes[name], **changes)

    # -- time ----------------------------------------------------------------------
    def _run(
        self,
        job: et.PendingJob,
        placement: tuple[et.Slot, ...],
        started_at: float,
        predicted_end: float,
        borrowed: bool,
    ) -> None:
        for slot in placement:
            free = self.free[slot.node]
            assert set(slot.gpus) <= free, f"GPUs {slot.gpus} of {slot.node} are not free"
            free.difference_update(slot.gpus)
        self.running[job.id] = et.RunningJob(
            placement=placement,
            started_at=started_at,
            last_checkpoint_at=started_at,
            predicted_end=predicted_end,
            borrowed=borrowed,
            checkpointable=job.id in self.checkpointable,
            **{f: getattr(job, f) for f in KEPT_FIELDS},
        )

    def _release(self, r: et.RunningJob) -> None:
        for slot in r.placement:
            self.free[slot.node].update(slot.gpus)
        del self.running[r.id]

    def _requeue(self, r: et.RunningJob, progress: float) -> None:
        self._release(r)
        t = self.truth[r.id]
        t.done += progress
        spec = self.specs[r.id]
        count = r.preemption_count if r.migrating else r.preemption_count + 1
        self.pending[r.id] = dataclasses.replace(spec, preemption_count=count)
        self.specs[r.id] = self.pending[r.id]

    def advance(self, seconds: float) -> None:
        """Move the clock; finish jobs and complete preemptions that are due."""
        target = self.now + seconds
        # process due events in time order
        while True:
            due: list[tuple[float, int, str]] = []
            for r in self.running.values():
                t = self.truth[r.id]
                if r.state == "preempting":
                    end = r.preempt_deadline or self.now
                    finish = r.started_at + (t.duration - t.done)
                    if finish <= end and finish <= target:
                        due.append((finish, r.id, "finish"))
                    elif end <= target:
                        due.append((end, r.id, "stop"))
                else:
                    finish = r.started_at + (t.duration - t.done)
                    if finish <= target:
                        due.append((finish, r.id, "finish"))
            if not due:
                break
            when, jid, kind = min(due)
            self.now = max(self.now, when)
            r = self.running[jid]
            if kind == "finish":
                self._release(r)
                self.finished[jid] = when
            else:
                self._requeue(r, when - r.started_at)
        self.now = target
        # checkpoints
        for jid, r in list(self.running.items()):
            interval = self.truth[jid].ckpt_interval
            n = int((self.now - r.started_at) // interval)
            ckpt = r.started_at + n * interval
            if ckpt != r.last_checkpoint_at:
                self.running[jid] = dataclasses.replace(r, last_checkpoint_at=ckpt)

    # -- the loop --------------------------------------------------------------------
    def snapshot(self) -> et.Snapshot:
        excl = {s.node for r in self.running.values() if r.exclusive_node for s in r.placement}
        nodes = tuple(
            dataclasses.replace(n, free_gpus=tuple(sorted(self.free[name])), exclusive=name in excl)
            for name, n in self.nodes.items()
        )
        return et.Snapshot(
            nodes=nodes,
            lines=self.lines,
            queues=self.queues,
            running=tuple(self.running[k] for k in sorted(self.running)),
            pending=tuple(self.pending[k] for k in sorted(self.pending)),
            policy=self.policy,
        )

    def step(self, seconds: float = 0.0) -> et.Plan:
        if seconds:
            self.advance(seconds)
        snap = self.snapshot()
        result = plan(snap, self.now)
        violations = check_plan(snap, result)
        assert violations == [], (self.now, violations)
        self.apply(result)
        self.plans.append((self.now, snap, result))
        return result

    def apply(self, result: et.Plan) -> None:
        for st in result.starts:
            job = self.pending.pop(st.job_id)
            rt = job.predicted_runtime_s or self.policy.default_runtime_s
            self._run(job, st.placement, self.now, self.now + rt, st.borrowed)
        for p in result.preemptions:
            r = self.running[p.victim_id]
            self.preempted.append((self.now, p.victim_id, p.for_job_id))
            if p.mode == "cold":
                lost_since = r.last_checkpoint_at or r.started_at
                self._requeue(r, lost_since - r.started_at)
            else:
                self.running[r.id] = dataclasses.replace(
                    r,
                    state="preempting",
                    preempted_for=p.for_job_id,
                    preempt_deadline=p.grace_deadline,
                )
        for m in result.migrations:
            r = self.running[m.job_id]
            self.moved.append((self.now, m.job_id, m.for_job_id, m.to_node))
            self.running[r.id] = dataclasses.replace(
                r,
                state="preempting",
                preempted_for=m.for_job_id,
                preempt_deadline=m.grace_deadline,
                migrating=True,
            )
        # borrowed flags: the accounting's corrections, then what the swaps displaced
        flags = {m.job_id: m.borrowed for m in result.marks}
        flags.update((rid, True) for sw in result.swaps for rid in sw.displaced)
        for rid, flag in flags.items():
            self.running[rid] = dataclasses.replace(self.running[rid], borrowed=flag)

    def run_until(self, t: float, every: float = 300.0) -> list[et.Plan]:
        out = []
        while self.now + every <= t + 1e-9:
            out.append(self.step(every))
        return out

    # -- observations ----------------------------------------------------------------
    def active_gpus(self, queue: str) -> int:
        return sum(
            r.gpus for r in self.running.values() if r.queue == queue and r.state == "running"
        )

    def is_running(self, job_id: int) -> bool:
        return job_id in self.running and self.running[job_id].state == "running"
