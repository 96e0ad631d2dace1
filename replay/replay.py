"""Trace replay: the portal's engine (``plan``) driving the simulator core in virtual time.

How a replay runs (details and the measured results are in docs/replay.md):

* Jobs of the trace arrive at their submit times. A scheduling cycle runs every
  ``cycle_s`` virtual seconds (60 s by default), as the portal's beat task does;
  between cycles the simulator advances straight to the next boundary, returning
  the completions and checkpoint-stops in time order (metrics are integrated at
  the exact event times).
* Each *pool* of nodes (one per trace queue when isolated, one when shared) is
  planned by its own ``plan(snapshot, now)`` call holding only that pool's nodes,
  jobs and contracts, and only when it has waiting jobs and something changed
  since its last plan (an arrival, a completion or a stop in the pool), or
  ``replan_s`` passed (the engine's backfill rules depend on ``now``).
* Exact shortcuts (``shortcuts=False`` turns them off; tests compare): a plan is
  skipped when it could not start anything (no waiting job fits the free GPUs and
  the policy cannot preempt for one); without borrowing and preemption, jobs whose
  line is at its quota are left out of the snapshot (they can neither start nor
  change the other decisions).
* Without backfill (``fifo``, ``priority``) the engine starts nothing behind the
  first job blocked for capacity, so a plan over the first ``plan_prefix`` (256)
  waiting jobs in the engine's order settles the cycle whenever one of them is
  blocked; a long queue then costs O(256) per plan instead of O(queue). Under
  strict FIFO an arrival behind such a blocked job does not trigger a plan.
* Starts go to ``Simulator.launch`` with the job's hidden true duration and the
  progress it kept; preemptions to ``request_checkpoint_stop`` (graceful) or
  ``kill`` (cold). A stopped job goes back to the queue with its progress, its
  submit time and ``preemption_count + 1`` (the engine demotes it after 3).
* The scheduler sees no true durations: ``predicted_runtime_s`` comes from
  ``OnlinePredictor`` (the engine's history predictor, learnt from jobs as they
  finish). ``oracle-sjf`` is the ``backfill`` configuration of the same engine
  given the true remaining runtime as its prediction and, as its sort key, the
  same number in ``submitted_at`` with ``strict_fifo`` on, so the engine orders
  shortest remaining first (the engine has no SJF knob; ``submitted_at`` only feeds
  its ordering). It is a bound on what perfect runtime knowledge buys backfill.
* The simulator runs without random failures, node faults or stale processes
  (``REPLAY_SIM_CONFIG``): a replay measures scheduling policies.

Deterministic: no wall clock or unseeded randomness enters a decision; pools are
planned in name order. The seed drives the trace's seeded tier/model mapping and
the simulator's RNG.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from scheduling.engine import (
    Code,
    LineView,
    NodeView,
    PendingJob,
    Plan,
    PolicyConfig,
    QueueView,
    RunningJob,
    Slot,
    Snapshot,
    Tier,
    check_plan,
    plan,
)
from scheduling.engine.types import COLD, PREEMPTING
from scheduling.simcore import (
    JOB_CHECKPOINTED,
    JOB_FAILED,
    JOB_STOPPED,
    JOB_SUCCEEDED,
    SimConfig,
    SimNode,
    Simulator,
    build_demo_cluster,
)

from . import metrics as m
from .predictor import OnlinePredictor
from .workload import NODE_GPUS, Layout, Workload, build_layout, load_workload

POLICIES = ("fifo", "priority", "backfill", "full", "oracle-sjf")
RACK_NODES = 32
#: Models a node remembers for affinity (as the portal's loop: RECENT_MODELS_KEPT).
RECENT_MODELS_KEPT = 3
REPLAY_SIM_CONFIG = SimConfig(
    job_failure_rate_per_gpu_hour=0.0,
    node_fault_rate_per_node_hour=0.0,
    residual_probability=0.0,
)
DAY = 86400.0

# Job states in the replay.
_FUTURE, _PENDING, _RUNNING, _PREEMPTING, _DONE, _REJECTED = range(6)


class ReplayError(RuntimeError):
    pass


#: Verdicts that, in a plan without backfill, mean a job was blocked for capacity and
#: so blocked everything after it in its pool (``Planner.consider`` sets head-of-line).
_CAPACITY_BLOCK = frozenset(
    {Code.PRIORITY, Code.TOPOLOGY, Code.INSUFFICIENT_GPUS, Code.PREEMPTING, Code.DEMOTED}
)


def _head_blocked(decided: Plan) -> bool:
    return any(v.code in _CAPACITY_BLOCK for v in decided.verdicts.values())


def policy_config(name: str) -> PolicyConfig:
    """The engine configuration of a replay policy (``oracle-sjf``: see module doc)."""
    if name == "oracle-sjf":
        return PolicyConfig.preset("backfill", strict_fifo=True)
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICIES)}")
    return PolicyConfig.preset(name)


@dataclass(frozen=True)
class ReplayConfig:
    trace: str = "philly"
    policy: str = "fifo"
    pool_gpus: int | None = None
    window: str | None = None
    seed: int = 0
    cycle_s: float = 60.0
    replan_s: float = 600.0  # re-plan a waiting pool at least this often (0: only on events)
    checkpoint_interval_s: float = 3600.0
    checkpoint_cost_s: float = 60.0
    check: bool = False  # run check_plan on every plan (slow; for tests)
    plan_prefix: int = 256  # without backfill, plan the first K jobs first (exact)
    shortcuts: bool = True  # the exact shortcuts (off: every plan sees every waiting job)
    max_drain_s: float = 365 * DAY  # give up this long after the window if jobs remain
    bucket_s: float = 3600.0  # utilization-over-time resolution


class _Job:
    __slots__ = (
        "idx",
        "key",
        "queue",
        "equeue",
        "tier",
        "gpus",
        "rdma",
        "model",
        "preemptible",
        "submit",
        "duration",
        "progress",
        "state",
        "first_start",
        "finish",
        "runs",
        "evictions",
        "demoted",
        "placement",
        "last_placement",
        "started_at",
        "last_ckpt",
        "borrowed",
        "pview",
        "rview",
        "pool",
    )

    def __init__(self, idx: int, tj, pool: _Pool) -> None:
        self.idx = idx
        self.key = tj.id
        self.queue = tj.queue
        self.tier = Tier.parse(tj.tier)
        self.equeue = f"{tj.queue}/{self.tier.label}"
        self.gpus = tj.gpus
        self.rdma = tj.rdma
        self.model = tj.model_name
        self.preemptible = tj.preemptible
        self.submit = tj.submit_s
        self.duration = tj.duration_s
        self.progress = 0.0
        self.state = _FUTURE
        self.first_start: float | None = None
        self.finish: float | None = None
        self.runs = 0
        self.evictions = 0
        self.demoted = False
        self.placement: tuple = ()
        self.last_placement: tuple = ()
        self.started_at = 0.0
        self.last_ckpt: float | None = None
        self.borrowed = False
        self.pview: PendingJob | None = None
        self.rview: RunningJob | None = None
        self.pool = pool


class _Pool:
    """One partition of the cluster, planned by its own engine call."""

    def __init__(
        self,
        name: str,
        nodes: list[SimNode],
        lines: tuple[LineView, ...],
        queues: tuple[QueueView, ...],
        window: float,
    ) -> None:
        self.name = name
        self.by_name = {n.name: n for n in nodes}
        self.names = [n.name for n in nodes]
        self.total = {n.name: n.gpus_total for n in nodes}
        self.free: dict[str, set[int]] = {n.name: set(range(n.gpus_total)) for n in nodes}
        self.views: dict[str, NodeView | None] = dict.fromkeys(self.names)
        self.recent: dict[str, tuple[str, ...]] = dict.fromkeys(self.names, ())
        self.capacity = sum(self.total.values())
        self.free_total = self.capacity
        self.lines = lines
        self.queues = queues
        self.pending: dict[int, _Job] = {}
        self.running: dict[int, _Job] = {}
        self.borrowed_running = 0
        self.dirty = False
        self.head_blocked = False  # last plan (without backfill) ended blocked for capacity
        self.last_plan = -1e18
        self.frag = m.FragMeter(self.capacity, len(nodes), NODE_GPUS, window)

    def view(self, name: str) -> NodeView:
        v = self.views[name]
        if v is None:
            v = self._build_view(name)
            self.views[name] = v
        return v

    def _build_view(self, name: str) -> NodeView:
        sn = self.by_name[name]
        return NodeView(
            name=name,
            rack=sn.rack,
            block=sn.block,
            gpu_model=sn.gpu_model,
            gpu_memory_gb=sn.gpu_memory_gb,
            gpus_total=sn.gpus_total,
            free_gpus=tuple(sorted(self.free[name])),
            rdma=sn.rdma,
            recent_models=self.recent[name],
            pool=self.name,
        )

    def take(self, name: str, gpus: tuple[int, ...]) -> None:
        free = self.free[name]
        total = self.total[name]
        if len(free) == total:
            self.frag.whole -= 1
        free.difference_update(gpus)
        self.free_total -= len(gpus)
        self.frag.idle -= len(gpus)
        self.views[name] = None

    def give(self, name: str, gpus: tuple[int, ...]) -> None:
        free = self.free[name]
        free.update(gpus)
        self.free_total += len(gpus)
        self.frag.idle += len(gpus)
        if len(free) == self.total[name]:
            self.frag.whole += 1
        self.views[name] = None


def _pool_nodes(pool: str, gpus: int) -> list[SimNode]:
    """``gpus/8`` uniform nodes of one isolated pool, in racks of 32, one block."""
    out = []
    for i in range(gpus // NODE_GPUS):
        r = i // RACK_NODES
        out.append(
            SimNode(
                name=f"{pool}-r{r:02d}-n{i % RACK_NODES:02d}",
                rack=f"{pool}-r{r:02d}",
                block=f"{pool}-b0",
                gpu_model="H100",
                gpu_memory_gb=80,
            )
        )
    return out


class Replay:
    """One replay of a workload under one policy and layout; ``run()`` returns the result dict."""

    def __init__(self, workload: Workload, layout: Layout, config: ReplayConfig) -> None:
        self.w = workload
        self.layout = layout
        self.cfg = config
        self.policy = policy_config(config.policy)
        self.oracle = config.policy == "oracle-sjf"
        p = self.policy
        # Strict FIFO without backfill: a new arrival queues behind a job already blocked
        # for capacity, so it cannot start before capacity frees (a completion or stop).
        self.arrivals_wait = config.shortcuts and (
            p.strict_fifo and not (p.backfill or p.borrowing or p.preemption)
        )
        self.predictor = OnlinePredictor()
        window = workload.window_s
        self.window = window
        tiers = sorted(Tier, reverse=True)

        def queues_of(q: str) -> tuple[QueueView, ...]:
            return tuple(QueueView(f"{q}/{t.label}", q, t) for t in tiers)

        def line_of(q: str) -> LineView:
            return LineView(q, layout.quota[q], layout.guarantee[q])

        self.pools: dict[str, _Pool] = {}
        all_nodes: list[SimNode] = []
        if layout.kind == "isolated":
            for q in workload.queues:
                nodes = _pool_nodes(q, layout.pools[q])
                self.pools[q] = _Pool(q, nodes, (line_of(q),), queues_of(q), window)
                all_nodes += nodes
        else:
            gpus = layout.pools["shared"]
            nodes = build_demo_cluster(
                nodes=gpus // NODE_GPUS, nodes_per_rack=RACK_NODES, uniform=True
            )
            lines = tuple(line_of(q) for q in workload.queues)
            queues = tuple(v for q in workload.queues for v in queues_of(q))
            self.pools["shared"] = _Pool("shared", nodes, lines, queues, window)
            all_nodes += nodes
        self.sim = Simulator(all_nodes, seed=config.seed, config=REPLAY_SIM_CONFIG)
        self.jobs = [
            _Job(i, tj, self.pools[layout.pool_of[tj.queue]]) for i, tj in enumerate(workload.jobs)
        ]
        self.by_key = {j.key: j for j in self.jobs}
        if len(self.by_key) != len(self.jobs):
            raise ReplayError("the trace has duplicate job ids")
        self.qmeter = {q: m.Meter(layout.capacity[q], window) for q in workload.queues}
        self.meter = m.Meter(layout.total_gpus, window, config.bucket_s)
        self.plan_calls = 0
        self.plan_skips = 0
        self.plan_s = 0.0
        self.preemptions: dict[str, int] = dict.fromkeys(workload.queues, 0)
        self.borrowed_starts: dict[str, int] = dict.fromkeys(workload.queues, 0)
        self.done = 0
        self.now = 0.0

    # -- bookkeeping ----------------------------------------------------------------
    def _meters(self, j: _Job, t: float) -> tuple[m.Meter, m.Meter, m.FragMeter]:
        qm, om, fm = self.qmeter[j.queue], self.meter, j.pool.frag
        qm.at(t)
        om.at(t)
        fm.at(t)
        return qm, om, fm

    def _wait(self, j: _Job, t: float, delta: int) -> None:
        qm, om, fm = self._meters(j, t)
        qm.waiting += delta
        om.waiting += delta
        fm.waiting += delta

    def _admit(self, j: _Job) -> None:
        t = j.submit
        pool = j.pool
        q = self.layout.quota[j.queue]
        if j.gpus > pool.capacity or (q is not None and j.gpus > q):
            j.state = _REJECTED  # could never start here (see docs/replay.md)
            self.done += 1
            return
        j.state = _PENDING
        pool.pending[j.idx] = j
        if not (self.arrivals_wait and pool.head_blocked):
            pool.dirty = True
        self._wait(j, t, +1)

    def _release(self, j: _Job, t: float) -> None:
        qm, om, fm = self._meters(j, t)
        qm.busy -= j.gpus
        om.busy -= j.gpus
        pool = j.pool
        for name, gpus in j.placement:
            pool.give(name, gpus)
        del pool.running[j.idx]
        if j.borrowed:
            pool.borrowed_running -= 1
        j.placement = ()
        j.rview = None
        pool.dirty = True

    def _finish(self, j: _Job, t: float) -> None:
        self._release(j, t)
        j.state = _DONE
        j.finish = t
        j.progress = j.duration
        self.done += 1
        self.predictor.add(
            owner="", model_name=j.model, queue=j.queue, gpus=j.gpus, runtime_s=j.duration
        )
        if j.model:
            pool = j.pool
            for name, _ in j.last_placement:
                models = [x for x in pool.recent[name] if x != j.model]
                pool.recent[name] = (j.model, *models)[:RECENT_MODELS_KEPT]
                pool.views[name] = None

    def _requeue(self, j: _Job, t: float, progress: float | None, evicted: bool) -> None:
        self._release(j, t)
        if progress is not None:
            j.progress = max(0.0, min(progress, j.duration))
        if evicted:
            j.evictions += 1
            if j.evictions > self.policy.demote_after:
                j.demoted = True
        j.state = _PENDING
        j.pool.pending[j.idx] = j
        self._wait(j, t, +1)

    # -- engine views ---------------------------------------------------------------
    def _pending_view(self, j: _Job) -> PendingJob:
        remaining_true = j.duration - j.progress
        if self.oracle:
            pred = remaining_true
            key = remaining_true
        else:
            total = self.predictor.predict(
                owner="", model_name=j.model, queue=j.queue, gpus=j.gpus
            ).seconds
            pred = max(total - j.progress, self.policy.overrun_s) if j.progress else total
            key = j.submit
        v = j.pview
        if (
            v is None
            or v.predicted_runtime_s != pred
            or v.preemption_count != j.evictions
            or v.submitted_at != key
        ):
            v = PendingJob(
                id=j.idx,
                queue=j.equeue,
                line=j.queue,
                tier=j.tier,
                gpus=j.gpus,
                rdma=j.rdma,
                preemptible=j.preemptible,
                submitted_at=key,
                preemption_count=j.evictions,
                model_name=j.model,
                predicted_runtime_s=pred,
                pool=j.pool.name,
            )
            j.pview = v
        return v

    def _running_view(self, j: _Job) -> RunningJob:
        v = j.rview
        if v is None:
            v = self._new_running_view(j)
            j.rview = v
        return v

    def _new_running_view(self, j: _Job) -> RunningJob:
        if self.oracle:
            remaining = j.duration - j.progress
        else:
            total = self.predictor.predict(
                owner="", model_name=j.model, queue=j.queue, gpus=j.gpus
            ).seconds
            remaining = max(0.0, total - j.progress)
        return RunningJob(
            id=j.idx,
            queue=j.equeue,
            line=j.queue,
            tier=j.tier,
            gpus=j.gpus,
            placement=tuple(Slot(n, g) for n, g in j.placement),
            preemptible=j.preemptible,
            preemption_count=j.evictions,
            started_at=j.started_at,
            last_checkpoint_at=j.last_ckpt,
            predicted_end=j.started_at + remaining,
            model_name=j.model,
            borrowed=j.borrowed,
        )

    # -- one pool's plan ----------------------------------------------------------
    def _candidates(self, pool: _Pool) -> list[_Job] | None:
        """The waiting jobs a plan must see, or None when it could not start anything.

        Without borrowing and preemption (every policy but ``full``), a job whose line
        is at its quota can neither start nor change the engine's decisions for the
        others (``Planner.consider`` records QUOTA_EXCEEDED and moves on), and usage
        only grows within a plan, so such jobs are left out. A plan can start nothing
        if no candidate fits in the pool's free GPUs and the policy cannot preempt
        for one (only urgent queues preempt, and anyone within quota may reclaim
        borrowed work).
        """
        jobs = list(pool.pending.values())
        if not self.cfg.shortcuts:
            return jobs
        policy = self.policy
        if policy.preemption and (
            pool.borrowed_running or any(j.tier == Tier.URGENT for j in jobs)
        ):
            return jobs
        if not (policy.borrowing or policy.preemption):
            room = {}
            for line in pool.lines:
                if line.quota_gpus is not None:
                    room[line.name] = line.quota_gpus - self.qmeter[line.name].busy
            if room:
                jobs = [j for j in jobs if j.gpus <= room.get(j.queue, j.gpus)]
        if not jobs or pool.free_total < min(j.gpus for j in jobs):
            return None
        return jobs

    def _plan(self, pool: _Pool, now: float) -> None:
        pool.dirty = False
        if not pool.pending:
            return
        jobs = self._candidates(pool)
        if jobs is None:
            self.plan_skips += 1
            return
        pool.last_plan = now
        prefix = self._prefix(pool, jobs)
        decided = self._call(pool, prefix or jobs, now)
        if prefix is not None and not _head_blocked(decided):
            decided = self._call(pool, jobs, now)  # the prefix did not settle it: all of them
        if not self.policy.backfill:
            pool.head_blocked = _head_blocked(decided)
        sim = self.sim
        for p in decided.preemptions:
            v = self.jobs[p.victim_id]
            if p.mode == COLD:
                sim.kill(v.key)
            else:
                sim.request_checkpoint_stop(v.key, max(0.0, p.grace_deadline - now))
            v.state = _PREEMPTING
            v.rview = replace(
                self._running_view(v),
                state=PREEMPTING,
                preempted_for=p.for_job_id,
                preempt_deadline=p.grace_deadline,
            )
            self.preemptions[v.queue] += 1
        for s in decided.starts:
            self._start(self.jobs[s.job_id], s, now)
        for jid, verdict in decided.verdicts.items():
            if verdict.code == Code.NEVER_FITS:
                j = self.jobs[jid]
                del pool.pending[jid]
                self._wait(j, now, -1)
                j.state = _REJECTED
                self.done += 1

    def _call(self, pool: _Pool, pending: list[_Job], now: float) -> Plan:
        snap = Snapshot(
            nodes=tuple(pool.view(n) for n in pool.names),
            lines=pool.lines,
            queues=pool.queues,
            running=tuple(self._running_view(j) for j in pool.running.values()),
            pending=tuple(self._pending_view(j) for j in pending),
            policy=self.policy,
        )
        t0 = time.perf_counter()
        decided = plan(snap, now)
        self.plan_s += time.perf_counter() - t0
        self.plan_calls += 1
        if self.cfg.check:
            errors = check_plan(snap, decided)
            if errors:
                raise ReplayError(f"plan at {now} in pool {pool.name} breaks rules: {errors[:5]}")
        return decided

    def _prefix(self, pool: _Pool, jobs: list[_Job]) -> list[_Job] | None:
        """Without backfill, the first ``plan_prefix`` jobs in the engine's order, or None.

        With backfill, borrowing and preemption all off (``fifo``, ``priority``), the
        engine starts jobs in its order until the first one blocked for capacity and
        nothing after it (head-of-line blocking), and a job's fate depends only on the
        jobs before it. So if a plan over the first K jobs ends with one of them
        blocked for capacity, a plan over all of them starts exactly the same jobs.
        The order is the engine's: ``(submitted_at, id)`` under ``strict_fifo``, else
        ``(-tier, demoted, line share, submitted_at, id)`` with the line share as in
        ``Planner._line_shares`` (GPUs held / line quota, or / pool size without one).
        """
        k = self.cfg.plan_prefix
        policy = self.policy
        if not k or len(jobs) <= k or policy.backfill or policy.borrowing or policy.preemption:
            return None
        if policy.strict_fifo:
            jobs.sort(key=lambda j: (j.submit, j.idx))
            return jobs[:k]
        share: dict[str, float] = {}
        for line in pool.lines:
            held = self.qmeter[line.name].busy
            quota = line.quota_gpus
            if quota is None:
                share[line.name] = held / (pool.capacity or 1)
            elif quota <= 0:
                share[line.name] = math.inf if held else 0.0
            else:
                share[line.name] = held / quota
        after = policy.demote_after
        jobs.sort(key=lambda j: (-j.tier, j.evictions > after, share[j.queue], j.submit, j.idx))
        return jobs[:k]

    def _start(self, j: _Job, s, now: float) -> None:
        pool = j.pool
        placement = tuple((slot.node, slot.gpus) for slot in s.placement)
        self.sim.launch(
            j.key,
            placement,
            j.duration,
            progress_s=j.progress,
            checkpoint_interval_s=self.cfg.checkpoint_interval_s,
            checkpoint_cost_s=self.cfg.checkpoint_cost_s,
        )
        del pool.pending[j.idx]
        qm, om, fm = self._meters(j, now)
        qm.waiting -= 1
        om.waiting -= 1
        fm.waiting -= 1
        qm.busy += j.gpus
        om.busy += j.gpus
        for name, gpus in placement:
            pool.take(name, gpus)
        j.placement = placement
        j.last_placement = placement
        j.state = _RUNNING
        j.started_at = now
        j.last_ckpt = None
        j.runs += 1
        if j.first_start is None:
            j.first_start = now
        j.borrowed = s.borrowed
        if s.borrowed:
            pool.borrowed_running += 1
            self.borrowed_starts[j.queue] += 1
        pool.running[j.idx] = j
        j.rview = None

    # -- the event loop -------------------------------------------------------------
    def run(self, progress: Callable[[float, int], None] | None = None) -> dict:
        wall0 = time.perf_counter()
        cfg = self.cfg
        cycle = cfg.cycle_s
        jobs = self.jobs
        n = len(jobs)
        ai = 0
        k = -1  # cycle boundaries are k * cycle_s; the first may be t = 0
        sim = self.sim
        pools = [self.pools[name] for name in sorted(self.pools)]
        track_ckpt = self.policy.preemption
        limit = self.window + cfg.max_drain_s
        last_report = wall0
        while self.done < n:
            idle = not any(p.pending or p.running for p in pools)
            if idle and ai < n:
                k = max(k + 1, int(-(-jobs[ai].submit // cycle)))
            else:
                k += 1
            t = k * cycle
            if t > limit:
                break
            for ev in sim.advance_to(t):
                kind = ev.kind
                if kind == JOB_CHECKPOINTED:
                    if track_ckpt:
                        j = self.by_key[ev.job_id]
                        j.last_ckpt = ev.at
                        if j.state == _RUNNING:
                            j.rview = None
                    continue
                while ai < n and jobs[ai].submit <= ev.at:
                    self._admit(jobs[ai])
                    ai += 1
                if kind == JOB_SUCCEEDED:
                    self._finish(self.by_key[ev.job_id], ev.at)
                elif kind in (JOB_STOPPED, JOB_FAILED):
                    j = self.by_key[ev.job_id]
                    self._requeue(j, ev.at, ev.progress_s, j.state == _PREEMPTING)
            while ai < n and jobs[ai].submit <= t:
                self._admit(jobs[ai])
                ai += 1
            self.now = t
            replan = cfg.replan_s
            for pool in pools:
                if pool.pending and (pool.dirty or (replan and t - pool.last_plan >= replan)):
                    self._plan(pool, t)
                else:
                    pool.dirty = False
            if progress is not None and time.perf_counter() - last_report > 5:
                last_report = time.perf_counter()
                progress(t, self.done)
        end = self.now
        self.meter.at(end)
        for qm in self.qmeter.values():
            qm.at(end)
        for pool in pools:
            pool.frag.at(end)
        wall = time.perf_counter() - wall0
        return self._result(end, wall)

    # -- the result -------------------------------------------------------------------
    def _stats(self, jobs: list[_Job]) -> dict:
        finished = [j for j in jobs if j.state == _DONE]
        delays = sorted(j.first_start - j.submit for j in finished)  # type: ignore[operator]
        jcts = [j.finish - j.submit for j in finished]  # type: ignore[operator]
        runs = sum(j.runs for j in jobs)
        evictions = sum(j.evictions for j in jobs)
        return {
            "jobs": len(jobs),
            "finished": len(finished),
            "rejected": sum(1 for j in jobs if j.state == _REJECTED),
            "unfinished": sum(1 for j in jobs if j.state not in (_DONE, _REJECTED)),
            "avg_queue_s": m.rounded(m.mean(delays), 1),
            "median_queue_s": m.rounded(m.quantile(delays, 0.5), 1),
            "p95_queue_s": m.rounded(m.quantile(delays, 0.95), 1),
            "avg_jct_s": m.rounded(m.mean(jcts), 1),
            "runs": runs,
            "evictions": evictions,
            "eviction_ratio": m.rounded(evictions / runs if runs else 0.0),
            "jobs_demoted": sum(1 for j in jobs if j.demoted),
            "_delays": delays,
        }

    def _result(self, end: float, wall: float) -> dict:
        layout = self.layout
        per_queue: dict[str, dict] = {}
        by_queue: dict[str, list[_Job]] = {q: [] for q in self.w.queues}
        for j in self.jobs:
            by_queue[j.queue].append(j)
        for q in self.w.queues:
            st = self._stats(by_queue[q])
            st.pop("_delays")
            qm = self.qmeter[q]
            frag = self.pools[q].frag.value() if layout.kind == "isolated" else None
            st.update(
                capacity_gpus=layout.capacity[q],
                quota_gpus=layout.quota[q],
                utilization=m.rounded(qm.utilization()),
                backlog_utilization=m.rounded(qm.backlog_utilization()),
                fragmentation=m.rounded(frag),
                avg_waiting_jobs=m.rounded(qm.avg_waiting(), 2),
                max_waiting_jobs=qm.max_waiting,
                preemptions=self.preemptions[q],
                borrowed_starts=self.borrowed_starts[q],
            )
            per_queue[q] = _ordered(st)
        overall = self._stats(self.jobs)
        delays = overall.pop("_delays")
        scattered = sum(p.frag.scattered_s for p in self.pools.values())
        idle = sum(p.frag.idle_s for p in self.pools.values())
        sim_days = end / DAY
        overall.update(
            capacity_gpus=layout.total_gpus,
            utilization=m.rounded(self.meter.utilization()),
            backlog_utilization=m.rounded(self.meter.backlog_utilization()),
            fragmentation=m.rounded(scattered / idle if idle > 0 else None),
            avg_waiting_jobs=m.rounded(self.meter.avg_waiting(), 2),
            max_waiting_jobs=self.meter.max_waiting,
            preemptions=sum(self.preemptions.values()),
            borrowed_starts=sum(self.borrowed_starts.values()),
            simulated_days=round(sim_days, 3),
            plan_calls=self.plan_calls,
            plan_skips=self.plan_skips,
            plan_wall_s=round(self.plan_s, 2),
            wall_s=round(wall, 2),
            sim_days_per_wall_s=round(sim_days / wall, 2) if wall > 0 else None,
        )
        return {
            "trace": self.w.trace,
            "source": self.w.source,
            "policy": self.cfg.policy,
            "layout": layout.kind,
            "pool_gpus": self.cfg.pool_gpus,
            "window": self.w.window_label,
            "window_s": self.window,
            "seed": self.cfg.seed,
            "cycle_s": self.cfg.cycle_s,
            "replan_s": self.cfg.replan_s,
            "layout_rule": layout.rule,
            "overall": _ordered(overall),
            "per_queue": per_queue,
            "series": {
                "bucket_s": self.cfg.bucket_s,
                "utilization": self.meter.series(end),
                "queue_delay_percentiles": m.percentiles(delays),
            },
        }


_FIELD_ORDER = (
    "jobs",
    "finished",
    "rejected",
    "unfinished",
    "capacity_gpus",
    "quota_gpus",
    "avg_queue_s",
    "median_queue_s",
    "p95_queue_s",
    "avg_jct_s",
    "utilization",
    "backlog_utilization",
    "fragmentation",
    "avg_waiting_jobs",
    "max_waiting_jobs",
    "preemptions",
    "evictions",
    "runs",
    "eviction_ratio",
    "jobs_demoted",
    "borrowed_starts",
)


def _ordered(d: dict) -> dict:
    out = {k: d[k] for k in _FIELD_ORDER if k in d}
    out.update((k, v) for k, v in d.items() if k not in out)
    return out


#: Keys of ``overall`` that measure the wall clock (differ between identical runs).
TIMING_KEYS = ("plan_wall_s", "wall_s", "sim_days_per_wall_s")


def run_replay(config: ReplayConfig, progress: Callable[[float, int], None] | None = None) -> dict:
    """Load the trace, build the layout, replay, and return the result dict."""
    workload = load_workload(config.trace, config.window, config.seed)
    layout = build_layout(workload, config.pool_gpus)
    return Replay(workload, layout, config).run(progress)
