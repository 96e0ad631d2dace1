"""Engine value types: what goes into ``plan()`` and what comes out.

Everything here is a frozen, slotted dataclass (or an enum) so a snapshot can be
shared freely and a plan compared for equality. Times are float epoch seconds (cluster
time; a verdict's ``details`` carry them as ISO 8601 strings);
GPU counts are ints; a node's GPUs are addressed by index (0..gpus_total-1).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


class Tier(enum.IntEnum):
    """The four priority tiers (Q2). A bigger value is a higher priority."""

    EXPERIMENT = 0
    FINETUNE = 1
    CORE = 2
    URGENT = 3

    @classmethod
    def parse(cls, value: str | int | Tier) -> Tier:
        """``Tier.parse("core")`` -> ``Tier.CORE``; accepts a Tier or its int too."""
        if isinstance(value, Tier):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        raise ValueError(
            f"unknown tier {value!r}; expected one of urgent, core, finetune, experiment"
        )

    @property
    def label(self) -> str:
        return self.name.lower()


# Node states (only READY nodes take new work).
READY = "ready"
CORDONED = "cordoned"
DRAINING = "draining"
DOWN = "down"
UNHEALTHY = "unhealthy"
NODE_STATES = frozenset({READY, CORDONED, DRAINING, DOWN, UNHEALTHY})

# Running job states.
RUNNING = "running"
PREEMPTING = "preempting"

# Preemption modes.
GRACEFUL = "graceful"
COLD = "cold"

#: The ``full`` preset's starvation bound (#19): 7 days, the default of Slurm's
#: PriorityMaxAge; the portal's admins set theirs in the quota policy.
FULL_STARVATION_BOUND_S = 7 * 86400.0
#: The ``full`` preset's patience before reclaiming borrowed work (#19, session 29): 25
#: minutes, predictive (waited out only for room the running work is predicted to free
#: within it), and shorter than ``PolicyConfig.overrun_s`` so that a run already past its
#: predicted end (guessed to end ``overrun_s`` from now) is no reason to wait. On ITP it
#: keeps evictions under 5% of runs; urgent work preempts at once.
FULL_RECLAIM_PATIENCE_S = 1500.0


class Code:
    """Pending reason codes, exactly as in API.md (and in its precedence order)."""

    NEVER_FITS = "NEVER_FITS"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    NODES_UNAVAILABLE = "NODES_UNAVAILABLE"
    PRIORITY = "PRIORITY"
    PREEMPTING = "PREEMPTING"
    TOPOLOGY = "TOPOLOGY"
    INSUFFICIENT_GPUS = "INSUFFICIENT_GPUS"
    DEMOTED = "DEMOTED"


# The precedence of the codes, API.md's order, defined here once: a waiting job reads the
# first code whose condition holds for it (docs/engine.md, "Verdicts", says what each
# condition is). DEMOTED is the exception that proves the rule: it holds for a demoted job
# whose only conditions are capacity ones (PRIORITY, TOPOLOGY, INSUFFICIENT_GPUS), and
# replaces them (the underlying code stays in ``details.underlying_code``).
PRECEDENCE: tuple[str, ...] = (
    Code.NEVER_FITS,
    Code.QUOTA_EXCEEDED,
    Code.NODES_UNAVAILABLE,
    Code.PRIORITY,
    Code.PREEMPTING,
    Code.TOPOLOGY,
    Code.INSUFFICIENT_GPUS,
    Code.DEMOTED,
)
VERDICT_CODES: tuple[str, ...] = PRECEDENCE
_RANK = {code: i for i, code in enumerate(PRECEDENCE)}


def precedence(code: str) -> int:
    """Rank of a code in ``PRECEDENCE`` (0 first); unknown codes (the loop's own
    ``LAUNCH_RETRY``) rank after every engine code."""
    return _RANK.get(code, len(PRECEDENCE))


def first_code(codes: Iterable[str]) -> str | None:
    """The code a job reads when all of ``codes`` hold for it (None for none)."""
    return min(codes, key=precedence, default=None)


def _tier(value: Any) -> Tier:
    return value if isinstance(value, Tier) else Tier.parse(value)


@dataclass(frozen=True, slots=True)
class Slot:
    """Part of a placement: these GPU indices on this node."""

    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NodeHardware:
    """What a node is, whoever looks at it: its name, its place in the topology
    (rack within block) and its GPUs (model, memory per GPU, count).

    The engine's :class:`NodeView`, a backend's ``ObservedNode`` and the
    simulator's ``NodeObservation`` start with these fields, in this order; each
    adds what its reader needs (free GPUs, health, ...).
    """

    name: str
    rack: str
    block: str
    gpu_model: str
    gpu_memory_gb: int
    gpus_total: int


@dataclass(frozen=True, slots=True)
class NodeView(NodeHardware):
    """One node as the engine sees it.

    ``free_gpus`` are the indices not held by any running job. ``inference``: the
    node serves online inference; training lands there only if the job is
    preemptible and does not ``avoid_inference``. ``exclusive``: a running job
    holds the node exclusively, so nothing else may land. ``pool`` (optional)
    partitions the cluster, e.g. one pool per virtual cluster in a trace replay.
    ``inference_rise`` (shared nodes, #19, ``inference_forecast.py``): per UTC hour of
    the day, how many GPUs more than it holds now online inference was seen to want
    then; a job may use the node's free GPUs less the rise over the hours it would run.
    Empty: nothing learned, no limit. ``inference_day_learned``: that forecast has seen
    every hour of the day (``inference_forecast.knows_whole_day``), so it may send work to
    the node first (``PolicyConfig.shared_nodes_first``).
    ``unavailable_from`` (scheduled maintenance): the node leaves service at this time. A
    job starts here only if it is predicted to end by then, nothing reserves it, and no
    preemption or move makes room here; a job that fits only on such nodes waits with
    ``NODES_UNAVAILABLE`` naming the maintenance. None (the default): no maintenance.
    ``maintenance_reason``: that maintenance's reason, as the verdict quotes it.
    """

    free_gpus: tuple[int, ...]
    rdma: bool = True
    state: str = READY
    recent_models: tuple[str, ...] = ()
    inference: bool = False
    exclusive: bool = False
    pool: str | None = None
    inference_rise: tuple[int, ...] = ()
    inference_day_learned: bool = False
    unavailable_from: float | None = None
    maintenance_reason: str = ""


@dataclass(frozen=True, slots=True)
class LineView:
    """A business line's contract. ``quota_gpus=None`` means no line quota."""

    name: str
    quota_gpus: int | None
    guarantee_gpus: int = 0


def default_preempts(tier: Tier) -> frozenset[Tier]:
    """By default only urgent queues preempt, and only strictly lower tiers."""
    if tier == Tier.URGENT:
        return frozenset({Tier.EXPERIMENT, Tier.FINETUNE, Tier.CORE})
    return frozenset()


@dataclass(frozen=True, slots=True)
class QueueView:
    """A queue inside a line. ``quota_gpus=None``: only the line quota applies.

    ``preempts_tiers``: tiers whose running (preemptible) work this queue's jobs
    may preempt; only tiers strictly below the preemptor's are ever used. Left as
    None it defaults to {experiment, finetune, core} for urgent queues and to
    nothing otherwise.

    Borrowing (#19, ``borrowing.py``): ``eviction_ratio`` is the queue's recent eviction
    ratio (None: unknown), ``last_reclaim_at`` when a job of it was last evicted (None:
    not recently); ``evicted_gpu_s`` / ``delivered_gpu_s`` the two sides of that ratio
    (GPU time of the runs evicted, and GPU time the queue was given; None: unknown), which
    the quota swap's eviction budget reads; the caller computes all four over its own
    window.
    """

    name: str
    line: str
    tier: Tier
    quota_gpus: int | None = None
    guarantee_gpus: int = 0
    preempts_tiers: frozenset[Tier] = None  # type: ignore[assignment]
    eviction_ratio: float | None = None
    last_reclaim_at: float | None = None
    evicted_gpu_s: float | None = None
    delivered_gpu_s: float | None = None

    def __post_init__(self) -> None:
        tier = _tier(self.tier)
        object.__setattr__(self, "tier", tier)
        if self.preempts_tiers is None:
            object.__setattr__(self, "preempts_tiers", default_preempts(tier))
        else:
            object.__setattr__(
                self, "preempts_tiers", frozenset(_tier(t) for t in self.preempts_tiers)
            )


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting to start.

    ``preemptible`` defaults to True below ``core`` (API.md). ``predicted_runtime_s``
    is filled by the caller from ``predict.py``; None means "unknown" and the
    policy's conservative ``default_runtime_s`` is used. ``gpu_model``/``pool``
    optionally restrict the nodes it may use. ``last_evicted_at``: when it was last
    preempted (None: never, or long ago), for the borrowing cool-down (``borrowing.py``).
    ``move_to``: a job stopped by a move (``Migration``) and not restarted yet: the node
    where room was kept for it; it restarts there first (``kept_rooms.restarts``).
    ``first_among_own``: when its owner put it first among their own waiting jobs (Slurm's
    ``scontrol top``; 0: never); it then takes the first of their places (``own_order.py``).
    """

    id: int
    queue: str
    line: str
    tier: Tier
    gpus: int
    gpus_per_node: int | None = None
    gpu_memory_gb: int | None = None
    rdma: bool = False
    exclusive_node: bool = False
    avoid_inference: bool = False
    preemptible: bool = None  # type: ignore[assignment]
    submitted_at: float = 0.0
    preemption_count: int = 0
    model_name: str | None = None
    predicted_runtime_s: float | None = None
    owner: str = ""
    estimated_runtime_s: float | None = None
    gpu_model: str | None = None
    pool: str | None = None
    last_evicted_at: float | None = None
    move_to: str | None = None
    first_among_own: float = 0.0

    def __post_init__(self) -> None:
        tier = _tier(self.tier)
        object.__setattr__(self, "tier", tier)
        if self.preemptible is None:
            object.__setattr__(self, "preemptible", tier < Tier.CORE)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding GPUs: ``running``, or ``preempting`` (checkpointing before it
    stops). ``preempted_for`` names the pending job it is making room for, and
    ``preempt_deadline`` when it will be gone at the latest. ``borrowed``: it was
    started on borrowed idle capacity (the engine re-derives this every plan).
    ``checkpointable``: it writes checkpoints to shared storage, so it can be moved
    (checkpoint, then restart elsewhere) by consolidation; ``migrating``: it is
    ``preempting`` because consolidation moves it (for ``preempted_for``), not
    because it was preempted (``consolidation.py``), and ``move_to`` is the node where room
    is kept for it (``Migration.to_node``): no other job takes that room until it restarts.
    """

    id: int
    queue: str
    line: str
    tier: Tier
    gpus: int
    placement: tuple[Slot, ...]
    preemptible: bool = False
    preemption_count: int = 0
    started_at: float = 0.0
    last_checkpoint_at: float | None = None
    predicted_end: float | None = None
    state: str = RUNNING
    exclusive_node: bool = False
    model_name: str | None = None
    preempted_for: int | None = None
    preempt_deadline: float | None = None
    borrowed: bool = False
    owner: str = ""
    checkpointable: bool = False
    migrating: bool = False
    move_to: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tier", _tier(self.tier))


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Policy switches. Presets for trace replays: ``PolicyConfig.preset(name)``.

    - ``backfill``: lower jobs may start past a blocked one if they cannot delay
      any reservation; off means head-of-line blocking behind the first job
      that is blocked for capacity.
    - ``borrowing``: preemptible work may exceed quota on idle capacity (Q7).
    - ``preemption``: allow preemption at all (tier rules and reclaiming).
    - ``strict_fifo``: order by submit time only, ignoring tiers and fair share.
    - ``demote_after``: a job preempted more than this many times is demoted.
    - ``max_reservations``: how many blocked jobs get a backfill reservation.
    - ``default_runtime_s``: runtime assumed when nothing is known (long, so
      backfill stays safe).
    - ``overrun_s``: a running job past its predicted end is assumed to need this
      much longer.
    - ``max_preemptors``/``max_preemption_searches``: bound eviction churn and
      work per plan; ``eviction_cost_gpu_h``: what each victim costs on top of the
      work it loses, in GPU-hours, so fewer victims are chosen (R2);
      ``victim_given_weight``: what each GPU-hour a victim's run has been given adds to
      its cost (R4 counts an evicted run's whole GPU time, so a run of 20 h that
      checkpointed a minute ago is cheap in lost work but dear in eviction ratio).
    - ``preempt_after_s`` (patience): a waiting job may preempt only once it has waited
      this long since its submission or last eviction (capacity that frees meanwhile
      needs no eviction); ``tier_preempt_after_s``: the same for a job whose queue may
      preempt lower tiers (urgent), kept short. ``predictive_patience``: the patience is
      waited out only for room the running work is predicted to free before it ends;
      room predicted later is preempted for at once. The ``full`` preset waits
      ``FULL_RECLAIM_PATIENCE_S`` (25 min), predictively, before a reclaim, and lets
      urgent work preempt at once. ``wait_if_free_within_s``: a job that
      fits its quota does not preempt for capacity the running work is predicted to free
      within this long (its backfill reservation would start by then): it waits for that
      instead (0: off).
    - ``overrun_foresight``: a reservation's nodes are chosen with each run past its
      predicted end foreseen to run this many times as long again as it has run
      (``policy.foreseen_end``), and held from when they free on the backfill timeline
      (``Planner.reserved_nodes``; 0: off, in every preset: Philly 640 waits less, ITP
      1,280 more and evicts more, docs/replay.md session 39).
    - ``align_ends``: runtime-aware packing among equally tight nodes
      (``placement.aligned``).
    - ``preemption_mode``: ``graceful`` (checkpoint, then stop) or ``cold``.
    - ``consolidation``: move checkpointable work off a few nodes so a waiting gang
      starts (``consolidation.py``; only with ``preemption`` on, so the ``full``
      preset alone consolidates); ``max_migrations`` / ``max_migrations_per_queue``:
      the eviction budget of moved jobs per plan, overall and per queue;
      ``max_consolidations``: gangs that may get room this way per plan;
      ``consolidate_min_wait_s``: only for a gang otherwise expected to wait longer;
      ``migrate_min_run_s``: a job runs this long since its (re)start before it may move;
      ``consolidate_over_quota``: also for a gang over its quota that would borrow or
      start by a quota swap; ``consolidate_before_reclaim``: a gang within its quota whose
      reclaim of borrowed work would stop runs given at least ``reclaim_move_min_gpu_h``
      GPU-hours tries moving jobs instead (a moved job restarts at once, a reclaimed
      borrower waits again and all its run's GPU time counts as evicted).
      ``defragment_nodes``: after the plan's starts, move the jobs off up to this many
      partly used nodes into holes on fuller ones, so whole nodes are free before a gang
      asks (``defragment.py``; 0: off); ``defragment_min_left_s``: only jobs predicted to
      run at least this much longer move for it.
      ``shared_nodes_first``: a single-node job that may run beside online inference
      tries the shared nodes whose forecast knows the whole day
      (``NodeView.inference_day_learned``) before the nodes without inference, where it
      is predicted to end before inference wants the GPUs back; the free GPUs inference
      leaves are used instead of breaking a whole node (#19).
    - ``starvation_bound_s``: a job waiting this long is overdue and goes first in its
      tier, oldest first, so it gets a reservation nothing later can take (``aging.py``;
      None: no bound; the ``full`` preset has 7 days, within the tier and with the quota
      hold: shorter bounds cost ``full`` wait on Philly 640, docs/engine.md "Job order"). ``order_by_work``: within a tier and fair-share band, the smallest
      predicted work (GPUs x predicted runtime) first, else submit order;
      ``share_bands``: fair-share bands per quota (0: order by the exact share);
      ``overdue_across_tiers``: overdue jobs go before every job not overdue, whatever
      its tier; ``hold_quota_when_overdue``: an overdue job over quota holds its
      queue's or line's quota room, and one that would start by a quota swap swaps in
      the first pass, holding a node reservation (``QuotaSwap.overdue_first``; on in the
      ``backfill`` and ``full`` presets).
    - Borrowing that does not thrash (``borrowing.py``, with ``borrowing`` on):
      ``borrow_forecast``: borrow only if the job's predicted runtime ends before the
      lenders are predicted to need the capacity back; ``borrow_cooldown_s`` /
      ``borrow_queue_cooldown_s``: a job evicted this recently, or any job of a queue that
      had one evicted this recently, does not borrow; ``borrow_eviction_target``: a queue
      whose eviction ratio is above it may borrow less with ``borrow_cap`` (a cap that
      shrinks to 0 at twice the target; off by default since session 15: after a cold
      start it fed on itself, and ITP meets #19 without it, docs/replay.md);
      ``borrow_forecast_over_target`` /
      ``borrow_queue_cooldown_over_target``: the forecast for every borrower, the queue
      cool-down only, in a queue above that target. ``swap_quota``: a job that may not
      borrow (not preemptible, or demoted) and finds its queue or line at quota starts on
      idle capacity when enough of that scope's own preemptible work can become the
      borrowed part instead, under the same rules (``quota_swap.py``; on: it takes
      nothing from anyone now, and only presets that borrow swap); ``swap_least_at_risk``:
      a swap displaces the set of runs with the least GPU time a reclaim an hour later
      would count (``quota_swap.least_at_risk``), not simply the newest runs, which could
      be one big run for a small shortfall;
      ``swap_eviction_budget`` (with ``borrow_cap``): a swap displaces a queue's work only
      while all of that queue's borrowed work, were it reclaimed at once, would keep its
      eviction ratio within ``borrow_eviction_target`` (``borrowing.Borrowing.budget``; off:
      on the demo and ITP it cost wait and did not lower the peaks, docs/engine.md).
      ``swap_risk_cap_gpu_h``: a swap for a job that may not preempt (it would otherwise
      wait) puts at most this many GPU-hours at risk per GPU the job starts (the displaced
      runs' GPU time a reclaim an hour later would count, ``policy.at_risk``), so a small
      job does not make a big, long run reclaimable; 0: no cap.
    - ``user_turns``: the people of a line take turns in its places of the order (the one
      holding the fewest GPUs next, ``user_turns.py``) instead of one person's burst of
      jobs going first by submit time.
    """

    backfill: bool = True
    borrowing: bool = True
    preemption: bool = True
    strict_fifo: bool = False
    grace_seconds: float = 300.0
    demote_after: int = 3
    max_reservations: int = 4
    default_runtime_s: float = 12 * 3600.0
    overrun_s: float = 1800.0
    max_preemptors: int = 16
    max_preemption_searches: int = 64
    eviction_cost_gpu_h: float = 1.0
    victim_given_weight: float = 0.1
    align_ends: bool = False
    preempt_after_s: float = 0.0
    tier_preempt_after_s: float = 0.0
    wait_if_free_within_s: float = 0.0
    predictive_patience: bool = False
    overrun_foresight: float = 0.0
    preemption_mode: str = GRACEFUL
    consolidation: bool = True
    max_migrations: int = 8
    max_migrations_per_queue: int = 2
    max_consolidations: int = 4
    consolidate_min_wait_s: float = 900.0
    migrate_min_run_s: float = 1800.0
    consolidate_over_quota: bool = True
    consolidate_before_reclaim: bool = True
    reclaim_move_min_gpu_h: float = 32.0
    defragment_nodes: int = 0
    defragment_min_left_s: float = 3600.0
    shared_nodes_first: bool = True
    starvation_bound_s: float | None = None
    order_by_work: bool = False
    share_bands: int = 0
    hold_quota_when_overdue: bool = False
    overdue_across_tiers: bool = False
    borrow_forecast: bool = True
    borrow_forecast_all: bool = False
    borrow_cooldown_s: float = 1800.0
    borrow_queue_cooldown_s: float = 1800.0
    borrow_eviction_target: float = 0.10
    borrow_cap: bool = False
    borrow_forecast_over_target: bool = False
    borrow_queue_cooldown_over_target: bool = False
    swap_quota: bool = True
    swap_eviction_budget: bool = False
    swap_least_at_risk: bool = True
    swap_risk_cap_gpu_h: float = 16.0
    user_turns: bool = False

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> PolicyConfig:
        """``fifo``, ``priority``, ``backfill`` or ``full`` (the production default)."""
        presets: dict[str, dict[str, Any]] = {
            "fifo": dict(strict_fifo=True, backfill=False, borrowing=False, preemption=False),
            "priority": dict(
                backfill=False,
                borrowing=False,
                preemption=False,
                starvation_bound_s=None,
                order_by_work=False,
                share_bands=0,
            ),
            # no starvation (#19): ITP 1,280 GPUs, p95 wait 340,332 s -> 206,950 s, FIFO's
            # 213,612 s (docs/replay.md); across tiers, not in "full": Philly 640 +55%
            "backfill": dict(
                backfill=True,
                borrowing=False,
                preemption=False,
                starvation_bound_s=86400.0,
                overdue_across_tiers=True,
                hold_quota_when_overdue=True,
            ),
            # within the tier at 7 days (Slurm's PriorityMaxAge), with the quota hold: on
            # Philly 640 and ITP 1,280 within the runs' spread (docs/replay.md, session 27);
            # 25 min of predictive patience before a reclaim (session 29)
            "full": dict(
                backfill=True,
                borrowing=True,
                preemption=True,
                starvation_bound_s=FULL_STARVATION_BOUND_S,
                hold_quota_when_overdue=True,
                preempt_after_s=FULL_RECLAIM_PATIENCE_S,
                predictive_patience=True,
                user_turns=True,  # no change to the replays: their jobs have no owners
            ),
        }
        try:
            values = presets[name]
        except KeyError:
            raise ValueError(
                f"unknown policy preset {name!r}; expected one of {sorted(presets)}"
            ) from None
        return cls(**{**values, **overrides})


def _tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    return items if isinstance(items, tuple) else tuple(items)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything ``plan()`` needs, at one instant.

    ``demand_peaks`` (borrowing, #19, ``borrowing.py``): the peak of the cluster's
    *entitled demand* (summed over lines: GPUs held within quota plus GPUs waiting, at
    most the line's quota) over the last ``borrowing.HORIZONS_S[i]`` seconds, one int per
    horizon, kept by the caller; empty when unknown (only the demand of now is forecast).
    """

    nodes: tuple[NodeView, ...]
    lines: tuple[LineView, ...]
    queues: tuple[QueueView, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    demand_peaks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("nodes", "lines", "queues", "running", "pending"):
            object.__setattr__(self, name, _tuple(getattr(self, name)))


@dataclass(frozen=True, slots=True)
class Start:
    """Start this job now on exactly these GPUs. ``borrowed``: beyond its quota,
    on idle capacity, and first to be reclaimed."""

    job_id: int
    placement: tuple[Slot, ...]
    borrowed: bool = False


@dataclass(frozen=True, slots=True)
class Swap:
    """A quota swap (``quota_swap.py``): ``job_id`` starts within its quota and the
    running jobs ``displaced`` (of its queue or line, preemptible) run on borrowed
    capacity from now on, the first reclaimed when a lender needs its GPUs back."""

    job_id: int
    displaced: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Mark:
    """Running job ``job_id``'s borrowed flag, to be set to ``borrowed``: the accounting
    (``accounting.settle``) no longer agrees with it. ``False``: its scope's use fell
    within the quota, so it no longer runs on borrowed capacity; ``True``: its scope's
    quota fell below its use."""

    job_id: int
    borrowed: bool


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop ``victim_id`` to make room for ``for_job_id``. Graceful: checkpoint,
    then stop by ``grace_deadline``; cold: kill now (deadline = now)."""

    victim_id: int
    for_job_id: int
    mode: str
    grace_deadline: float


@dataclass(frozen=True, slots=True)
class Migration:
    """Move ``job_id`` so ``for_job_id`` (a waiting gang) can start on the nodes it leaves
    (None: so its node comes free whole before a gang asks, ``defragment.py``):
    checkpoint, stop by ``grace_deadline``, back to pending with its progress kept, and
    restart elsewhere from the checkpoint. ``to_node``: where the plan kept room for it
    (on an already used node); later plans keep that room while it checkpoints
    (``RunningJob.move_to``) and restart it there first (``PendingJob.move_to``). Not a
    preemption: it does not count towards demotion nor the eviction ratio
    (``consolidation.py``)."""

    job_id: int
    for_job_id: int | None
    grace_deadline: float
    to_node: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for a blocked job (or one whose victims are checkpointing);
    other jobs may use them only if predicted to finish by ``expected_start``."""

    job_id: int
    nodes: tuple[str, ...]
    expected_start: float | None


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a pending job does not start now, in words and numbers.

    ``details`` are machine fields (counts as ints, times as ISO 8601 strings ``..._at``,
    durations as whole ``..._seconds``; never epochs or floats). ``estimated_start`` (epoch
    seconds, cluster time) is the one estimate of the job's start: any time the message or
    remedy names is this value (or the deadline it comes from); when it is None,
    ``details["no_estimate_reason"]`` says why.
    """

    code: str
    message: str
    details: dict[str, Any]
    remedy: str
    estimated_start: float | None = None
    position: int | None = None

    def as_reason(self) -> dict[str, Any]:
        """The API's ``pending_reason`` object (plus remedy and position)."""
        return {
            "code": self.code,
            "message": self.message,
            "details": dict(self.details),
            "remedy": self.remedy,
            "estimated_start": self.estimated_start,
            "position": self.position,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """The engine's decisions for one cycle. ``now`` is the time it was made for;
    ``migrations``: jobs moved to make room for a gang (consolidation), apart from
    ``preemptions``; ``swaps``: starts within quota that turned running work of the
    same queue or line into borrowed work (nothing stops); ``marks``: running jobs whose
    borrowed flag the accounting corrects (apart from the swaps' own)."""

    starts: tuple[Start, ...]
    preemptions: tuple[Preemption, ...]
    reservations: tuple[Reservation, ...]
    verdicts: dict[int, Verdict]
    now: float | None = None
    migrations: tuple[Migration, ...] = ()
    swaps: tuple[Swap, ...] = ()
    marks: tuple[Mark, ...] = ()

    def decided_ids(self) -> set[int]:
        """Running jobs the plan stops, moves or displaces."""
        out = {p.victim_id for p in self.preemptions}
        out.update(m.job_id for m in self.migrations)
        out.update(rid for sw in self.swaps for rid in sw.displaced)
        return out

    def counts_by_code(self) -> dict[str, int]:
        counts = dict.fromkeys(VERDICT_CODES, 0)
        for verdict in self.verdicts.values():
            counts[verdict.code] = counts.get(verdict.code, 0) + 1
        return counts
