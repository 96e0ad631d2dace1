"""``plan(snapshot, now)``: who starts, where, who is preempted, who waits and why.

One pass over the pending jobs in policy order (``aging.order``: tier, then jobs past
the starvation bound oldest first, then demoted last, then the line's fair-share band,
then the smallest predicted work, then submit time; or submit time only under
``strict_fifo``):

1. ``NEVER_FITS`` / ``QUOTA_EXCEEDED`` / ``NODES_UNAVAILABLE`` gates (static,
   cached per job shape; NEVER_FITS is ``feasibility.check``, the rule the submit
   service refuses by). A job over quota that may borrow is deferred to a
   second pass, so borrowers only get capacity nobody entitled wanted.
2. Without backfill, the first job blocked for capacity blocks everything after
   it (head-of-line), per pool.
3. Place on free capacity (best fit / rack / block, see ``placement``); with
   backfill, also on reserved nodes when the job is predicted to end before the
   reservation starts.
4. Otherwise: keep holding for victims already checkpointing for it; else look
   for victims (``preemption``); else reserve the earliest nodes it could get
   (up to ``max_reservations``). A preemptor claims the quota room it preempted
   for, so later jobs of its queue / line cannot take it meanwhile.
5. Jobs blocked for capacity are explained last, against what the plan leaves:
   ``QUOTA_EXCEEDED`` if jobs started after it used the quota room it had; else
   against the GPUs left free once every start is placed (reservations lifted):
   ``PRIORITY`` if those would fit it (the nodes are reserved for work ahead),
   else ``TOPOLOGY`` / ``INSUFFICIENT_GPUS``. That is also what the next cycle
   sees when nothing changes, so a job's code stays put while its situation does.

Failed placements are cached per shape: within one plan capacity only shrinks,
so a shape that failed stays failed (for backfill, for every job predicted to
end no earlier).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import replace
from itertools import compress
from typing import Any

from . import aging, explain, feasibility
from .accounting import derive_usage, marks, preemption_budgets
from .backfill import Timeline
from .blocked import BlockedJob, BlockedJobs
from .borrowing import COOLDOWNS, Borrowing, refused_reason
from .consolidation import BORROWED, Consolidation, leaving_reason
from .defragment import defragment
from .kept_rooms import keep_rooms, restarts
from .line_estimate import estimate_the_line
from .node_choice import NodeChoice
from .overrun_note import note_overruns
from .placement import ClassKey, Cluster, Topology, class_key, place_on_counts
from .policy import (
    foreseen_end,
    gc_paused,
    given_gpu_s,
    inference_ok,
    is_demoted,
    job_runtime,
    may_borrow,
    overruns,
    queue_preempts,
    running_end,
    shape_counts,
)
from .preemption import (
    CapacityView,
    QuotaView,
    Selection,
    VictimIndex,
    VictimRequest,
    select_victims,
)
from .quota_room import QuotaRoom
from .quota_swap import QuotaSwap
from .types import (
    COLD,
    PREEMPTING,
    RUNNING,
    Code,
    PendingJob,
    Plan,
    PolicyConfig,
    Preemption,
    Reservation,
    RunningJob,
    Slot,
    Snapshot,
    Start,
    Verdict,
)

ShapeT = tuple[ClassKey, int, int, int, bool]
Record = tuple[explain.Reason, float | None]

_INF = math.inf


def waiting_since(job: PendingJob) -> float:
    """Since when a job waits: its submission, or its last eviction if later."""
    evicted = job.last_evicted_at
    return job.submitted_at if evicted is None else max(job.submitted_at, evicted)


def node_ends(
    topo: Topology, running: Sequence[RunningJob], now: float, policy: PolicyConfig
) -> list[float]:
    """Per node, when its running work is predicted to end (``now`` for an idle node):
    what runtime-aware packing (``placement.aligned``) reads."""
    ends = [now] * topo.n
    index = topo.index
    for r in running:
        e = running_end(r, now, policy)
        for slot in r.placement:
            i = index.get(slot.node)
            if i is not None and e > ends[i]:
                ends[i] = e
    return ends


class Planner:
    """One plan: the pass over the waiting jobs (``consider``, ``consider_borrower``) and
    the state its parts share (free capacity, reservations, quota use, verdicts).

    The parts, each given the planner: ``quota`` (``QuotaRoom``: shortfalls, predicted
    room, holds), ``where`` (``NodeChoice``: where a job starts now), ``blocked``
    (``BlockedJobs``: verdicts of the jobs blocked for capacity), ``consolidation``,
    ``borrowing``, ``swap`` (``QuotaSwap``), and, once the pass is done, the line's
    estimates (``line_estimate``) and defragmentation.
    """

    def __init__(self, snapshot: Snapshot, now: float) -> None:
        self.s = snapshot
        self.now = float(now)
        self.policy = snapshot.policy
        self.topo = Topology(snapshot.nodes)
        self.live = Cluster(self.topo)
        if self.policy.align_ends:
            self.live.ends = node_ends(self.topo, snapshot.running, self.now, self.policy)
        self._cluster_shape: feasibility.ClusterShape | None = None
        self.queues = {q.name: q for q in snapshot.queues}
        self.lines = {line.name: line for line in snapshot.lines}
        self.usage = derive_usage(snapshot.running, self.queues, self.lines)
        self.nb_queue = dict(self.usage.nb_queue)
        self.nb_line = dict(self.usage.nb_line)
        self.budget_q, self.budget_l = preemption_budgets(self.usage, self.queues, self.lines)
        n = self.topo.n
        index = self.topo.index
        self.on_node: list[list[tuple[RunningJob, int]]] = [[] for _ in range(n)]
        self.leaving_for: dict[int, list[RunningJob]] = {}
        pool: list[RunningJob] = []
        for r in snapshot.running:
            for slot in r.placement:
                i = index.get(slot.node)
                if i is not None:
                    self.on_node[i].append((r, len(slot.gpus)))
            if r.state == PREEMPTING and r.preempted_for is not None:
                self.leaving_for.setdefault(r.preempted_for, []).append(r)
            elif (
                r.state == RUNNING
                and r.preemptible
                and not is_demoted(r.preemption_count, self.policy)
            ):
                pool.append(r)
        pool.sort(key=lambda r: r.id)
        self.victim_pool = pool
        self._victim_index: VictimIndex | None = None
        # running jobs this plan stops, moves or displaces (quota_swap.py): nobody's victim now
        self.victim_ids: set[int] = set()
        self.excl_held: set[int] = {i for i, node in enumerate(snapshot.nodes) if node.exclusive}
        self.started_on = [0] * n
        self.plan_excl: set[int] = set()
        self.reserved: dict[int, float] = {}
        self.max_res_start = -_INF
        # Nodes entering scheduled maintenance (``NodeView.unavailable_from``): held like a
        # reservation from then, so only work predicted to end by then starts there
        # (``NodeChoice``), no reservation, preemption or move counts on them, and a job
        # that fits only with them waits as NODES_UNAVAILABLE (``unavailable``).
        self.maint: dict[int, float] = {
            i: node.unavailable_from
            for i, node in enumerate(snapshot.nodes)
            if node.unavailable_from is not None and self.topo.ready[i]
        }
        self._maint_starts = sorted(set(self.maint.values()))
        for i, t in self.maint.items():
            self.live.block(i)
            self.reserved[i] = t
            self.max_res_start = max(self.max_res_start, t)
        self._timeline: Timeline | None = None
        self._overrunning: list[RunningJob] | None = None  # runs past their predicted end
        self._start_events: list[tuple[float, int, int]] = []
        self._end_override: dict[int, float] = {}
        self.starts: list[Start] = []
        self.preemptions: list[Preemption] = []
        self.reservations: list[Reservation] = []
        # jobs past the starvation bound (``aging``): submitted at or before this instant
        self.overdue_since = aging.overdue_since(self.now, self.policy)
        self.n_overdue_res = 0
        # shortfalls, predicted room, and the room overdue jobs hold (quota_room.py)
        self.quota = QuotaRoom(self)
        self.n_backfill_res = 0
        self.n_preemptors = 0
        self.n_searches = 0
        self.records: dict[int, Record] = {}
        # jobs blocked for capacity, explained once the plan is complete (blocked.py)
        self.blocked = BlockedJobs(self)
        # jobs that may preempt only once they have waited ``preempt_after_s``: id -> from
        self.patient: dict[int, float] = {}
        # caches (valid for this plan only)
        self._shape_cache: dict[tuple[Any, ...], ShapeT] = {}
        self._never: dict[ShapeT, explain.Reason | None] = {}
        self._unavail: dict[tuple[ShapeT, int], dict[str, Any] | None] = {}
        self._elig_ready: dict[ClassKey, bytearray] = {}
        self._block_hist: dict[tuple[ClassKey, bool, int], list[list[int]]] = {}
        self._preempt_failed: set[tuple[Any, ...]] = set()
        self._describe: dict[ShapeT, str] = {}
        # aggregates for verdicts ("N jobs ahead need G GPUs")
        self.ahead_jobs = 0
        self.ahead_gpus = 0
        self.hol: set[Any] = set()
        # moving checkpointable jobs so a waiting gang starts (#19, consolidation.py)
        self.consolidation = Consolidation(self)
        # where a job starts now: nodes without inference first, the forecast (node_choice.py)
        self.where = NodeChoice(self)
        # who may borrow, and for how long (#19, borrowing.py)
        self.borrowing = Borrowing(self)
        # non-preemptible work starting within quota by displacing its own (#19)
        self.swap = QuotaSwap(self)
        # rooms kept for moved jobs still checkpointing (#19, kept_rooms.py)
        keep_rooms(self)

    # -- helpers -------------------------------------------------------------------
    def cluster_shape(self) -> feasibility.ClusterShape:
        """Every node, whatever its state (for NEVER_FITS and for describing shapes)."""
        if self._cluster_shape is None:
            self._cluster_shape = feasibility.ClusterShape.of_nodes(self.s.nodes)
        return self._cluster_shape

    def ask(self, job: PendingJob, sh: ShapeT) -> feasibility.Ask:
        mem, rdma, infer, pool, model = sh[0]
        return feasibility.Ask(job.gpus, job.gpus_per_node, mem or None, rdma, infer, model, pool)

    def shape(self, job: PendingJob) -> ShapeT:
        infer = inference_ok(job)
        ck = (
            job.gpus,
            job.gpus_per_node,
            job.gpu_memory_gb,
            job.rdma,
            infer,
            job.pool,
            job.gpu_model,
            job.exclusive_node,
        )
        sh = self._shape_cache.get(ck)
        if sh is None:
            k, c, last = shape_counts(job.gpus, job.gpus_per_node, self.topo.max_gpus)
            key = class_key(job.gpu_memory_gb, job.rdma, infer, job.pool, job.gpu_model)
            sh = (key, k, c, last, bool(job.exclusive_node))
            self._shape_cache[ck] = sh
        return sh

    def victim_index(self) -> VictimIndex:
        if self._victim_index is None:
            self._victim_index = VictimIndex(
                self.victim_pool,
                self.usage.borrowed_ids,
                self.topo,
                self.now,
                self.policy.eviction_cost_gpu_h,
                self.policy.victim_given_weight,
            )
        return self._victim_index

    def capacity_view(self) -> CapacityView:
        """Free capacity and who holds it, as of now in this plan (for victim selection)."""
        live = self.live
        return CapacityView(
            self.topo,
            live.nfree,
            live.buckets,
            self.on_node,
            self.excl_held,
            self.reserved,
            self.started_on,
        )

    def quota_view(self) -> QuotaView:
        """Borrowed work and what each queue / line may still lose to preemption."""
        return QuotaView(self.usage.borrowed_ids, self.budget_q, self.budget_l, self.victim_ids)

    def open_elig(self, key: ClassKey) -> bytearray:
        """Matching ready nodes not reserved for another job (a fresh copy)."""
        elig = bytearray(self.elig_ready(key))
        for n in self.reserved:
            elig[n] = 0
        return elig

    def elig_ready(self, key: ClassKey) -> bytearray:
        """Matching ready nodes, including ones held exclusively for now, but not those
        entering maintenance (nothing counts on them past its start)."""
        e = self._elig_ready.get(key)
        if e is None:
            static = self.topo.static_elig(key)
            ready = self.topo.ready
            e = bytearray(a & b for a, b in zip(static, ready, strict=True))
            for n in self.maint:
                e[n] = 0
            self._elig_ready[key] = e
        return e

    def released(self, job: RunningJob) -> list[tuple[int, int]]:
        """``(node, GPUs)`` a running job gives back when it ends: the whole node
        where a node is held exclusively."""
        total = self.topo.total
        excl = self.excl_held
        return [(n, total[n] if n in excl else g) for n, g in self.topo.slots_of(job)]

    def timeline(self) -> Timeline:
        tl = self._timeline
        if tl is None:
            tl = Timeline()
            for r in self.s.running:
                t = self._end_override.get(r.id)
                if t is None:
                    t = running_end(r, self.now, self.policy)
                for n, g in self.released(r):
                    tl.add(t, n, g, r.id)
            for t, n, g in self._start_events:
                tl.add(t, n, g)
            self._timeline = tl
        return tl

    def record(
        self,
        job: PendingJob,
        reason: explain.Reason,
        est: float | None = None,
        no_estimate: str = "",
    ) -> None:
        """Keep a job's verdict. ``est``: its one estimated start; without one, its details
        say why (the reason's own words, else ``no_estimate``)."""
        code, msg, details, remedy = reason
        if code != Code.DEMOTED and is_demoted(job.preemption_count, self.policy):
            msg += f" It is also demoted (preempted {job.preemption_count} times)."
            details = dict(details, demoted=1, preemption_count=job.preemption_count)
        if code != Code.QUOTA_EXCEEDED:
            msg += self.swap.note(job)
        patient = self.patient.get(job.id)
        if patient is not None and code != Code.PREEMPTING:
            msg += (
                f" If nothing frees up for it by {explain.when(patient)}, it may then preempt "
                "lower-priority or borrowed work."
            )
            details = dict(details, may_preempt_at=explain.iso(patient))
        if est is None and explain.NO_ESTIMATE not in details:
            details = dict(details, **{explain.NO_ESTIMATE: no_estimate or "none is predicted"})
        elif est is not None and explain.NO_ESTIMATE in details:
            details = {k: v for k, v in details.items() if k != explain.NO_ESTIMATE}
        earlier = self.records.get(job.id)
        if code == Code.QUOTA_EXCEEDED and (earlier is None or earlier[0][0] != code):
            self.quota.counted(job, details)
        self.records[job.id] = ((code, msg, details, remedy), est)

    def describe(self, job: PendingJob, sh: ShapeT) -> str:
        text = self._describe.get(sh)
        if text is None:
            fit = feasibility.fit(self.cluster_shape(), self.ask(job, sh))
            text = explain.describe_shape(
                job, sh[1], sh[2], sh[4], self.topo.max_gpus, fit.max_rack
            )
            self._describe[sh] = text
        return text

    # -- static gates --------------------------------------------------------------
    def never_fits(self, job: PendingJob, sh: ShapeT) -> explain.Reason | None:
        """NEVER_FITS when not even the empty, healthy cluster could run it (cached per shape)."""
        if sh in self._never:
            return self._never[sh]
        refusal = feasibility.check(self.cluster_shape(), self.ask(job, sh))
        res = None
        if refusal is not None:
            res = explain.never_fits(job, refusal.why, refusal.details_dict())
        self._never[sh] = res
        return res

    def _ready_elig(self, key: ClassKey, cut: int) -> bytearray:
        """Matching ready nodes but those entering maintenance at one of the first ``cut``
        start times (``_maint_starts``)."""
        topo = self.topo
        e = bytearray(a & b for a, b in zip(topo.static_elig(key), topo.ready, strict=True))
        if cut:
            last = self._maint_starts[cut - 1]
            for n, t in self.maint.items():
                if t <= last:
                    e[n] = 0
        return e

    def _static_feasible(
        self, key: ClassKey, ready_only: bool, k: int, c: int, cut: int = 0
    ) -> bool:
        """Could the shape fit on an empty cluster of ready nodes only (NODES_UNAVAILABLE),
        without the nodes entering maintenance at the first ``cut`` start times?

        With every node empty a node qualifies iff it matches and has >= c GPUs
        (exclusivity is then free), and a placement exists iff some block holds
        k qualifying nodes (see ``placement.choose_racks``).
        """
        ck = (key, ready_only, cut)
        hist = self._block_hist.get(ck)
        topo = self.topo
        if hist is None:
            elig = self._ready_elig(key, cut) if ready_only else topo.static_elig(key)
            m = topo.max_gpus
            hist = [[0] * (m + 1) for _ in topo.block_racks]
            block_of = topo.block_of
            total = topo.total
            for n in compress(range(topo.n), elig):
                hist[block_of[n]][total[n]] += 1
            self._block_hist[ck] = hist
        return any(sum(h[c:]) >= k for h in hist)

    def unavailable(self, job: PendingJob, sh: ShapeT) -> dict[str, Any] | None:
        """NODES_UNAVAILABLE's details when the shape fits an empty cluster only if
        cordoned, draining, down or unhealthy nodes are counted, or (else) only if nodes
        entering maintenance before the job's predicted end are (``maintenance_*``);
        None otherwise. Cached per shape and the maintenance starts before its end."""
        cut = 0
        if self.maint:
            cut = bisect_left(self._maint_starts, self.now + job_runtime(job, self.policy))
        ck = (sh, cut)
        if ck in self._unavail:
            return self._unavail[ck]
        key, k, c, _last, _excl = sh
        static = self.topo.static_elig(key)
        res = None
        if not self._static_feasible(key, True, k, c):
            elig = self._ready_elig(key, 0)
            res = {
                "nodes_needed": k,
                "gpus_per_node": c,
                "healthy_matching_nodes": sum(elig),
                "unavailable_nodes": sum(static) - sum(elig),
            }
        elif cut and not self._static_feasible(key, True, k, c, cut):
            elig = self._ready_elig(key, cut)
            last = self._maint_starts[cut - 1]
            names = self.topo.nodes
            leaving = sorted((t, n) for n, t in self.maint.items() if t <= last and static[n])
            res = {
                "nodes_needed": k,
                "gpus_per_node": c,
                "healthy_matching_nodes": sum(elig),
                "unavailable_nodes": sum(static) - sum(elig),
                "maintenance_nodes": len(leaving),
                "maintenance_starts_at": explain.iso(leaving[0][0]),
                "maintenance_node_names": ", ".join(names[n].name for _t, n in leaving[:5]),
                "maintenance_reason": names[leaving[0][1]].maintenance_reason,
            }
        self._unavail[ck] = res
        return res

    # -- quota ---------------------------------------------------------------------
    def can_borrow(self, job: PendingJob) -> bool:
        return may_borrow(
            job.preemptible, is_demoted(job.preemption_count, self.policy), self.policy
        )

    # -- head-of-line blocking (no backfill) -------------------------------------------
    def hol_blocked(self, job: PendingJob) -> bool:
        if not self.hol:
            return False
        return None in self.hol or job.pool is None or job.pool in self.hol

    def start(self, job: PendingJob, sh: ShapeT, nodes: list[int], borrowed: bool) -> None:
        _key, k, c, last, excl = sh
        live = self.live
        topo = self.topo
        slots = []
        end = self.now + job_runtime(job, self.policy)
        for i, n in enumerate(nodes):
            cnt = c if i < k - 1 else last
            gpus = live.take(n, cnt, excl)
            if live.ends is not None and end > live.ends[n]:
                live.ends[n] = end
            self.started_on[n] += 1
            if excl:
                self.excl_held.add(n)
                self.plan_excl.add(n)
            slots.append(Slot(topo.nodes[n].name, gpus))
            g = topo.total[n] if excl else cnt
            self._start_events.append((end, n, g))
            if self._timeline is not None:
                self._timeline.add(end, n, g)
        self.starts.append(Start(job.id, tuple(slots), borrowed))
        if not borrowed:
            self.nb_queue[job.queue] = self.nb_queue.get(job.queue, 0) + job.gpus
            self.nb_line[job.line] = self.nb_line.get(job.line, 0) + job.gpus
            self.quota.started(job, end)
            self.swap.started_within(job)

    def hold(self, job: PendingJob, nodes: Sequence[int], t: float | None) -> None:
        st = _INF if t is None else t
        for n in nodes:
            self.live.block(n)
            self.reserved[n] = st
        if st > self.max_res_start:
            self.max_res_start = st
        names = tuple(self.topo.nodes[n].name for n in nodes)
        self.reservations.append(Reservation(job.id, names, t))
        if job.submitted_at <= self.overdue_since:
            self.n_overdue_res += 1

    # -- blocked jobs --------------------------------------------------------------
    def counts_with(self, freed: dict[int, int], gone: set[int]) -> list[int]:
        """Free GPUs per node if ``freed`` GPUs were released (jobs ``gone``)."""
        counts = self.live.usable_counts()
        total = self.topo.total
        nfree = self.live.nfree
        for n, g in freed.items():
            if n in self.reserved:
                continue
            if n in self.excl_held:
                if n not in self.plan_excl and all(r.id in gone for r, _ in self.on_node[n]):
                    counts[n] = total[n]
                continue
            counts[n] = min(total[n], nfree[n] + g)
        return counts

    def hold_for_leaving(
        self,
        job: PendingJob,
        sh: ShapeT,
        leaving: tuple[RunningJob, ...],
        over_quota: str = "",
    ) -> bool:
        """Victims already checkpoint for this job: keep its nodes if they suffice (a job
        ``over_quota`` for which jobs move claims no quota: ``Consolidation.try_gang``)."""
        key, k, c, _last, excl = sh
        counts = self.counts_with(self.topo.gpus_by_node(leaving), {v.id for v in leaving})
        nodes = place_on_counts(self.topo, self.open_elig(key), counts, k, c, excl, job.model_name)
        if nodes is None:
            return False
        deadline = max(running_end(v, self.now, self.policy) for v in leaving)
        self.hold(job, nodes, deadline)
        if not over_quota:
            self.quota.claim_for(job, leaving)
        gpus = sum(v.gpus for v in leaving)
        reason = leaving_reason(job, leaving, self.topo, deadline, over_quota)
        if reason is None:
            reason = explain.preempting(job, len(leaving), gpus, deadline)
        self.record(job, reason, deadline)
        return True

    def moves_instead(
        self,
        job: PendingJob,
        sh: ShapeT,
        found: Selection,
        allowed: bool,
        leaving: tuple[RunningJob, ...],
    ) -> bool:
        """A reclaim (``found``: borrowed victims only, for a job that preempts no lower
        tier) whose victims' runs have been given at least ``reclaim_move_min_gpu_h``
        GPU-hours first asks consolidation (``consolidate_before_reclaim``): moved jobs
        restart at once from their checkpoints, where a reclaimed borrower waits again and
        all of that GPU time counts as evicted (R4). True if jobs now move for it."""
        policy = self.policy
        if allowed or leaving or not policy.consolidate_before_reclaim:
            return False
        given = sum(given_gpu_s(v, self.now) for v in found.victims)
        if given < policy.reclaim_move_min_gpu_h * 3600.0:
            return False
        return self.consolidation.try_gang(job, sh)

    def try_preempt(
        self,
        job: PendingJob,
        sh: ShapeT,
        short_q: int,
        short_l: int,
        leaving: tuple[RunningJob, ...],
    ) -> bool:
        """Look for victims that make room for ``job`` (within the plan's bounds on
        preemptors and searches); True if it now waits for them."""
        policy = self.policy
        if not policy.preemption:
            return False
        if self.n_preemptors >= policy.max_preemptors:
            return False
        if self.n_searches >= policy.max_preemption_searches:
            return False
        allowed = queue_preempts(self.queues.get(job.queue), job.tier)
        within = short_q == 0 and short_l == 0
        if not allowed and not (within and self.usage.borrowed_ids):
            return False
        if (short_q or short_l) and not allowed:
            return False
        # patience: a queue that preempts lower tiers (urgent) has its own, shorter one
        patience = policy.tier_preempt_after_s if allowed else policy.preempt_after_s
        patience_ends = waiting_since(job) + patience
        if (
            patience > 0
            and not leaving
            and self.now < patience_ends
            and (not policy.predictive_patience or self.frees_by(job, sh, patience_ends))
        ):
            # patience: capacity that frees meanwhile needs no eviction
            self.patient[job.id] = patience_ends
            return False
        within_s = policy.wait_if_free_within_s
        if (
            within_s > 0
            and not leaving
            and not (short_q or short_l)
            and self.frees_by(job, sh, self.now + within_s)
        ):
            return False  # it reserves the capacity predicted to free instead
        ck: tuple[Any, ...] = (
            sh,
            job.tier,
            allowed,
            within,
            None if within else (job.queue, job.line, short_q, short_l),
        )
        if not leaving and ck in self._preempt_failed:
            return False
        self.n_searches += 1
        key, k, c, _last, excl = sh
        request = VictimRequest(
            job, k, c, excl, self.elig_ready(key), allowed, within, short_q, short_l, leaving
        )
        found = select_victims(
            request, self.capacity_view(), self.quota_view(), self.victim_index()
        )
        if found is None:
            if not leaving:
                self._preempt_failed.add(ck)
            return False
        if self.moves_instead(job, sh, found, allowed, leaving):
            return True
        self.preempt(job, found, leaving)
        return True

    def frees_by(self, job: PendingJob, sh: ShapeT, until: float) -> bool:
        """Running work is predicted to free room for ``job`` by ``until``: waiting for it
        costs no eviction (one search spent)."""
        if self.n_searches >= self.policy.max_preemption_searches:
            return False
        self.n_searches += 1
        return self.earliest_start(job, sh, until) is not None

    def preempt(self, job: PendingJob, found: Selection, leaving: tuple[RunningJob, ...]) -> None:
        """Stop the victims for ``job``: charge their queues' and lines' budgets,
        move their releases to the deadline, and hold the nodes for ``job``."""
        policy = self.policy
        cold = policy.preemption_mode == COLD
        deadline = self.now if cold else self.now + policy.grace_seconds
        for v in found.victims:
            self.preemptions.append(
                Preemption(v.id, job.id, COLD if cold else "graceful", deadline)
            )
            self.mark_leaving(v, deadline)
        until = deadline
        if leaving:
            until = max(until, max(running_end(v, self.now, self.policy) for v in leaving))
        self.hold(job, found.nodes, until)
        self.quota.claim_for(job, (*found.victims, *leaving))
        n_v = len(found.victims) + len(leaving)
        gpus = sum(v.gpus for v in found.victims) + sum(v.gpus for v in leaving)
        self.record(job, explain.preempting(job, n_v, gpus, until), until)
        self.n_preemptors += 1

    def mark_leaving(self, v: RunningJob, deadline: float) -> None:
        """``v`` stops by ``deadline`` (preempted, or moved by consolidation): no longer a
        victim for anyone else, its GPUs spent from its queue's and line's preemption
        budgets, and released at ``deadline`` on the backfill timeline."""
        self.victim_ids.add(v.id)
        self.budget_q[v.queue] = self.budget_q.get(v.queue, 0) - v.gpus
        self.budget_l[v.line] = self.budget_l.get(v.line, 0) - v.gpus
        self._end_override[v.id] = deadline
        if self._timeline is not None:
            self._timeline.move(v.id, deadline, self.released(v))

    def earliest_start(
        self,
        job: PendingJob,
        sh: ShapeT,
        horizon: float | None = None,
        reserved_too: bool = False,
    ) -> tuple[float, list[int]] | None:
        """When and where the backfill timeline first has room for ``job`` (reservations
        and the inference forecast counted; None: never, or not by ``horizon``); with
        ``reserved_too``, on reserved nodes too, as if their reservations were lifted."""
        key, k, c, _last, excl = sh
        if reserved_too:
            elig, view = self.elig_ready(key), self.blocked.final
        else:
            elig, view = self.open_elig(key), self.live
        return self.timeline().earliest_start(
            self.topo, elig, self.where.reservable_counts(job, key, view), k, c, excl,
            job.model_name, self.now, horizon,
        )  # fmt: skip

    def foreseen_timeline(self) -> Timeline | None:
        """The backfill timeline with each overrunning run releasing when it is foreseen
        to end (``policy.foreseen_end``); None when no run overruns. Built per call: the
        plan's starts and stops change the timeline between reservations."""
        now, policy, moved = self.now, self.policy, self._end_override
        if self._overrunning is None:
            self._overrunning = [r for r in self.s.running if overruns(r, now, policy)]
        later = {
            r.id: (foreseen_end(r, now, policy), self.released(r))
            for r in self._overrunning
            if r.id not in moved
        }
        return self.timeline().with_later(later) if later else None

    def reserved_nodes(
        self, job: PendingJob, sh: ShapeT, t: float, nodes: list[int]
    ) -> tuple[float, list[int]]:
        """Where ``job`` reserves, given its earliest placement ``(t, nodes)``. With
        ``overrun_foresight``, the earliest placement once overrunning runs are foreseen to
        run longer (``foreseen_timeline``), held from when those nodes free on the
        backfill timeline: a run that has outlived its prediction is expected "within
        ``overrun_s``" at every cycle, and a reservation on its node slid later cycle after
        cycle while other nodes freed (docs/engine.md, "Backfill and reservations")."""
        tl = self.foreseen_timeline() if self.policy.overrun_foresight > 0 else None
        if tl is None:
            return t, nodes
        key, k, c, _last, excl = sh
        counts = self.where.reservable_counts(job, key, self.live)
        found = tl.earliest_start(
            self.topo, self.open_elig(key), counts, k, c, excl, job.model_name, self.now
        )
        if found is None or sorted(found[1]) == sorted(nodes):
            return t, nodes
        only = bytearray(self.topo.n)
        for n in found[1]:
            only[n] = 1
        there = self.timeline().earliest_start(
            self.topo, only, counts, k, c, excl, job.model_name, self.now
        )
        return (t, nodes) if there is None else there

    def reserve(self, job: PendingJob, sh: ShapeT, not_before: float = -_INF) -> float | None:
        """Hold the nodes of ``job``'s earliest placement from when they free, or from
        ``not_before`` if later (an overdue job's quota room, below); its start."""
        res = self.earliest_start(job, sh)
        if res is None:
            return None
        t, nodes = self.reserved_nodes(job, sh, *res)
        t = max(t, not_before)
        self.hold(job, nodes, t)
        self.n_backfill_res += 1
        return t

    def reserve_for_quota_room(self, job: PendingJob, sh: ShapeT, room_at: float) -> float | None:
        """An overdue job that holds its scope's quota room (``QuotaRoom.hold``) also reserves
        nodes, from when the room is due or the nodes free, whichever is later; its start
        (None: no reservation). Without it the room came while other lines' work had split
        the nodes, and the job waited one runtime more for a whole node (Hypothesis found
        this, session 31's known limit)."""
        if (
            not self.policy.backfill
            or self.n_backfill_res >= self.policy.max_reservations
            or self.unavailable(job, sh) is not None
        ):
            return None
        return self.reserve(job, sh, room_at)

    def maybe_demoted(self, job: PendingJob, reason: explain.Reason) -> explain.Reason:
        if is_demoted(job.preemption_count, self.policy):
            return explain.demoted(job, reason, self.policy.demote_after)
        return reason

    # -- the pass ------------------------------------------------------------------
    def consider(self, job: PendingJob, deferred: list[PendingJob]) -> None:
        if job.gpus < 1:
            self.record(
                job,
                explain.never_fits(job, "it asks for no GPUs", {"requested_gpus": job.gpus}),
            )
            return
        sh = self.shape(job)
        nf = self.never_fits(job, sh)
        if nf is not None:
            self.record(job, nf)
            return
        got = self.leaving_for.get(job.id)
        leaving: tuple[RunningJob, ...] = tuple(got) if got else ()
        short_q, short_l = self.quota.short(job, ())
        waits_for_quota = False
        if (short_q or short_l) and leaving:
            # Its victims still hold GPUs (and quota); once gone, does it fit?
            lq, ll = self.quota.short(job, leaving)
            if not lq and not ll:
                waits_for_quota = True
            else:
                short_q, short_l = lq, ll
        swapping = False  # short of quota, but its scope's work covers it (quota_swap.py)
        if (short_q or short_l) and not waits_for_quota:
            if self.can_borrow(job):
                deferred.append(job)
                return
            swapping = self.swap.instead_of_eviction(
                job, short_q, short_l
            ) or self.swap.overdue_first(job, short_q, short_l)
        if (short_q or short_l) and not waits_for_quota and not swapping:
            if (
                self.unavailable(job, sh) is None
                and not self.hol_blocked(job)
                and self.try_preempt(job, sh, short_q, short_l, leaving)
            ):
                self.ahead_jobs += 1
                self.ahead_gpus += job.gpus
                return
            room_at = self.quota.room(job, short_q)
            holds = self.quota.hold(job, short_q, room_at)
            if self.swap.defer(job, short_q, short_l):
                deferred.append(job)  # quota_swap.py: in the borrowing pass
                return
            reserved_at = None
            if holds and room_at is not None:
                reserved_at = self.reserve_for_quota_room(job, sh, room_at)
            self.record(job, *self.quota.reason(job, short_q, "", reserved_at, holds))
            return
        un = self.unavailable(job, sh)
        if un is not None:
            self.record(job, explain.nodes_unavailable(job, self.describe(job, sh), un))
            self.blocked.recheck_quota.append(job)
            return
        held = self.quota.held(job)  # PRIORITY: after NODES_UNAVAILABLE (API.md's order)
        if held is not None:
            self.record(job, held)
            self.blocked.recheck_quota.append(job)
            return
        if self.hol_blocked(job):
            reason = explain.priority(
                job,
                self.describe(job, sh),
                self.ahead_jobs,
                self.ahead_gpus,
                len(self.reservations),
                True,
            )
            self.record(job, self.maybe_demoted(job, reason), None, explain.STRICT_ORDER)
            self.blocked.recheck_quota.append(job)
            self.ahead_jobs += 1
            self.ahead_gpus += job.gpus
            return
        if not waits_for_quota:
            end = self.now + job_runtime(job, self.policy)
            nodes = self.where.place(job, sh, end)
            if nodes is not None and not swapping:
                self.start(job, sh, nodes, borrowed=False)
                return
            if nodes is not None and self.swap.start_instead(job, sh, nodes):
                return
        if (leaving and self.hold_for_leaving(job, sh, leaving)) or (
            job.id not in self.swap.overdue and self.try_preempt(job, sh, 0, 0, leaving)
        ):
            if swapping:
                self.swap.hold_instead(job)
        elif waits_for_quota:
            q_short, _ = self.quota.short(job, ())
            self.record(job, *self.quota.reason(job, q_short, ""))
        elif (
            self.swap.consolidate_overdue(job, sh)
            if job.id in self.swap.overdue
            else self.consolidation.try_gang(job, sh)
        ):
            pass
        else:
            est = None
            no_estimate = explain.NO_RESERVATION.format(n=self.policy.max_reservations)
            ahead = len(self.reservations)
            if self.n_backfill_res < self.policy.max_reservations:
                est = self.reserve(job, sh)
                no_estimate = explain.NO_PLACEMENT_AHEAD
                if est is not None and job.id in self.swap.overdue:
                    self.quota.hold(job, short_q, est)  # its swap's cover, until it starts
            if job.id not in self.swap.overdue:
                self.quota.claim_overdue(job, est)
            self.blocked.jobs.append(
                BlockedJob(
                    job,
                    sh,
                    est,
                    no_estimate,
                    self.ahead_jobs,
                    self.ahead_gpus,
                    ahead,
                    self.n_overdue_res,
                )
            )
        self.ahead_jobs += 1
        self.ahead_gpus += job.gpus
        if not self.policy.backfill:
            self.hol.add(job.pool)

    def consider_borrower(self, job: PendingJob) -> None:
        if job.id in self.swap.waiting:
            self.swap.consider(job)
            return
        sh = self.shape(job)
        short_q, _short_l = self.quota.short(job, ())
        leaving = tuple(self.leaving_for.get(job.id, ()))
        if self.unavailable(job, sh) is not None:
            note = "It could borrow idle capacity, but the nodes it needs are unavailable."
        elif self.hol_blocked(job):
            note = "It may borrow idle capacity once the jobs ahead of it start."
        else:
            end = self.now + job_runtime(job, self.policy)
            if leaving and self.hold_for_leaving(job, sh, leaving, BORROWED):
                self.borrowing.started(job, end)  # jobs still move off the nodes it borrows
                return
            nodes = self.where.place(job, sh, end)
            if nodes is not None:
                refused = self.borrowing.refusal(job)  # borrowing.py (#19)
                if refused is not None:
                    if refused[0] in COOLDOWNS:
                        self.quota.borrowers.append(job)  # its turn once it has cooled down
                    reason, est = self.quota.reason(job, short_q, refused[1])
                    self.record(job, refused_reason(reason, refused[0]), est)
                    return
                self.start(job, sh, nodes, borrowed=True)
                self.borrowing.started(job, end)
                return
            if (
                self.consolidation.on
                and self.consolidation.is_gang(sh)
                and self.borrowing.refusal(job) is None
                and self.consolidation.try_gang(job, sh, BORROWED)
            ):
                self.borrowing.started(job, end)  # it holds the nodes jobs move off
                return
            note = "It may borrow idle capacity, but none fits it now."
            self.quota.borrowers.append(job)  # its turn to borrow (line_estimate.py)
        self.record(job, *self.quota.reason(job, short_q, note))

    def run(self) -> Plan:
        order = aging.order(
            self.s.pending,
            self.now,
            self.policy,
            self.queues,
            {} if self.policy.strict_fifo else self._line_shares(),
            self._held_by_owner() if self.policy.user_turns else None,
        )
        first, rest = restarts(self, order)  # moved jobs restart first (kept_rooms.py)
        deferred: list[PendingJob] = []
        for job in first:
            self.consider(job, deferred)
            for borrower in deferred:
                self.consider_borrower(borrower)
            deferred.clear()
        for job in rest:
            self.consider(job, deferred)
        for job in deferred:
            self.consider_borrower(job)
        self.blocked.explain()
        estimate_the_line(self)  # an estimate beyond the reservations (line_estimate.py)
        self.quota.finish()  # the quota waits' turns, every start placed (quota_turns.py)
        note_overruns(self)  # an estimate that waits on an overrun says so (overrun_note.py)
        defragment(self.consolidation)
        return self.assemble(first + rest)

    def _held_by_owner(self) -> dict[tuple[str, str], int]:
        """GPUs held by running jobs per ``(line, owner)`` (``user_turns``)."""
        out: dict[tuple[str, str], int] = {}
        for r in self.s.running:
            if r.state == RUNNING:
                out[(r.line, r.owner)] = out.get((r.line, r.owner), 0) + r.gpus
        return out

    def _line_shares(self) -> dict[str, float]:
        cluster = sum(self.topo.total) or 1
        out: dict[str, float] = {}
        names = set(self.lines) | set(self.usage.held_line)
        for name in names:
            held = self.usage.held_line.get(name, 0)
            line = self.lines.get(name)
            quota = line.quota_gpus if line is not None else None
            if quota is None:
                out[name] = held / cluster
            elif quota <= 0:
                out[name] = _INF if held else 0.0
            else:
                out[name] = held / quota
        return out

    def assemble(self, order: list[PendingJob]) -> Plan:
        verdicts: dict[int, Verdict] = {}
        records = self.records
        pos = 0
        for job in order:
            rec = records.get(job.id)
            if rec is None:
                continue
            pos += 1
            reason, est = rec
            # an overdue job says so, unless it can never run (its order does not matter)
            if job.submitted_at <= self.overdue_since and reason[0] != Code.NEVER_FITS:
                bound = self.policy.starvation_bound_s or 0.0
                reason = explain.overdue(reason, job.submitted_at + bound, bound)
            code, message, details, remedy = reason
            verdicts[job.id] = Verdict(code, message, details, remedy, est, pos)
        plan = Plan(
            starts=tuple(self.starts),
            preemptions=tuple(self.preemptions),
            reservations=tuple(self.reservations),
            verdicts=verdicts,
            now=self.now,
            migrations=tuple(self.consolidation.migrations),
            swaps=tuple(self.swap.swaps),
        )
        return replace(
            plan, marks=marks(self.s.running, self.usage.borrowed_ids, plan.decided_ids())
        )


def plan(snapshot: Snapshot, now: float) -> Plan:
    """Decide starts, preemptions, reservations and a verdict for every waiting job.

    Pure and deterministic: the same snapshot and ``now`` give the same plan.
    """
    with gc_paused():
        return Planner(snapshot, now).run()
