"""Percentiles the benchmarks report: one nearest-rank definition for every command.

Pure standard library (``python -m bench.engine`` and ``bench.simcore`` use it
without Django).
"""

from __future__ import annotations

import math


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    # q * n first: exact for a whole q, where q / 100 * n is not (7 / 100 * 100 > 7).
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered) / 100)))
    return ordered[rank - 1]


def latency_ms(values_ms: list[float]) -> dict[str, float]:
    """``p50_ms``, ``p95_ms``, ``p99_ms`` and ``max_ms`` of latencies in milliseconds."""
    return {
        "p50_ms": round(percentile(values_ms, 50), 1),
        "p95_ms": round(percentile(values_ms, 95), 1),
        "p99_ms": round(percentile(values_ms, 99), 1),
        "max_ms": round(max(values_ms, default=0.0), 1),
    }
