"""Seeded demo history: a made-up past of metrics samples, so a fresh demo draws every
dashboard window.

A new demo cluster has no past: the rollup writes its first sample when the loop starts,
so the dashboard's 24 h and 7 d windows would stay nearly empty for hours of wall time.
``seed_demo`` therefore writes ``HISTORY`` of samples ending at the cluster's "now", one
every ``EVERY``, **flagged** ``MetricSample.seeded``: they are invented, not measured. The
dashboard draws them apart (a dotted grey series named "seeded demo history", counted in
the caption); they carry no per-line or per-queue figures, so no eviction ratio, borrowed
figure or alert is ever computed from them; the rollup's retention removes them like any
sample after 14 days of cluster time.

Only a fresh demo gets them (no sample at all yet), only when the demo workload is on (a
quiet cluster gets no invented busy past), and never with ``seed_demo --no-history``.

The shape follows what the live demo measures once it is busy (10,000 GPUs, 60x, the
demo workload): utilization of healthy GPUs around 86%, following a day (busier in the
afternoon, quieter at night and at the weekend), 1-2% of the nodes out of the pool,
a few hundred fragmented free GPUs and a few thousand jobs waiting, moving with it; a
seeded random generator (``seed_demo --seed``) makes it reproducible. ``history_points``
is pure (no Django).
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta
from typing import NamedTuple

HISTORY = timedelta(days=7)
EVERY = timedelta(minutes=5)
GPUS_PER_NODE = 8


class HistoryPoint(NamedTuple):
    """One seeded sample's cluster-wide numbers (``utilization`` = allocated / healthy)."""

    at: datetime
    gpus_total: int
    gpus_healthy: int
    gpus_allocated: int
    utilization: float
    fragmentation_gpus: int
    pending_jobs: int


def history_points(
    end: datetime, gpus_total: int, *, seed: int = 0, span: timedelta = HISTORY,
    every: timedelta = EVERY,
) -> list[HistoryPoint]:  # fmt: skip
    """Samples every ``every`` over ``span`` ending at ``end`` (the last one at ``end``),
    oldest first."""
    rng = random.Random(f"demo-history-{seed}")
    steps = int(span / every)
    nodes = max(1, gpus_total // GPUS_PER_NODE)
    out_nodes = nodes // 100
    noise = 0.0
    points = []
    for i in range(steps + 1):
        at = end - every * (steps - i)
        hour = at.hour + at.minute / 60
        weekend = at.weekday() >= 5
        # a day's swing (peak mid-afternoon UTC), a quieter weekend, and slow noise
        noise = 0.9 * noise + rng.gauss(0, 0.006)
        share = 0.86 + 0.06 * math.sin(2 * math.pi * (hour - 9) / 24) - 0.05 * weekend + noise
        share = min(0.98, max(0.30, share))
        # nodes leave and rejoin the pool one at a time (at most 2.5% of them out)
        out_nodes = min(max(0, out_nodes + rng.choice((-1, 0, 0, 0, 1))), nodes // 40)
        healthy = max(0, gpus_total - out_nodes * GPUS_PER_NODE)
        allocated = round(healthy * share)
        # as the live demo runs: a few hundred stranded GPUs and thousands of jobs waiting
        # per 10,000 GPUs, more of both when it is busier
        frag = round(healthy * (0.045 + 0.08 * (1 - share)) * (1 + rng.gauss(0, 0.15)))
        frag = min(max(0, frag), healthy - allocated)
        pending = max(0, round(gpus_total * (0.2 + (share - 0.8)) * (1 + rng.gauss(0, 0.05))))
        points.append(
            HistoryPoint(
                at=at,
                gpus_total=gpus_total,
                gpus_healthy=healthy,
                gpus_allocated=allocated,
                utilization=round(allocated / healthy, 4) if healthy else 0.0,
                fragmentation_gpus=frag,
                pending_jobs=pending,
            )
        )
    return points


def seed_history(end: datetime, gpus_total: int, *, seed: int = 0) -> int:
    """Write the seeded history ending at ``end`` when no sample exists yet; returns how
    many samples were written (0: the demo already has samples, measured or seeded)."""
    from monitoring.models import MetricSample

    if MetricSample.objects.exists():
        return 0
    rows = [
        MetricSample(**p._asdict(), pending_by_reason={}, per_line={}, per_queue={}, seeded=True)
        for p in history_points(end, gpus_total, seed=seed)
    ]
    MetricSample.objects.bulk_create(rows, batch_size=1000)
    return len(rows)
