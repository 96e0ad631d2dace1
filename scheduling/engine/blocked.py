"""Jobs blocked for capacity, explained once the plan is complete.

A job that cannot start now is told why against what the whole plan leaves, not against
the capacity left when the pass reached it: that is also what the next cycle sees when
nothing changes, so a job's code stays put while its situation does.

- ``QUOTA_EXCEEDED`` first (API.md's order) if jobs started after it used the quota room
  it had when it was considered (``over_quota_now``);
- else, against the GPUs left free once every start is placed, with reservations lifted
  (``final``): ``PRIORITY`` if those would fit it (the nodes are reserved for work ahead),
  ``TOPOLOGY`` if enough matching GPUs are free but in no valid placement, else
  ``INSUFFICIENT_GPUS`` (``diagnose``). On nodes shared with online inference, GPUs that
  inference is predicted to want back before the job would end do not count.
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import explain
from .placement import ClassKey, Cluster, without_inference
from .policy import job_runtime
from .types import Code, PendingJob

if TYPE_CHECKING:
    from .planner import Planner, ShapeT


@dataclass(frozen=True, slots=True)
class BlockedJob:
    """A job blocked for capacity, as the pass left it: its estimated start (or why none)
    and what was ahead of it then (jobs, their GPUs, reservations, of which for overdue
    jobs)."""

    job: PendingJob
    shape: ShapeT
    est: float | None
    no_estimate: str
    ahead_jobs: int
    ahead_gpus: int
    reservations: int
    overdue_reservations: int


class BlockedJobs:
    """The plan's blocked jobs and the jobs whose quota is checked again at the end."""

    def __init__(self, planner: Planner) -> None:
        self.p = planner
        self.jobs: list[BlockedJob] = []
        # Jobs whose code comes after QUOTA_EXCEEDED, decided before the plan was complete:
        # their quota is checked again once every start is counted.
        self.recheck_quota: list[PendingJob] = []
        self._final: Cluster | None = None
        self._diag: dict[ShapeT, tuple[str, dict[str, Any]]] = {}
        self._where_cache: dict[tuple[ClassKey, int, bool], dict[str, Any]] = {}

    def explain(self) -> None:
        """Verdicts of the jobs blocked for capacity, now that every start is placed: as the
        next cycle will see them if nothing else changes. Quota first, then what is left."""
        p = self.p
        for job in self.recheck_quota:
            self.over_quota_now(job)
        for b in self.jobs:
            job, sh = b.job, b.shape
            if self.over_quota_now(job):
                continue
            code, diag = self.diagnose(job, sh)
            shape = p.describe(job, sh)
            if code == Code.PRIORITY:
                reason = explain.priority(
                    job,
                    shape,
                    b.ahead_jobs,
                    b.ahead_gpus,
                    b.reservations,
                    False,
                    b.overdue_reservations,
                )
            elif code == Code.TOPOLOGY:
                reason = explain.topology(job, shape, dict(diag))
            else:
                reason = explain.insufficient(job, shape, dict(diag))
            p.record(job, p.maybe_demoted(job, reason), b.est, b.no_estimate)

    def over_quota_now(self, job: PendingJob) -> bool:
        """Jobs started after it may have used the quota room it had when it was considered:
        if so, QUOTA_EXCEEDED (first in API.md's order), as the next cycle will read."""
        p = self.p
        leaving = tuple(p.leaving_for.get(job.id, ()))
        short_q, short_l = p.quota.short(job, leaving)
        if (short_q or short_l) and not p.swap.covers(job, leaving):
            p.record(job, *p.quota.reason(job, short_q, ""))
            return True
        return False

    @property
    def final(self) -> Cluster:
        """Free capacity once this plan's starts are placed, with reservations and holds
        lifted (not the nodes entering maintenance): the GPUs left free this cycle
        (read-only)."""
        view = self._final
        if view is None:
            p = self.p
            view = p.live.copy()
            ready = p.topo.ready
            nodes = p.topo.nodes
            for n in p.reserved:
                if (
                    not view.usable[n]
                    and n not in p.maint
                    and ready[n]
                    and not nodes[n].exclusive
                    and n not in p.plan_excl
                ):
                    view.usable[n] = 1
                    insort(view.buckets[view.nfree[n]], n)
            self._final = view
        return view

    def diagnose(self, job: PendingJob, sh: ShapeT) -> tuple[str, dict[str, Any]]:
        """Why a blocked job cannot be placed, from what is left free this cycle (``final``):
        it would fit there but for reservations -> PRIORITY; enough matching GPUs but no
        valid placement -> TOPOLOGY; else INSUFFICIENT_GPUS."""
        got = self._diag.get(sh)
        if got is not None:
            return got
        key, k, c, _last, excl = sh
        init = self.final
        cls = init.node_class(key)
        if init.find(cls, k, c, excl, None) is not None:
            if key[2] and self.p.where.rise:  # per job: the forecast depends on its end
                return self._diagnose_shared(job, sh, cls.elig)
            got = (Code.PRIORITY, {})
        else:
            base = self._where(key, c, excl)
            diag = dict(base, nodes_needed=k, gpus_per_node=c)
            code = Code.TOPOLOGY if base["free_gpus"] >= job.gpus else Code.INSUFFICIENT_GPUS
            got = (code, diag)
        self._diag[sh] = got
        return got

    def _diagnose_shared(
        self, job: PendingJob, sh: ShapeT, elig: bytearray
    ) -> tuple[str, dict[str, Any]]:
        """A job that would fit in what is left free only on shared nodes' GPUs that online
        inference is predicted to want back before the job ends: INSUFFICIENT_GPUS with
        ``inference_reclaims_gpus``; else, as any job that fits but for reservations,
        PRIORITY."""
        p = self.p
        key, k, c, _last, excl = sh
        init = self.final
        dkey = without_inference(key)
        end = p.now + job_runtime(job, p.policy)
        if init.find(init.node_class(dkey), k, c, excl, None) is not None:
            return Code.PRIORITY, {}
        if p.where.find_shared(job, sh, elig, end, init) is not None:
            return Code.PRIORITY, {}
        base = self._where(key, c, excl)
        reclaims = sum(
            min(init.nfree[n], p.where.rise_on(n, end))
            for n in p.where.rise
            if elig[n] and init.usable[n]
        )
        free = max(0, base["free_gpus"] - reclaims)
        if free >= job.gpus:  # enough beside inference's, but scattered
            return Code.TOPOLOGY, dict(base, nodes_needed=k, gpus_per_node=c)
        diag = dict(base, nodes_needed=k, gpus_per_node=c, free_gpus=free)
        return Code.INSUFFICIENT_GPUS, dict(
            diag, inference_reclaims_gpus=reclaims, predicted_end_at=end
        )

    def _where(self, key: ClassKey, c: int, excl: bool) -> dict[str, Any]:
        """Where the matching GPUs left free this cycle are (one scan per class)."""
        ck = (key, c, excl)
        got = self._where_cache.get(ck)
        if got is not None:
            return got
        topo = self.p.topo
        init = self.final
        cls = init.node_class(key)
        best_node = 0
        per_rack: dict[int, int] = {}
        rack_qual: dict[int, int] = {}
        usable = init.usable
        nfree = init.nfree
        total = topo.total
        for r, nodes in cls.rack_nodes.items():
            for n in nodes:
                if not usable[n]:
                    continue
                f = nfree[n]
                if f > best_node:
                    best_node = f
                if f:
                    per_rack[r] = per_rack.get(r, 0) + f
                if f >= c and (not excl or f == total[n]):
                    rack_qual[r] = rack_qual.get(r, 0) + 1
        got = {"free_gpus": init.free_gpus_of(cls), "best_node_free": best_node}
        if rack_qual:
            br = min(rack_qual, key=lambda r: (-rack_qual[r], r))
            got["best_rack"] = topo.rack_label[br]
            got["best_rack_nodes"] = rack_qual[br]
        else:
            got["best_rack"] = ""
            got["best_rack_nodes"] = 0
        per_block: dict[int, int] = {}
        for r, q in rack_qual.items():
            b = topo.rack_block[r]
            per_block[b] = per_block.get(b, 0) + q
        got["best_block_nodes"] = max(per_block.values(), default=0)
        top = sorted(per_rack, key=lambda r: (-per_rack[r], r))[:3]
        got["where"] = ", ".join(f"{topo.rack_label[r]}: {per_rack[r]:,}" for r in top)
        self._where_cache[ck] = got
        return got
