"""What a quota request is advised from history (Q6, R4): pure, no Django, no clock.

- **Recent use** (``summarize_use``, ``compare_use``): a scope's sampled use and pending
  demand over a window, and sentences comparing it with a proposed quota and guarantee.
- **Guarantee suggestions** (``suggest_guarantee``, ``floor_for_target``): replaying the
  window's evictions against a guarantee (``replay_guarantee``) to find the smallest one
  that would have kept the queue's eviction ratio under its target, with the ratio
  computed as every other surface computes it (``window_eviction_ratio``).

The contracts, positions and impacts these advise on are ``quotas.ledger``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from monitoring.metrics import window_eviction_ratio
from scheduling.engine.explain import count


class _Plain:
    """A dataclass whose ``as_dict()`` is every field by name, in order."""

    __slots__ = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


# ---------------------------------------------------------------------------
# Recent use


@dataclass(frozen=True, slots=True)
class UseSummary(_Plain):
    samples: int
    peak_used: int
    avg_used: float
    peak_pending: int
    avg_pending: float
    since: float | None


def summarize_use(points: Sequence[tuple[float, int, int]]) -> UseSummary:
    """``points`` are evenly spaced samples ``(time, used GPUs, pending GPUs)``."""
    if not points:
        return UseSummary(0, 0, 0.0, 0, 0.0, None)
    used = [p[1] for p in points]
    pending = [p[2] for p in points]
    return UseSummary(
        samples=len(points),
        peak_used=max(used),
        avg_used=round(sum(used) / len(used), 1),
        peak_pending=max(pending),
        avg_pending=round(sum(pending) / len(pending), 1),
        since=min(p[0] for p in points),
    )


def compare_use(use: UseSummary, quota_gpus: int | None, guarantee_gpus: int) -> list[str]:
    """Sentences comparing recent use with a proposed contract."""
    if not use.samples:
        return ["No usage history yet: the comparison with recent use is not available."]
    out = [
        f"Recent use: peak {count(use.peak_used, 'GPU')}, average {use.avg_used:,}; pending "
        f"demand peak {count(use.peak_pending, 'GPU')}, average {use.avg_pending:,}."
    ]
    if quota_gpus is not None:
        wanted = use.peak_used + use.peak_pending
        if quota_gpus > wanted:
            out.append(
                f"The quota of {quota_gpus:,} is above the recent peak of use plus pending "
                f"demand ({wanted:,}): {quota_gpus - wanted:,} GPUs would have gone unused."
            )
        elif quota_gpus < use.peak_used:
            out.append(
                f"The quota of {quota_gpus:,} is below the recent peak of use ({use.peak_used:,})."
            )
    if guarantee_gpus > use.peak_used:
        out.append(
            f"The guarantee of {guarantee_gpus:,} is above the recent peak of use "
            f"({use.peak_used:,}): part of it would protect nothing."
        )
    return out


# ---------------------------------------------------------------------------
# Eviction ratio and guarantee suggestions (R4)


@dataclass(frozen=True, slots=True)
class EvictionEvent:
    """One eviction: the victim's GPUs and GPU time, its queue's use at that moment, and
    when it happened (``at``, seconds; evictions of one instant are one plan; ``None``: a
    plan of its own)."""

    gpus: int
    gpu_seconds: float
    queue_used: int
    at: float | None = None


def guarantee_needed(event: EvictionEvent) -> int:
    """The smallest guarantee that would have forbidden this eviction, were it alone in
    its plan (``replay_guarantee`` of one event).

    A queue may lose at most ``active - guarantee`` GPUs to preemption, so a victim of
    ``g`` GPUs out of ``active`` is protected once ``guarantee > active - g``.
    """
    active = max(event.queue_used, event.gpus)
    return active - event.gpus + 1


def _plans(events: Sequence[EvictionEvent]) -> list[list[EvictionEvent]]:
    """Evictions grouped by plan (same ``at``); an event without ``at`` is a plan alone."""
    groups: dict[object, list[EvictionEvent]] = {}
    for i, e in enumerate(events):
        groups.setdefault(("at", e.at) if e.at is not None else ("alone", i), []).append(e)
    return list(groups.values())


def _plan_active(plan: Sequence[EvictionEvent]) -> int:
    """The queue's use when the plan ran: sampled, and at least what the plan evicted."""
    return max(max(e.queue_used for e in plan), sum(e.gpus for e in plan))


def _kept_first(plan: Sequence[EvictionEvent]) -> list[EvictionEvent]:
    """The order in which a replay lets a plan's victims go: the smallest first (the most
    evictions that could still have happened), the longest runs first among equals."""
    return sorted(plan, key=lambda e: (e.gpus, -e.gpu_seconds))


def replay_guarantee(events: Sequence[EvictionEvent], guarantee: int) -> list[EvictionEvent]:
    """The evictions of the window that a guarantee of ``guarantee`` GPUs would have
    prevented, replayed plan by plan.

    In each plan the queue could lose at most ``active - guarantee`` GPUs (its use then,
    minus the guarantee). The replay lets the plan's victims go, smallest first, while they
    fit in that budget and counts the rest as prevented: a lower bound (the scheduler
    would have looked for victims elsewhere).
    """
    prevented: list[EvictionEvent] = []
    for plan in _plans(events):
        budget = max(0, _plan_active(plan) - guarantee)
        lost = 0
        for e in _kept_first(plan):
            if lost + e.gpus <= budget:
                lost += e.gpus
            else:
                prevented.append(e)
    return prevented


