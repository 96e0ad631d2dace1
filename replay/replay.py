"""Trace replay: the portal's engine (``plan``) driving the simulator core in virtual time.

How a replay runs (details and the measured results are in docs/replay.md):

* Jobs of the trace arrive at their submit times. A scheduling cycle runs every
  ``cycle_s`` virtual seconds (60 s by default; the portal's beat task runs every
  ``SCHEDULER_CYCLE_SECONDS``, 5 s by default: ``--cycle-s 5``);
  between cycles the simulator advances straight to the next boundary, returning
  the completions and checkpoint-stops in time order (metrics are integrated at
  the exact event times).
* Each *pool* of nodes (one per trace queue when isolated, one when shared) is
  planned by its own ``plan(snapshot, now)`` call holding only that pool's nodes,
  jobs and contracts (``pools``), and only when it has waiting jobs and something
  changed since its last plan (an arrival, a completion or a stop in the pool), or
  ``replan_s`` passed (the engine's backfill rules depend on ``now``).
* Plans that could not start anything are skipped and long queues without backfill
  are planned by a prefix: exact shortcuts (``shortcuts``). Under strict FIFO an
  arrival behind a job blocked for capacity does not trigger a plan.
* Starts go to ``Simulator.launch`` with the job's hidden true duration and the
  progress it kept; preemptions to ``request_checkpoint_stop`` (graceful) or
  ``kill`` (cold). A stopped job goes back to the queue with its progress, its
  submit time and ``preemption_count + 1`` (the engine demotes it after 3).
  Migrations (consolidation, ``full``) are graceful stops too, but the moved job keeps
  its ``preemption_count``; they are counted apart (``migrations``), not as evictions.
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

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from scheduling.engine import (
    Code,
    LineView,
    PendingJob,
    Plan,
    PolicyConfig,
    QueueView,
    RunningJob,
    Snapshot,
    Tier,
    check_plan,
    plan,
)
from scheduling.engine.policy import is_demoted
from scheduling.engine.predict import PLAN_QUANTILE, Prediction, run_end, waiting_runtime_s
from scheduling.engine.types import COLD, PREEMPTING, READY
from scheduling.simcore import SimConfig, SimNode, Simulator, build_demo_cluster
from scheduling.simcore.observation import (
    JOB_CHECKPOINTED,
    JOB_FAILED,
    JOB_STOPPED,
    JOB_SUCCEEDED,
)

from . import idle
from . import metrics as m
from .borrow_history import BorrowHistory
from .pools import (
    DONE,
    MOVING,
    PENDING,
    PREEMPTED,
    RACK_NODES,
    REJECTED,
    RUNNING,
    Pool,
    ReplayJob,
    pool_nodes,
)
from .predictor import OnlinePredictor
from .results import DAY, result_of
from .shortcuts import candidates, head_blocked, plan_prefix
from .start_estimates import StartEstimates
from .wait_reasons import WaitLedger, reason_of, unseen_reason, why_not_borrowing
from .workload import NODE_GPUS, Layout, Workload, build_layout, load_workload

POLICIES = ("fifo", "priority", "backfill", "full", "oracle-sjf")
#: The engine's borrowing rules a replay may set (``--borrow NAME=VALUE``) and their types.
BORROW_KNOBS: dict[str, type] = {
    "borrow_forecast": bool,
    "borrow_forecast_all": bool,
    "borrow_cooldown_s": float,
    "borrow_queue_cooldown_s": float,
    "borrow_eviction_target": float,
    "borrow_cap": bool,
    "borrow_forecast_over_target": bool,
    "borrow_queue_cooldown_over_target": bool,
    "swap_quota": bool,
    "swap_eviction_budget": bool,
    "swap_least_at_risk": bool,
    "swap_risk_cap_gpu_h": float,
    "consolidate_over_quota": bool,
    "consolidate_before_reclaim": bool,
    "reclaim_move_min_gpu_h": float,
}
#: The engine's order, preemption and consolidation rules a replay may set (``--order NAME=VALUE``, #19).
ORDER_KNOBS: dict[str, type] = {
    "starvation_bound_s": float,
    "order_by_work": bool,
    "share_bands": int,
    "hold_quota_when_overdue": bool,
    "overdue_across_tiers": bool,
    "align_ends": bool,
    "preempt_after_s": float,
    "tier_preempt_after_s": float,
    "wait_if_free_within_s": float,
    "predictive_patience": bool,
    "overrun_foresight": float,
    "victim_given_weight": float,
    # consolidation (moving checkpointable jobs so a waiting gang starts)
    "consolidation": bool,
    "max_migrations": int,
    "max_migrations_per_queue": int,
    "max_consolidations": int,
    "consolidate_min_wait_s": float,
    "migrate_min_run_s": float,
    "defragment_nodes": int,
    "defragment_min_left_s": float,
}
#: Models a node remembers for affinity (as the portal's loop: RECENT_MODELS_KEPT).
RECENT_MODELS_KEPT = 3
REPLAY_SIM_CONFIG = SimConfig(
    job_failure_rate_per_gpu_hour=0.0,
    node_fault_rate_per_node_hour=0.0,
    residual_probability=0.0,
)


class ReplayError(RuntimeError):
    pass


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
    predict_quantile: float = PLAN_QUANTILE  # the runtime quantile the plans use
    true_runtimes: bool = False  # plan with true remaining runtimes (a bound; oracle-sjf's)
    # borrowing rules set apart from the engine's defaults (#19): ((field, value), ...)
    borrow: tuple[tuple[str, float | bool], ...] = ()
    order: tuple[tuple[str, float | bool], ...] = ()
    bucket_s: float = 3600.0  # utilization-over-time resolution


class Replay:
    """One replay of a workload under one policy and layout; ``run()`` returns the result dict."""

    def __init__(self, workload: Workload, layout: Layout, config: ReplayConfig) -> None:
        self.w = workload
        self.layout = layout
        self.cfg = config
        self.policy = replace(
            policy_config(config.policy), **dict(config.borrow), **dict(config.order)
        )
        # oracle-sjf: true runtimes and shortest remaining first; --true-runtimes: the
        # policy's own order, planned with true runtimes (what perfect prediction buys)
        self.sjf = config.policy == "oracle-sjf"
        self.oracle = self.sjf or config.true_runtimes
        p = self.policy
        # Strict FIFO without backfill: a new arrival queues behind a job already blocked
        # for capacity, so it cannot start before capacity frees (a completion or stop).
        self.arrivals_wait = config.shortcuts and (
            p.strict_fifo and not (p.backfill or p.borrowing or p.preemption)
        )
        self.predictor = OnlinePredictor(quantile=config.predict_quantile)
        # demand peaks and eviction figures for the borrowing rules (#19)
        self.history = BorrowHistory() if self.policy.borrowing else None
        window = workload.window_s
        self.window = window
        tiers = sorted(Tier, reverse=True)

        def queues_of(q: str) -> tuple[QueueView, ...]:
            return tuple(QueueView(f"{q}/{t.label}", q, t) for t in tiers)

        def line_of(q: str) -> LineView:
            return LineView(q, layout.quota[q], layout.guarantee[q])

        self.pools: dict[str, Pool] = {}
        all_nodes: list[SimNode] = []
        if layout.kind == "isolated":
            for q in workload.queues:
                nodes = pool_nodes(q, layout.pools[q])
                self.pools[q] = Pool(q, nodes, (line_of(q),), queues_of(q), window)
                all_nodes += nodes
        else:
            gpus = layout.pools["shared"]
            nodes = build_demo_cluster(
                nodes=gpus // NODE_GPUS, nodes_per_rack=RACK_NODES, uniform=True
            )
            lines = tuple(line_of(q) for q in workload.queues)
            queues = tuple(v for q in workload.queues for v in queues_of(q))
            self.pools["shared"] = Pool("shared", nodes, lines, queues, window)
            all_nodes += nodes
        self.sim = Simulator(all_nodes, seed=config.seed, config=REPLAY_SIM_CONFIG)
        self.jobs = [
            ReplayJob(i, tj, self.pools[layout.pool_of[tj.queue]])
            for i, tj in enumerate(workload.jobs)
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
        self.migrations: dict[str, int] = dict.fromkeys(workload.queues, 0)
        # moved jobs stopped and not restarted yet: idx -> when (``moved_restarts``)
        self.moved_at: dict[int, float] = {}
        # each restart after a move: (seconds from the stop, in the room kept for it)
        self.moved_restarts: list[tuple[float, bool]] = []
        self.borrowed_starts: dict[str, int] = dict.fromkeys(workload.queues, 0)
        self.swaps: dict[str, int] = dict.fromkeys(workload.queues, 0)
        self.done = 0
        self.now = 0.0
        self.waits = WaitLedger()  # queueing delay by reason (``wait_reasons``)
        # the estimated starts shown to waiting jobs, against their starts
        self.estimates = StartEstimates(config.cycle_s)

    # -- bookkeeping ----------------------------------------------------------------
    def _meters(self, j: ReplayJob, t: float) -> tuple[m.Meter, m.Meter, m.FragMeter]:
        qm, om, fm = self.qmeter[j.queue], self.meter, j.pool.frag
        qm.at(t)
        om.at(t)
        fm.at(t)
        return qm, om, fm

    def _wait(self, j: ReplayJob, t: float, delta: int) -> None:
        qm, om, fm = self._meters(j, t)
        qm.waiting += delta
        om.waiting += delta
        fm.waiting += delta

    def _admit(self, j: ReplayJob) -> None:
        t = j.submit
        pool = j.pool
        q = self.layout.quota[j.queue]
        if j.gpus > pool.capacity or (q is not None and j.gpus > q):
            j.state = REJECTED  # could never start here (see docs/replay.md)
            self.done += 1
            return
        j.state = PENDING
        pool.pending[j.idx] = j
        self.waits.arrive(j.idx, t)
        if not (self.arrivals_wait and pool.head_blocked):
            pool.dirty = True
        self._wait(j, t, +1)

    def _release(self, j: ReplayJob, t: float) -> None:
        qm, om, fm = self._meters(j, t)
        qm.busy -= j.gpus
        om.busy -= j.gpus
        j.gpu_s += j.run_gpu_s(t)
        if self.history is not None:
            self.history.run_ended(j.equeue, j.gpus, t)
        pool = j.pool
        for name, gpus in j.placement:
            pool.give(name, gpus)
        del pool.running[j.idx]
        if j.borrowed:
            pool.borrowed_running -= 1
        j.placement = ()
        j.rview = None
        pool.dirty = True

    def _finish(self, j: ReplayJob, t: float) -> None:
        self._release(j, t)
        j.state = DONE
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

    def _requeue(self, j: ReplayJob, t: float, progress: float | None, evicted: bool) -> None:
        if j.state == MOVING:
            self.moved_at[j.idx] = t
            j.moves += 1  # stopped by a move: it restarts from its checkpoint, not evicted
        self._release(j, t)
        if progress is not None:
            j.progress = max(0.0, min(progress, j.duration))
        if evicted:
            run_gpu_s = j.run_gpu_s(t)
            j.evictions += 1
            j.evicted_gpu_s += run_gpu_s
            j.demoted = j.demoted or is_demoted(j.evictions, self.policy)
            j.evicted_at = t
            if self.history is not None:
                self.history.evicted(j.equeue, run_gpu_s, t)
        j.state = PENDING
        j.pool.pending[j.idx] = j
        self._wait(j, t, +1)

    # -- engine views ---------------------------------------------------------------
    def _prediction(self, j: ReplayJob, elapsed_s: float = 0.0) -> Prediction:
        """What the scheduler believes the job's whole run takes (learnt as jobs finish),
        given that it has already run ``elapsed_s``. The traces name no users."""
        return self.predictor.predict(
            owner="", model_name=j.model, queue=j.queue, gpus=j.gpus, elapsed_s=elapsed_s
        )

    def _predicted_s(self, j: ReplayJob, elapsed_s: float = 0.0) -> float:
        return self._prediction(j, elapsed_s).seconds

    def _pending_view(self, j: ReplayJob) -> PendingJob:
        if self.oracle:
            remaining_true = j.duration - j.progress
            return j.pending_view(remaining_true, remaining_true if self.sjf else j.submit)
        pred = waiting_runtime_s(
            lambda elapsed: self._predicted_s(j, elapsed), j.progress, self.policy.overrun_s
        )
        return j.pending_view(pred, j.submit)

    def _running_view(self, j: ReplayJob) -> RunningJob:
        """The job running, as the engine sees it. Its predicted end is learnt history
        conditioned on how long it had run when the view was built (``predict.run_end``,
        as the loop predicts it from the run's last checkpoint); the view is built again
        at a checkpoint, a change of its borrowed flag, and once it runs past that end."""
        v = j.rview
        if v is None or (
            not self.oracle
            and j.state == RUNNING
            and v.predicted_end is not None
            and v.predicted_end <= self.now
        ):
            if self.oracle:
                end = j.started_at + (j.duration - j.progress)
            else:  # known to have run until now (the view is rebuilt at a checkpoint)
                end = run_end(lambda e: self._predicted_s(j, e), j.started_at, j.progress,
                              self.now, reached_at=self.now)  # fmt: skip
            v = j.rview = j.running_view(end)
        return v

    # -- one pool's plan ----------------------------------------------------------
    def _plan(self, pool: Pool, now: float) -> None:
        pool.dirty = False
        if not pool.pending:
            return
        jobs = candidates(pool, self.policy, self.qmeter, self.cfg.shortcuts)
        if jobs is None:
            self.plan_skips += 1
            self._idle_causes(pool, None, now)
            self._wait_reasons(pool, None, now)
            return
        pool.last_plan = now
        prefix = plan_prefix(pool, jobs, self.policy, self.cfg.plan_prefix, self.qmeter)
        decided = self._call(pool, prefix or jobs, now)
        if prefix is not None and not head_blocked(decided):
            decided = self._call(pool, jobs, now)  # the prefix did not settle it: all of them
        if not self.policy.backfill:
            pool.head_blocked = head_blocked(decided)
        sim = self.sim
        for p in decided.preemptions:
            v = self.jobs[p.victim_id]
            if p.mode == COLD:
                sim.kill(v.key)
            else:
                sim.request_checkpoint_stop(v.key, max(0.0, p.grace_deadline - now))
            v.state = PREEMPTED
            v.rview = replace(
                self._running_view(v),
                state=PREEMPTING,
                preempted_for=p.for_job_id,
                preempt_deadline=p.grace_deadline,
            )
            self.preemptions[v.queue] += 1
        for mv in decided.migrations:
            v = self.jobs[mv.job_id]
            sim.request_checkpoint_stop(v.key, max(0.0, mv.grace_deadline - now))
            v.state = MOVING
            v.rview = replace(
                self._running_view(v),
                state=PREEMPTING,
                preempted_for=mv.for_job_id,
                preempt_deadline=mv.grace_deadline,
                migrating=True,
                move_to=mv.to_node,
            )
            v.move_to = mv.to_node
            self.migrations[v.queue] += 1
        for mark in decided.marks:  # the accounting's borrowed flags, as the loop writes them
            v = self.jobs[mark.job_id]
            if v.borrowed != mark.borrowed:
                v.borrowed = mark.borrowed
                v.rview = None
                pool.borrowed_running += 1 if mark.borrowed else -1
        for s in decided.starts:
            self._start(self.jobs[s.job_id], s, now)
        for sw in decided.swaps:  # quota swaps: the displaced work now runs borrowed
            self.swaps[self.jobs[sw.job_id].queue] += 1
            for rid in sw.displaced:
                v = self.jobs[rid]
                if not v.borrowed:
                    v.borrowed = True
                    v.rview = None
                    pool.borrowed_running += 1
        self._idle_causes(pool, decided, now, jobs)
        self._wait_reasons(pool, decided, now)
        for jid, verdict in decided.verdicts.items():
            if verdict.code == Code.NEVER_FITS:
                j = self.jobs[jid]
                del pool.pending[jid]
                self.waits.drop(jid)
                self.estimates.drop(jid)
                self._wait(j, now, -1)
                j.state = REJECTED
                self.done += 1

    def _idle_causes(
        self,
        pool: Pool,
        decided: Plan | None,
        now: float,
        seen: list[ReplayJob] | None = None,
    ) -> None:
        """Give the idle GPUs after a plan (``decided``; None: skipped, nothing could
        start) their causes (``replay.idle``) until the next plan."""
        fm = pool.frag
        fm.at(now)
        if fm.idle <= 0 or not pool.pending:
            fm.set_claims({})  # GPUs freed before the next plan are awaiting_cycle
            return
        seen_ids = {j.idx for j in seen} if seen is not None else set()
        unseen = [
            (j.gpus, "demoted" if j.demoted else "quota")
            for j in pool.pending.values()
            if j.idx not in seen_ids and self._over_quota(j)
        ]
        if decided is None:
            rest = fm.idle
            others = [
                (j.gpus, "insufficient") for j in pool.pending.values() if not self._over_quota(j)
            ]
            fm.set_claims(idle.claim_rest({}, rest, [*unseen, *others]))
            return
        free = {name: len(g) for name, g in pool.free.items() if g}
        not_ready = [n for n in free if pool.view(n).state != READY]
        jobs = self.jobs
        gpus_of = {jid: jobs[jid].gpus for jid in decided.verdicts}
        demoted = [jid for jid in decided.verdicts if jobs[jid].demoted]
        borrowers = [jid for jid in decided.verdicts
                     if idle.may_borrow(jobs[jid].preemptible, jobs[jid].demoted, self.policy)]  # fmt: skip
        fm.set_claims(
            idle.idle_claims(free, not_ready, decided, gpus_of, demoted, unseen, borrowers)
        )

    def _wait_reasons(self, pool: Pool, decided: Plan | None, now: float) -> None:
        """From ``now`` each waiting job of the pool waits for what the plan said
        (``decided``; None: skipped, nothing could start); see ``wait_reasons``."""
        verdicts = decided.verdicts if decided is not None else {}
        hold = self.waits.hold
        policy = self.policy
        for j in pool.pending.values():
            if j.first_start is not None:
                continue
            v = verdicts.get(j.idx)
            why_not = why_not_borrowing(j.preemptible, j.demoted, policy)
            if v is not None:
                hold(j.idx, now, reason_of(v, why_not))
                self.estimates.shown(j.idx, now, v.estimated_start, v.code)
            else:
                hold(j.idx, now, unseen_reason(self._over_quota(j), decided is None, why_not))

    def _over_quota(self, j: ReplayJob) -> bool:
        """Whether the job's line lacks the quota room for it (the shortcuts' test)."""
        if idle.may_borrow(j.preemptible, j.demoted, self.policy):
            return False  # it may borrow: what it lacks is free GPUs
        quota = self.layout.quota[j.queue]
        return quota is not None and j.gpus > quota - self.qmeter[j.queue].busy

    def _call(self, pool: Pool, pending: list[ReplayJob], now: float) -> Plan:
        queues, peaks = pool.queues, ()
        history = self.history
        if history is not None:
            demand = {line.name: self.qmeter[line.name].busy for line in pool.lines}
            for j in pool.pending.values():
                demand[j.queue] = demand.get(j.queue, 0) + j.gpus
            quota = self.layout.quota
            history.sample(
                sum(d if quota[q] is None else min(d, quota[q]) for q, d in demand.items()), now
            )
            queues, peaks = history.queues(queues, now), history.peaks()
        snap = Snapshot(
            nodes=tuple(pool.view(n) for n in pool.names),
            lines=pool.lines,
            queues=queues,
            running=tuple(self._running_view(j) for j in pool.running.values()),
            pending=tuple(self._pending_view(j) for j in pending),
            policy=self.policy,
            demand_peaks=peaks,
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

    def _start(self, j: ReplayJob, s, now: float) -> None:
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
        j.state = RUNNING
        j.started_at = now
        moved_at = self.moved_at.pop(j.idx, None)
        if moved_at is not None:
            self.moved_restarts.append((now - moved_at, placement[0][0] == j.move_to))
        j.move_to = None
        j.last_ckpt = None
        j.runs += 1
        if self.history is not None:
            self.history.run_started(j.equeue, j.gpus, now)
        if j.first_start is None:
            j.first_start = now
            self.waits.started(j.idx, now)
            self.estimates.started(j.idx, now)
            got = self._prediction(j)  # what the scheduler believed, for the error table
            j.predicted_s = got.seconds
            j.predicted_source = got.source
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
                        if j.state == RUNNING:
                            j.rview = None
                    continue
                while ai < n and jobs[ai].submit <= ev.at:
                    self._admit(jobs[ai])
                    ai += 1
                if kind == JOB_SUCCEEDED:
                    self._finish(self.by_key[ev.job_id], ev.at)
                elif kind in (JOB_STOPPED, JOB_FAILED):
                    j = self.by_key[ev.job_id]
                    self._requeue(j, ev.at, ev.progress_s, j.state == PREEMPTED)
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
        return result_of(self, end, wall)


def run_replay(config: ReplayConfig, progress: Callable[[float, int], None] | None = None) -> dict:
    """Load the trace, build the layout, replay, and return the result dict."""
    workload = load_workload(config.trace, config.window, config.seed)
    layout = build_layout(workload, config.pool_gpus)
    return Replay(workload, layout, config).run(progress)
