"""Pure arithmetic of quota contracts (Q4-Q7, R4): no Django, no clock, no database.

Words used throughout:

- **quota**: the most GPUs a line (or queue) may hold on its own entitlement (a cap);
  ``None`` on a queue means "bounded only by its line".
- **guarantee**: GPUs of active use that are never preempted (a floor).
- **used**: GPUs held by running (or checkpointing) jobs.
- **borrowed**: the part of ``used`` beyond the scope's own quota,
  ``max(0, used - quota)``, 0 for a queue without a quota of its own
  (``scheduling.engine.accounting.borrowed_gpus``, the one definition every surface shows).
- **within quota** (``entitled``): ``used - borrowed``.
- **headroom**: ``quota - within quota``: the quota not in use.
- **reclaimable** jobs: the running jobs the scheduler reclaims first when their owner needs
  the GPUs (Q7), by the engine's own rule (``scheduling.engine.accounting.derive_usage``),
  reused here so the impact's job lists and the scheduler never disagree.
- **effective guarantee** of a line: ``max(line guarantee, sum of its queues'
  guarantees)``: what the cluster has promised that line. The sum of effective
  guarantees must stay within the healthy capacity (Q5), and within it minus the
  admins' reserve unless an admin explicitly accepts eating into the reserve.

What a request is advised from history (recent use, guarantee suggestions) is
``quotas.advice``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from scheduling.engine.accounting import borrowed_gpus as beyond_quota
from scheduling.engine.accounting import derive_usage
from scheduling.engine.explain import count
from scheduling.engine.types import PREEMPTING, RUNNING, LineView, QueueView, RunningJob, Tier


def _pick(obj: object, *names: str) -> dict[str, Any]:
    """``{name: obj.<name>}`` in the order given: fields and derived numbers alike, as the
    API and the pages print them."""
    return {name: getattr(obj, name) for name in names}


# ---------------------------------------------------------------------------
# Contracts


@dataclass(frozen=True, slots=True)
class LineContract:
    """A business line's contract: a cap (``quota_gpus``) and a floor (``guarantee_gpus``)."""

    name: str
    quota_gpus: int
    guarantee_gpus: int = 0


@dataclass(frozen=True, slots=True)
class QueueContract:
    """A queue's contract inside its ``line``'s; ``quota_gpus`` ``None``: only the line caps it."""

    name: str
    line: str
    quota_gpus: int | None = None
    guarantee_gpus: int = 0


@dataclass(frozen=True, slots=True)
class Change:
    """A proposed contract: ``None`` fields stay as they are."""

    line: str
    queue: str | None = None
    quota_gpus: int | None = None
    guarantee_gpus: int | None = None

    @property
    def target(self) -> str:
        return f"queue {self.queue}" if self.queue else f"line {self.line}"


_C = TypeVar("_C", LineContract, QueueContract)


def _changed(contract: _C, change: Change) -> _C:
    """``contract`` with the quota and guarantee ``change`` gives (``None`` keeps one)."""
    return replace(
        contract,
        quota_gpus=contract.quota_gpus if change.quota_gpus is None else change.quota_gpus,
        guarantee_gpus=contract.guarantee_gpus
        if change.guarantee_gpus is None
        else change.guarantee_gpus,
    )


@dataclass(frozen=True, slots=True)
class Contracts:
    """Every line's and queue's contract at one instant."""

    lines: tuple[LineContract, ...]
    queues: tuple[QueueContract, ...] = ()

    def line(self, name: str) -> LineContract:
        for ln in self.lines:
            if ln.name == name:
                return ln
        raise KeyError(f"unknown line {name!r}")

    def queue(self, name: str) -> QueueContract:
        for q in self.queues:
            if q.name == name:
                return q
        raise KeyError(f"unknown queue {name!r}")

    def queues_of(self, line: str) -> tuple[QueueContract, ...]:
        return tuple(q for q in self.queues if q.line == line)

    def with_change(self, change: Change) -> Contracts:
        """The contracts after ``change`` (the target must exist)."""
        if change.queue:
            old = self.queue(change.queue)
            queues = tuple(_changed(q, change) if q is old else q for q in self.queues)
            return replace(self, queues=queues)
        old = self.line(change.line)
        return replace(
            self, lines=tuple(_changed(ln, change) if ln is old else ln for ln in self.lines)
        )

    def with_changes(self, changes: Iterable[Change]) -> Contracts:
        out = self
        for c in changes:
            out = out.with_change(c)
        return out

    def target_contract(self, change: Change) -> tuple[int | None, int]:
        """``(quota, guarantee)`` of the change's target."""
        if change.queue:
            q = self.queue(change.queue)
            return q.quota_gpus, q.guarantee_gpus
        ln = self.line(change.line)
        return ln.quota_gpus, ln.guarantee_gpus