def _replay_thresholds(events: Sequence[EvictionEvent]) -> list[int]:
    """Every guarantee at which the replay's outcome changes, ascending: in a plan whose
    victims (smallest first) add up to ``s_1 <= s_2 <= ...``, one more is prevented once
    the budget ``active - guarantee`` drops below ``s_j``, i.e. at ``active - s_j + 1``."""
    out: set[int] = set()
    for plan in _plans(events):
        active, lost = _plan_active(plan), 0
        for e in _kept_first(plan):
            lost += e.gpus
            out.add(max(1, active - lost + 1))
    return sorted(out)


@dataclass(frozen=True, slots=True)
class Suggestion(_Plain):
    queue: str
    eviction_ratio: float
    target_ratio: float
    evictions: int
    evicted_gpu_hours: float
    current_guarantee: int
    suggested_guarantee: int
    prevented_evictions: int
    prevented_share: float
    ratio_after: float
    capped_at: int | None
    # The guaranteed floor that would have kept the queue under its target (#19): the
    # smallest guarantee whose replay brings the ratio to the target or below; None when
    # none within the cap does (the suggestion above is then not enough either).
    floor_for_target: int | None = None
    ratio_at_floor: float | None = None

    def message(self) -> str:
        text = (
            f"Queue {self.queue}: {count(self.evictions, 'eviction')} cost "
            f"{self.evicted_gpu_hours:,.1f} GPU-hours, an eviction ratio of "
            f"{self.eviction_ratio:.1%} (target {self.target_ratio:.1%}). A guarantee of "
            f"{self.suggested_guarantee:,} GPUs (now {self.current_guarantee:,}) would have "
            f"prevented {self.prevented_evictions:,} of them ({self.prevented_share:.0%} of the "
            f"lost GPU time; the window's evictions replayed against it), bringing the ratio "
            f"to about {self.ratio_after:.1%}."
        )
        if self.capped_at is not None:
            text += f" It is capped at {self.capped_at:,} GPUs, the most its quota allows."
        if self.floor_for_target is None:
            text += (
                f" No guaranteed floor within its quota would have kept it under its "
                f"{self.target_ratio:.1%} target."
            )
        elif self.floor_for_target != self.suggested_guarantee or self.ratio_after > (
            self.target_ratio
        ):
            text += (
                f" A guaranteed floor of {self.floor_for_target:,} GPUs would have kept it "
                f"under its {self.target_ratio:.1%} target (about {self.ratio_at_floor:.1%})."
            )
        return text


def suggest_guarantee(
    queue: str,
    events: Sequence[EvictionEvent],
    delivered_gpu_s: float,
    current_guarantee: int,
    cap: int | None,
    target_ratio: float,
    coverage: float = 0.8,
    min_events: int = 3,
    evicted_gpu_s: float | None = None,
) -> Suggestion | None:
    """The smallest guarantee whose replay (``replay_guarantee``) prevents ``coverage`` of
    the window's evicted GPU time, when the queue's eviction ratio over the window is above
    ``target_ratio``; capped by ``cap``. None when the ratio is within target, when the
    guarantee would not rise, or when the replay prevents nothing.

    ``evicted_gpu_s`` (default: the events' sum) and ``delivered_gpu_s`` are the window's
    figures, so the ratio is the one the other surfaces show (``window_eviction_ratio``);
    ``prevented_evictions`` and ``ratio_after`` are what the replay gives.
    """
    evicted = sum(e.gpu_seconds for e in events) if evicted_gpu_s is None else evicted_gpu_s
    ratio = window_eviction_ratio(evicted, delivered_gpu_s)
    if len(events) < min_events or evicted <= 0 or ratio is None or ratio <= target_ratio:
        return None
    thresholds = _replay_thresholds(events)
    suggested = thresholds[-1]
    for g in thresholds:
        if sum(e.gpu_seconds for e in replay_guarantee(events, g)) >= coverage * evicted:
            suggested = g
            break
    capped_at = None
    if cap is not None and suggested > cap:
        suggested, capped_at = cap, cap
    if suggested <= current_guarantee:
        return None
    prevented = replay_guarantee(events, suggested)
    if not prevented:  # capped below what any eviction needed: it would change nothing
        return None
    saved = sum(e.gpu_seconds for e in prevented)
    after = window_eviction_ratio(max(0.0, evicted - saved), delivered_gpu_s)
    floor, at_floor = floor_for_target(events, evicted, delivered_gpu_s, target_ratio, cap)
    return Suggestion(
        queue=queue,
        eviction_ratio=ratio,
        target_ratio=target_ratio,
        evictions=len(events),
        evicted_gpu_hours=round(evicted / 3600.0, 2),
        current_guarantee=current_guarantee,
        suggested_guarantee=suggested,
        prevented_evictions=len(prevented),
        prevented_share=round(min(1.0, saved / evicted), 4),
        ratio_after=after if after is not None else 0.0,
        capped_at=capped_at,
        floor_for_target=floor,
        ratio_at_floor=at_floor,
    )


def floor_for_target(
    events: Sequence[EvictionEvent],
    evicted_gpu_s: float,
    delivered_gpu_s: float,
    target_ratio: float,
    cap: int | None,
) -> tuple[int | None, float | None]:
    """The smallest guarantee (at most ``cap``) whose replay (``replay_guarantee``) brings
    the window's eviction ratio to ``target_ratio`` or below, and that ratio; ``(None,
    None)`` when no such guarantee exists. The replay only changes at its thresholds, so
    they are the only candidates."""
    for g in _replay_thresholds(events):
        if cap is not None and g > cap:
            break
        saved = sum(e.gpu_seconds for e in replay_guarantee(events, g))
        ratio = window_eviction_ratio(max(0.0, evicted_gpu_s - saved), delivered_gpu_s)
        if ratio is not None and ratio <= target_ratio:
            return g, ratio
    return None, None
