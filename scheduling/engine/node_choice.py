"""Where a job starts now: the plan's node choice (P1-P4, #19).

``placement.py`` keeps the free-capacity index and the placement rules (best fit, whole
nodes, racks, blocks). This part of the plan chooses among them for one job:

1. a moved job restarts in the room kept for it (``kept_rooms.py``);
2. a job allowed beside online inference goes to nodes without inference first (on the
   live demo about a quarter of the experiment queues' evictions were inference taking
   its GPUs back); single-node work goes first to shared nodes whose forecast has seen a
   whole day (``shared_nodes_first``);
3. on shared nodes it counts only the GPUs inference is not predicted to want back before
   the job's predicted end (``inference_forecast``);
4. with backfill, reserved nodes whose reservation starts after the job's predicted end;
   with or without it, nodes entering maintenance (``NodeView.unavailable_from``) after it.

A shape that failed stays failed for the rest of the plan (capacity only shrinks within
one plan); for backfill, for every job predicted to end no earlier.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .inference_forecast import rise_until
from .kept_rooms import kept_node
from .placement import ClassKey, Cluster, place_on_counts, without_inference
from .policy import job_runtime
from .types import PendingJob

if TYPE_CHECKING:
    from .planner import Planner, ShapeT


class NodeChoice:
    """One plan's choice of nodes for a job starting now, and the inference forecast it
    reads (``rise``: per shared node, what inference was seen to want more over the day)."""

    def __init__(self, planner: Planner) -> None:
        self.p = planner
        nodes = planner.s.nodes
        self.has_inference = any(nd.inference for nd in nodes)
        self.shared = [i for i, nd in enumerate(nodes) if nd.inference]
        self.rise = {i: nodes[i].inference_rise for i in self.shared if nodes[i].inference_rise}
        # the shared nodes whose forecast has seen a whole day, filled first (#19)
        self.shared_first = (
            [i for i in self.shared if nodes[i].inference_day_learned]
            if planner.policy.shared_nodes_first
            else []
        )
        self._live_failed: set[ShapeT] = set()
        self._fail_end: dict[ShapeT, float] = {}

    def place(self, job: PendingJob, sh: ShapeT, end: float) -> list[int] | None:
        """Nodes for ``job`` (predicted to end at ``end``) to start on now, or None: the
        room kept for it if it moved, else free capacity (nodes without inference first,
        shared nodes by forecast), else reserved nodes it would leave before their
        reservation starts (backfill). Failures are cached per shape (and end)."""
        p = self.p
        fail = self._fail_end.get(sh)
        if fail is not None and end >= fail:
            return None
        key, k, c, _last, excl = sh
        live = p.live
        cls = live.node_class(key)
        kept = kept_node(p, job)  # a moved job restarts in the room kept for it
        if kept is not None:
            return [kept]
        if sh not in self._live_failed:
            forecast = key[2] and bool(self.rise)
            nodes = None
            if key[2] and k == 1 and self.shared_first:  # short work to shared nodes first
                nodes = self.find_shared(job, sh, cls.elig, end, shared=self.shared_first)
            if nodes is None and key[2] and self.has_inference:
                nodes = self._find_dedicated(job, sh, end)
            if nodes is None:
                if forecast:
                    nodes = self.find_shared(job, sh, cls.elig, end)
                else:
                    nodes = live.find(cls, k, c, excl, job.model_name, end)
            if nodes is not None:
                return nodes
            if not forecast:  # with a forecast the answer depends on ``end``
                self._live_failed.add(sh)
        if p.reserved and p.max_res_start >= end and (p.policy.backfill or p.maint):
            nodes = self._place_backfill(job, sh, cls.elig, end)
            if nodes is not None:
                return nodes
        self._fail_end[sh] = end if fail is None else min(fail, end)
        return None

    def _find_dedicated(self, job: PendingJob, sh: ShapeT, end: float) -> list[int] | None:
        """A job allowed beside online inference goes to nodes without inference first:
        there inference traffic cannot stop it (#19: on the live demo about a quarter of the
        experiment queues' evictions were inference taking its GPUs back); the shared
        nodes' free GPUs are its fallback, except those a whole learnt day of forecast
        lets a single-node job take first (``shared_nodes_first``)."""
        p = self.p
        key, k, c, _last, excl = sh
        dkey = without_inference(key)
        dsh = (dkey, k, c, _last, excl)
        if dsh in self._live_failed:
            return None
        nodes = p.live.find(p.live.node_class(dkey), k, c, excl, job.model_name, end)
        if nodes is None:
            self._live_failed.add(dsh)
        return nodes

    def _best_fit(
        self, room: Iterable[tuple[int, int]], c: int, excl: bool, model: str | None
    ) -> list[int] | None:
        """One node among (node, free GPUs) pairs: the fewest free GPUs that fit ``c`` (all
        of them when ``excl``), then one that ran the job's model lately, then the lowest."""
        p = self.p
        total, models = p.topo.total, p.topo.node_models
        best = None
        for n, f in room:
            if f < c or (excl and f != total[n]):
                continue
            kk = (f, 0 if model and model in models[n] else 1, n)
            if best is None or kk < best:
                best = kk
        return None if best is None else [best[2]]

    def find_shared(
        self,
        job: PendingJob,
        sh: ShapeT,
        elig: bytearray,
        end: float,
        view: Cluster | None = None,
        shared: list[int] | None = None,
    ) -> list[int] | None:
        """The shared nodes' free GPUs that online inference is not predicted to want back
        before the job's predicted ``end`` (``inference_forecast``; #19: such stops were
        most of the live demo's evictions once the cluster was full): where no node
        without inference has room, or first among ``shared`` (``shared_nodes_first``)."""
        _key, k, c, _last, _excl = sh
        live = self.p.live if view is None else view
        nfree, usable = live.nfree, live.usable
        room: dict[int, int] = {}
        for n in self.shared if shared is None else shared:
            if not (elig[n] and usable[n]) or (k == 1 and nfree[n] < c):
                continue
            room[n] = nfree[n] - self.rise_on(n, end)
        return self._place_in(room, live, sh, elig, job.model_name)

    def _place_backfill(
        self, job: PendingJob, sh: ShapeT, elig: bytearray, end: float
    ) -> list[int] | None:
        """Use reserved nodes whose reservation starts after the job's predicted end (on a
        shared node, less what inference is predicted to want back before then): with
        backfill any, without it only those entering maintenance then."""
        p = self.p
        key = sh[0]
        live = p.live
        nfree = live.nfree
        every = p.policy.backfill
        open_nodes = [
            n
            for n, st in p.reserved.items()
            if st >= end and elig[n] and n not in p.excl_held and (every or n in p.maint)
        ]
        if not open_nodes:
            return None
        forecast = key[2] and bool(self.rise)
        room = {n: nfree[n] - (self.rise_on(n, end) if forecast else 0) for n in open_nodes}
        return self._place_in(room, live, sh, elig, job.model_name)

    def _place_in(
        self, room: dict[int, int], live: Cluster, sh: ShapeT, elig: bytearray, model: str | None
    ) -> list[int] | None:
        """A placement using ``room`` (node -> the GPUs a job may take there) and, for a
        gang, the rest of ``live``'s free GPUs: the best single node, or the gang's nodes."""
        _key, k, c, _last, excl = sh
        if k == 1:
            return self._best_fit(room.items(), c, excl, model)
        counts = live.usable_counts()
        for n, f in room.items():
            counts[n] = max(0, f)
        return place_on_counts(self.p.topo, elig, counts, k, c, excl, model)

    def reservable_counts(
        self, job: PendingJob, key: ClassKey, view: Cluster | None = None
    ) -> list[int]:
        """Free GPUs per node a reservation may count on from now (in ``view``, the plan's
        free capacity by default): on a shared node less what online inference is
        predicted to want back before the job would end if it started now (the rule
        ``find_shared`` applies to a start now; for a later start an approximation), so no
        job is estimated to start on GPUs it was kept off."""
        p = self.p
        counts = (p.live if view is None else view).usable_counts()
        if key[2] and self.rise:
            end = p.now + job_runtime(job, p.policy)
            for n in self.rise:
                counts[n] = max(0, counts[n] - self.rise_on(n, end))
        return counts

    def rise_on(self, n: int, end: float) -> int:
        """GPUs online inference is predicted to want on shared node ``n`` beyond what it
        holds now, before ``end`` (0: nothing learned)."""
        p = self.p
        r = self.rise.get(n)
        return rise_until(r, p.now, end) if r else 0