def effective_guarantee(line: LineContract, queues: Iterable[QueueContract]) -> int:
    """What the cluster promises a line: its own guarantee or its queues' together."""
    return max(line.guarantee_gpus, sum(q.guarantee_gpus for q in queues))


def guarantee_total(contracts: Contracts) -> int:
    """The sum of effective guarantees over all lines (must fit in healthy capacity, Q5)."""
    return sum(effective_guarantee(ln, contracts.queues_of(ln.name)) for ln in contracts.lines)


# ---------------------------------------------------------------------------
# Validation of a proposed contract


def validate_change(
    contracts: Contracts, change: Change, cluster_gpus: int
) -> dict[str, list[str]]:
    """Field errors of a proposed change (empty when it is a valid contract).

    Checks numbers only; the line/queue must exist in ``contracts`` (callers check
    names and ownership first). ``cluster_gpus`` is all GPUs the cluster holds.
    """
    errors: dict[str, list[str]] = {}

    def err(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    if change.quota_gpus is None and change.guarantee_gpus is None:
        err("quota_gpus", "give a new quota, a new guarantee, or both")
        return errors
    for name in ("quota_gpus", "guarantee_gpus"):
        value = getattr(change, name)
        if value is None:
            continue
        if value < 0:
            err(name, f"must not be negative (got {value:,})")
        elif value > cluster_gpus:
            err(name, f"{value:,} GPUs is more than the cluster holds ({cluster_gpus:,} GPUs)")
    if errors:
        return errors

    quota, guarantee = contracts.target_contract(change)
    new_quota = quota if change.quota_gpus is None else change.quota_gpus
    new_guarantee = guarantee if change.guarantee_gpus is None else change.guarantee_gpus
    if new_quota is not None and new_guarantee > new_quota:
        if change.quota_gpus is None:
            err(
                "guarantee_gpus",
                f"a guarantee of {new_guarantee:,} GPUs is above the current quota of "
                f"{new_quota:,}; ask for a quota of at least {new_guarantee:,} too",
            )
        else:
            err(
                "guarantee_gpus",
                f"the guarantee ({new_guarantee:,}) cannot be above the quota ({new_quota:,})",
            )
    if change.queue:
        line = contracts.line(change.line)
        if change.quota_gpus is not None and change.quota_gpus > line.quota_gpus:
            err(
                "quota_gpus",
                f"a queue's quota ({change.quota_gpus:,}) cannot be above its line's quota "
                f"({line.quota_gpus:,}); ask for the line's quota first",
            )
        if new_guarantee > line.quota_gpus and "guarantee_gpus" not in errors:
            err(
                "guarantee_gpus",
                f"a queue's guarantee ({new_guarantee:,}) cannot be above its line's quota "
                f"({line.quota_gpus:,})",
            )
    elif change.quota_gpus is not None:
        queues = contracts.queues_of(change.line)
        promised = sum(q.guarantee_gpus for q in queues)
        if change.quota_gpus < promised:
            err(
                "quota_gpus",
                f"the line's queues guarantee {promised:,} GPUs together; its quota cannot go "
                f"below that",
            )
    if not errors and (new_quota, new_guarantee) == (quota, guarantee):
        err("non_field_errors", f"this is already the contract of the {change.target}")
    return errors


# ---------------------------------------------------------------------------
# Usage against contracts


@dataclass(frozen=True, slots=True)
class Hold:
    """A job holding GPUs (running, or ``preempting`` while it checkpoints).

    ``borrowed`` is the flag the loop last stored: only an order hint, since which jobs
    are borrowed is re-derived from the quotas (``positions``); among borrowed jobs the
    youngest (``started_at``) is reclaimed first.
    """

    id: int
    queue: str
    line: str
    gpus: int
    preemptible: bool = True
    started_at: float = 0.0
    borrowed: bool = False
    preempting: bool = False
    name: str = ""
    owner: str = ""


@dataclass(frozen=True, slots=True)
class Position:
    """A line's or queue's use against its contract.

    ``reclaimable_gpus``: GPUs of its jobs the engine treats as borrowed (reclaimed first);
    used for the impact's estimates, not shown as "borrowed" (see the module's words).
    """

    quota_gpus: int | None
    guarantee_gpus: int
    used_gpus: int = 0
    reclaimable_gpus: int = 0
    active_gpus: int = 0

    @property
    def borrowed_gpus(self) -> int:
        return beyond_quota(self.used_gpus, self.quota_gpus)

    @property
    def within_quota_gpus(self) -> int:
        return self.used_gpus - self.borrowed_gpus

    @property
    def entitled_gpus(self) -> int:
        """The API's older name of ``within_quota_gpus``."""
        return self.within_quota_gpus

    @property
    def headroom_gpus(self) -> int | None:
        """``None``: no cap of its own (a queue bounded only by its line)."""
        return None if self.quota_gpus is None else self.quota_gpus - self.within_quota_gpus

    @property
    def room_gpus(self) -> int | None:
        """What the engine lets it start on its own right: quota minus the use it does not
        treat as reclaimable (its own reclaimable jobs make way)."""
        if self.quota_gpus is None:
            return None
        return max(0, self.quota_gpus - (self.used_gpus - self.reclaimable_gpus))

    @property
    def protected_gpus(self) -> int:
        """Active use covered by the guarantee (never preempted)."""
        return min(self.active_gpus, self.guarantee_gpus)

    def as_dict(self) -> dict[str, Any]:
        return _pick(self, "quota_gpus", "guarantee_gpus", "used_gpus", "within_quota_gpus",
                     "entitled_gpus", "borrowed_gpus", "headroom_gpus",
                     "protected_gpus")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Positions:
    lines: dict[str, Position]
    queues: dict[str, Position]
    borrowed_ids: frozenset[int]


def positions(contracts: Contracts, holds: Iterable[Hold]) -> Positions:
    """Every line's and queue's position; borrowed jobs re-derived as the engine does."""
    holds = tuple(holds)
    running = [
        RunningJob(
            id=h.id,
            queue=h.queue,
            line=h.line,
            tier=Tier.EXPERIMENT,  # tiers play no part in quota arithmetic
            gpus=h.gpus,
            placement=(),
            preemptible=h.preemptible,
            started_at=h.started_at,
            state=PREEMPTING if h.preempting else RUNNING,
            borrowed=h.borrowed,
        )
        for h in holds
    ]
    lines = {ln.name: LineView(ln.name, ln.quota_gpus, ln.guarantee_gpus) for ln in contracts.lines}
    queues = {
        q.name: QueueView(q.name, q.line, Tier.EXPERIMENT, q.quota_gpus, q.guarantee_gpus)
        for q in contracts.queues
    }
    usage = derive_usage(running, queues, lines)
    reclaimable_q: dict[str, int] = {}
    reclaimable_l: dict[str, int] = {}
    for h in holds:
        if h.id in usage.borrowed_ids:
            reclaimable_q[h.queue] = reclaimable_q.get(h.queue, 0) + h.gpus
            reclaimable_l[h.line] = reclaimable_l.get(h.line, 0) + h.gpus

    def position(
        c: LineContract | QueueContract, held: dict, reclaimable: dict, active: dict
    ) -> Position:
        n = c.name
        return Position(c.quota_gpus, c.guarantee_gpus, held.get(n, 0), reclaimable.get(n, 0),
                        active.get(n, 0))  # fmt: skip

    return Positions(
        lines={
            ln.name: position(ln, usage.held_line, reclaimable_l, usage.active_line)
            for ln in contracts.lines
        },
        queues={
            q.name: position(q, usage.held_queue, reclaimable_q, usage.active_queue)
            for q in contracts.queues
        },
        borrowed_ids=usage.borrowed_ids,
    )


def settled(contracts: Contracts, holds: Iterable[Hold]) -> tuple[Hold, ...]:
    """``holds`` with their stored ``borrowed`` flags set to what ``contracts`` settle
    them to: what the next plan writes back (``Plan.marks``). Between cycles the stored
    flags may lag (work ended since the last plan); ``impact`` compares a change against
    this steady state, so a raise never lists a job as newly reclaimable only because its
    stale flag kept it on top."""
    holds = tuple(holds)
    borrowed = positions(contracts, holds).borrowed_ids
    return tuple(replace(h, borrowed=h.id in borrowed) for h in holds)


# ---------------------------------------------------------------------------
# Guarantees against capacity


@dataclass(frozen=True, slots=True)
class GuaranteeFit:
    """The sum of guarantees before and after a change, against healthy capacity."""

    total_before: int
    total_after: int
    healthy_gpus: int
    reserve_gpus: int = 0

    @property
    def limit_gpus(self) -> int:
        """What guarantees may take without touching the admins' reserve."""
        return max(0, self.healthy_gpus - self.reserve_gpus)

    @property
    def increases(self) -> bool:
        return self.total_after > self.total_before

    @property
    def fits_capacity(self) -> bool:
        return self.total_after <= self.healthy_gpus

    @property
    def fits_reserve(self) -> bool:
        return self.total_after <= self.limit_gpus

    @property
    def allowed(self) -> bool:
        """Never push the sum past healthy capacity; a change that lowers it is always allowed
        (capacity can shrink under existing contracts when nodes fail)."""
        return self.fits_capacity or not self.increases

    @property
    def needs_reserve_override(self) -> bool:
        """Allowed, but eats into the reserve: an admin must say so explicitly."""
        return self.allowed and self.increases and not self.fits_reserve

    @property
    def room_gpus(self) -> int:
        """Healthy GPUs left unpromised after the change (negative: over capacity)."""
        return self.healthy_gpus - self.total_after

    def as_dict(self) -> dict[str, Any]:
        return _pick(self, "total_before", "total_after", "healthy_gpus", "reserve_gpus",
                     "limit_gpus", "room_gpus", "fits_capacity", "fits_reserve", "allowed",
                     "needs_reserve_override")  # fmt: skip

    def message(self) -> str:
        head = (
            f"guarantees would total {self.total_after:,} GPUs (now {self.total_before:,}) of "
            f"{self.healthy_gpus:,} healthy GPUs"
        )
        if self.reserve_gpus:
            head += f", {self.reserve_gpus:,} of them kept in the admins' reserve"
        if not self.allowed:
            return f"Does not fit: {head}."
        if self.needs_reserve_override:
            return f"Fits only by using the reserve: {head}."
        return f"Fits: {head}."


def check_fit(
    contracts: Contracts,
    change: Change,
    healthy_gpus: int,
    reserve_gpus: int = 0,
    scheduled: Sequence[Change] = (),
) -> GuaranteeFit:
    """Sum of guarantees with ``scheduled`` (approved, not yet in effect) changes, then
    with ``change`` on top: approving never promises what later starts already took."""
    committed = contracts.with_changes(scheduled)
    return GuaranteeFit(
        total_before=guarantee_total(committed),
        total_after=guarantee_total(committed.with_change(change)),
        healthy_gpus=healthy_gpus,
        reserve_gpus=reserve_gpus,
    )


# ---------------------------------------------------------------------------
# Impact of a change


@dataclass(frozen=True, slots=True)
class JobRef:
    id: int
    name: str
    owner: str
    queue: str
    line: str
    gpus: int

    @classmethod
    def of(cls, h: Hold) -> JobRef:
        return cls(h.id, h.name, h.owner, h.queue, h.line, h.gpus)


@dataclass(frozen=True, slots=True)
class LineShrink:
    """Another line's reclaimable work that the change lets the target reclaim:
    ``borrowed_gpus`` (its use beyond its own quota), ``reclaimable_gpus`` (GPUs of its
    jobs the scheduler reclaims first), ``at_risk_gpus`` (how many more of those the
    target could reclaim under the new contract)."""

    line: str
    borrowed_gpus: int
    reclaimable_gpus: int
    at_risk_gpus: int


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Everything ``impact`` needs: contracts, running jobs, demand and capacity."""

    contracts: Contracts
    holds: tuple[Hold, ...] = ()
    pending_gpus: Mapping[str, int] = field(default_factory=dict)  # by queue
    healthy_gpus: int = 0
    free_gpus: int = 0
    reserve_gpus: int = 0
    scheduled: tuple[Change, ...] = ()


@dataclass(frozen=True, slots=True)
class Impact:
    change: Change
    before: Position
    after: Position
    line_before: Position
    line_after: Position
    guarantees: GuaranteeFit
    demand_gpus: int
    free_gpus: int
    newly_reclaimable: tuple[JobRef, ...]
    no_longer_reclaimable: tuple[JobRef, ...]
    likely_preempted: tuple[JobRef, ...]
    borrowing_shrinks: tuple[LineShrink, ...]
    notes: tuple[str, ...]

    def as_dict(self) -> dict:
        return {
            "target": {
                "line": self.change.line,
                "queue": self.change.queue,
                "quota_gpus": self.change.quota_gpus,
                "guarantee_gpus": self.change.guarantee_gpus,
            },
            "fits": self.guarantees.allowed,
            "guarantees": self.guarantees.as_dict(),
            "before": self.before.as_dict(),
            "after": self.after.as_dict(),
            "line_before": self.line_before.as_dict(),
            "line_after": self.line_after.as_dict(),
            "demand_gpus": self.demand_gpus,
            "free_gpus": self.free_gpus,
            "newly_reclaimable": [asdict(j) for j in self.newly_reclaimable],
            "no_longer_reclaimable": [asdict(j) for j in self.no_longer_reclaimable],
            "likely_preempted": [asdict(j) for j in self.likely_preempted],
            "borrowing_shrinks": [asdict(s) for s in self.borrowing_shrinks],
            "notes": list(self.notes),
        }


_UNBOUNDED = 1 << 40


def _claimable(p: Positions, change: Change) -> int:
    """GPUs the target may still start on its own right (bounded by its line), as the
    engine counts it."""
    line_room = p.lines[change.line].room_gpus
    room = _UNBOUNDED if line_room is None else line_room
    if change.queue:
        q_room = p.queues[change.queue].room_gpus
        room = min(room, _UNBOUNDED if q_room is None else q_room)
    return room


def _reclaim(
    holds: Sequence[Hold],
    borrowed_ids: frozenset[int],
    outside: Callable[[Hold], bool],
    claim: int,
    free_gpus: int,
) -> list[Hold]:
    """Borrowed jobs of others that a claim of ``claim`` GPUs would take back after the free
    GPUs are used; the newest first (least progress lost), as an estimate of the engine."""
    need = max(0, claim - free_gpus)
    picked: list[Hold] = []
    candidates = sorted(
        (h for h in holds if h.id in borrowed_ids and outside(h) and not h.preempting),
        key=lambda h: (-h.started_at, h.id),
    )
    for h in candidates:
        if need <= 0:
            break
        picked.append(h)
        need -= h.gpus
    return picked


def impact(state: ClusterState, change: Change) -> Impact:
    """What ``change`` would do if it took effect now (the target must exist).

    - ``guarantees``: does the sum of guarantees still fit (with already approved,
      not yet started changes counted)?
    - ``newly_reclaimable``: running jobs of the target that end up above a lowered quota
      and become borrowed (the first reclaimed when capacity is needed).
    - ``likely_preempted``: other lines' borrowed jobs that the target's pending demand
      would reclaim once the change is in effect, beyond what it could take already.
    - ``borrowing_shrinks``: per other line, how much of its borrowing the target could
      reclaim if it used all its new headroom.
    """
    before_c = state.contracts
    after_c = before_c.with_change(change)
    holds = settled(before_c, state.holds)
    pb = positions(before_c, holds)
    pa = positions(after_c, holds)
    fit = check_fit(
        before_c, change, state.healthy_gpus, state.reserve_gpus, scheduled=state.scheduled
    )

    if change.queue:
        before, after = pb.queues[change.queue], pa.queues[change.queue]

        def inside(h: Hold) -> bool:
            return h.queue == change.queue

        demand = state.pending_gpus.get(change.queue, 0)
    else:
        before, after = pb.lines[change.line], pa.lines[change.line]

        def inside(h: Hold) -> bool:
            return h.line == change.line

        demand = sum(state.pending_gpus.get(q.name, 0) for q in before_c.queues_of(change.line))

    def outside(h: Hold) -> bool:
        return not inside(h)

    by_id = {h.id: h for h in holds}
    newly = sorted(pa.borrowed_ids - pb.borrowed_ids)
    freed = sorted(pb.borrowed_ids - pa.borrowed_ids)

    claim_b, claim_a = _claimable(pb, change), _claimable(pa, change)
    likely_b = {
        h.id
        for h in _reclaim(holds, pb.borrowed_ids, outside, min(demand, claim_b), state.free_gpus)
    }
    likely_a = _reclaim(holds, pa.borrowed_ids, outside, min(demand, claim_a), state.free_gpus)
    likely = [h for h in likely_a if h.id not in likely_b]

    risk_b: dict[str, int] = {}
    for h in _reclaim(holds, pb.borrowed_ids, outside, claim_b, state.free_gpus):
        risk_b[h.line] = risk_b.get(h.line, 0) + h.gpus
    risk_a: dict[str, int] = {}
    for h in _reclaim(holds, pa.borrowed_ids, outside, claim_a, state.free_gpus):
        risk_a[h.line] = risk_a.get(h.line, 0) + h.gpus
    shrinks = tuple(
        LineShrink(
            line,
            pa.lines[line].borrowed_gpus,
            pa.lines[line].reclaimable_gpus,
            risk_a[line] - risk_b.get(line, 0),
        )  # fmt: skip
        for line in sorted(risk_a)
        if risk_a[line] > risk_b.get(line, 0)
    )

    notes = [fit.message()]
    if fit.needs_reserve_override:
        notes.append("Approving it needs an explicit decision to use the reserve.")
    if newly:
        gpus = sum(by_id[i].gpus for i in newly)
        notes.append(
            f"{count(len(newly), 'running job')} ({count(gpus, 'GPU')}) of the {change.target} "
            "would sit above the new quota and become the first reclaimed when others need the GPUs."
        )
    if likely:
        gpus = sum(h.gpus for h in likely)
        notes.append(
            f"With its {demand:,} pending GPUs it would reclaim about {gpus:,} borrowed GPUs from "
            f"{count(len(likely), 'job')} of other lines when it takes effect."
        )
    for s in shrinks:
        notes.append(
            f"Line {s.line} borrows {s.borrowed_gpus:,} GPUs beyond its quota and its "
            f"reclaimable jobs hold {s.reclaimable_gpus:,}; up to {s.at_risk_gpus:,} more of them "
            f"could be reclaimed under the new contract."
        )
    if after.guarantee_gpus < before.guarantee_gpus and before.active_gpus > after.guarantee_gpus:
        notes.append(
            f"Protected use drops from {before.protected_gpus:,} to {after.protected_gpus:,} GPUs: "
            f"more of its running work becomes preemptible by urgent queues."
        )
    return Impact(
        change=change,
        before=before,
        after=after,
        line_before=pb.lines[change.line],
        line_after=pa.lines[change.line],
        guarantees=fit,
        demand_gpus=demand,
        free_gpus=state.free_gpus,
        newly_reclaimable=tuple(JobRef.of(by_id[i]) for i in newly),
        no_longer_reclaimable=tuple(JobRef.of(by_id[i]) for i in freed),
        likely_preempted=tuple(JobRef.of(h) for h in likely),
        borrowing_shrinks=shrinks,
        notes=tuple(notes),
    )


def quota_gpu_seconds(
    current: int | None, changes: Sequence[tuple[float, int | None, int | None]],
    start: float, until: float,
) -> float | None:  # fmt: skip
    """The quota held over ``[start, until)`` in GPU-seconds: the integral of the quota in
    time (the usage report's "of its quota"). ``current``: the quota now; ``changes``: the
    contract's changes after ``start`` as ``(at, quota before, quota after)`` in time order
    (those after ``until`` too: they tell what the quota was before them). ``None`` when
    the scope had no quota of its own (a queue bounded only by its line) at any moment
    of the period, or the period is empty."""
    if until <= start:
        return None
    quota = changes[0][1] if changes else current
    total, since = 0.0, start
    for at, _before, after in changes:
        if at >= until:
            break
        if quota is None:
            return None
        total += quota * (max(at, since) - since)
        quota, since = after, max(at, since)
    if quota is None:
        return None
    return total + quota * (until - since)
