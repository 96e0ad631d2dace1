"""Pure arithmetic of the cluster's health numbers (no Django): utilization,
fragmentation, eviction ratio (R4)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

WHOLE_NODE = 8
#: The eviction ratio above which a queue raises an alert (the rollup), once its window
#: holds at least ``EVICTION_ALERT_MIN_EVENTS`` evictions; the replay's
#: ``peak_window_eviction_ratio`` counts by the same rule.
EVICTION_ALERT_RATIO = 0.15
EVICTION_ALERT_MIN_EVENTS = 3


def utilization(allocated: int, healthy: int) -> float:
    """Allocated GPUs over healthy (schedulable) GPUs, 0..1."""
    return 0.0 if healthy <= 0 else min(1.0, allocated / healthy)


def fragmentation(free_per_node: Iterable[int], whole: int = WHOLE_NODE) -> int:
    """Free GPUs that an ``whole``-GPU job cannot use: free GPUs on nodes that are not fully free."""
    return sum(free for free in free_per_node if 0 < free < whole)


def delivered_gpu_seconds(samples: Sequence[tuple[float, int]], until: float) -> float:
    """Integrate a step series of (time, GPUs in use) up to ``until``."""
    total = 0.0
    for i, (t, used) in enumerate(samples):
        end = samples[i + 1][0] if i + 1 < len(samples) else until
        total += used * max(0.0, min(end, until) - t)
    return total


def eviction_ratio(evicted_gpu_seconds: float, delivered: float) -> float:
    """Evicted GPU time over delivered GPU time (0 when nothing was delivered)."""
    return 0.0 if delivered <= 0 else evicted_gpu_seconds / delivered


def window_eviction_ratio(evicted_gpu_seconds: float, delivered_gpu_seconds: float) -> float | None:
    """R4's eviction ratio of a window, the one every surface shows: evicted GPU time over
    delivered GPU time, rounded to 4 places; ``None`` ("no data yet") when the window holds
    neither. An evicted run was delivered too, so the ratio never exceeds 1 even when the
    usage series starts late."""
    if delivered_gpu_seconds <= 0 and evicted_gpu_seconds <= 0:
        return None
    return round(
        eviction_ratio(evicted_gpu_seconds, max(delivered_gpu_seconds, evicted_gpu_seconds)), 4
    )


def window_label(seconds: float) -> str:
    """``"last 72 h"`` (whole hours) or ``"last 90 min"``: how a window is named everywhere."""
    if seconds >= 3600 and not seconds % 3600:
        return f"last {int(seconds // 3600)} h"
    return f"last {round(seconds / 60)} min"


def ratio_text(ratio: float | None) -> str:
    """A ratio as a page prints it: ``"12.5%"``, or ``"no data yet"`` for ``None``."""
    return "no data yet" if ratio is None else f"{100 * ratio:.1f}%"
