"""Seeded demo workload for the live (simulated) cluster, derived from public traces.

The generator never reads a trace at run time. It samples from a small table of
empirical distributions, :data:`replay.traces.profile_table.WORKLOAD_PROFILE`,
which :func:`derive_workload_profile` computed once from the vendored traces:

* the Philly replay window (jobs submitted 2017-10-01 .. 2017-11-30 on the 11 VCs)
  and all ITP jobs, pooled job by job;
* tiers filled in by the seeded mapping of :mod:`replay.traces.readers` (seed 0);
* per tier: the share of jobs (``tier_mix``), the GPU-size mix (``size_mix``; sizes
  above 8 rounded up to whole 8-GPU nodes, so Philly's 12 becomes 16) and duration
  quantiles (``duration_quantiles``, ``[quantile, seconds]`` pairs from 0 to 1).

Regenerate the table with ``python -m replay.traces.workload`` (it rewrites
``profile_table.py``); a test checks the shipped table equals what derive computes.

Sampling, for job number ``i`` of the stream (one ``random.Random`` per generator
for arrivals, another for job attributes, both seeded from ``seed``; every job
consumes the same number of draws, so the job sequence does not depend on how
time is sliced into ``next_jobs`` calls):

1. **tier** from ``tier_mix``, renormalised over the tiers of the queues given;
2. **queue** among the queues of that tier, with skewed (Zipf, exponent
   ``queue_skew``) weights in a seed-dependent order, so a few queues get most of the
   demand and run over their quota;
3. **gpus** from the tier's ``size_mix``; multi-node sizes (> 8) are multiplied by
   ``multi_node_scale`` (default 4, so that they keep about the share of the cluster
   they had in Philly: 10,000 / 2,816 GPUs = 3.6) and capped at ``max_gpus`` (256):
   16 -> 64, 32 -> 128, 64 -> 256. They stay whole 8-GPU nodes
   (``gpus_per_node=8``, ``rdma=True``);
4. **duration** by inverse CDF, log-linear between the tier's quantiles, clamped to
   ``[min_duration_s, max_duration_s]`` (default 1 min .. 7 days);
5. **model**, **preemptible** as in the readers' mapping; ``gpu_memory_gb`` from the
   model; checkpoint every 30 min for >= 64 GPUs, 60 min for core or multi-node
   jobs, else 120 min (R5: 1 h for pre-training, 2 h for small runs).

Arrivals are Poisson with rate ``load * cluster_gpus / E[gpus * duration]``, the
expectation taken under this same sampling: on average the offered work is
``load`` times the cluster (default 1.05), so a 10,000-GPU cluster stays busy and
the skewed queues pile up. :meth:`WorkloadGenerator.backlog` draws, from the same job
stream, enough jobs to fill an empty cluster at once (so the demo is busy within a
minute of starting). After a gap between calls (``now_s`` beyond the end of
the previous window) the missed arrivals are dropped, not replayed in one burst.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

from replay.traces.readers import (
    GPUS_PER_NODE,
    MODEL_CATALOG,
    TIERS,
    choose_model,
    is_preemptible,
    read_itp,
    read_philly,
)

#: Quantiles stored per tier (0 = min, 1 = max).
QUANTILES = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
PROB_DIGITS = 4


@dataclass(frozen=True, slots=True)
class GeneratedJob:
    name: str
    queue: str
    tier: str
    gpus: int
    gpus_per_node: int | None
    duration_s: float  # true run time, for the simulator only
    rdma: bool
    model_name: str
    preemptible: bool
    gpu_memory_gb: int | None
    checkpoint_interval_minutes: int


# --------------------------------------------------------------------------- profile


def whole_nodes(gpus: int) -> int:
    """Sizes above one node rounded up to whole 8-GPU nodes."""
    if gpus <= GPUS_PER_NODE:
        return gpus
    return -(-gpus // GPUS_PER_NODE) * GPUS_PER_NODE


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def derive_workload_profile(
    philly_path: str | Path | None = None, itp_path: str | Path | None = None, seed: int = 0
) -> dict[str, Any]:
    """Compute the empirical profile from the vendored Philly window and ITP traces."""
    jobs = read_philly(philly_path, seed=seed) + read_itp(itp_path, seed=seed)
    by_tier: dict[str, list] = {t: [] for t in TIERS}
    for j in jobs:
        by_tier[j.tier].append(j)
    profile: dict[str, Any] = {
        "source": (
            "philly_pollux_jobs.csv.xz (submits 2017-10-01..2017-11-30, 11 VCs) + "
            "elasticflow_itp_jobs.csv.xz (all), tiers by the readers' mapping, "
            f"seed {seed}"
        ),
        "jobs": len(jobs),
        "tier_mix": {t: round(len(by_tier[t]) / len(jobs), PROB_DIGITS) for t in TIERS},
        "tiers": {},
    }
    for t in TIERS:
        group = by_tier[t]
        sizes = Counter(whole_nodes(j.gpus) for j in group)
        durations = sorted(j.duration_s for j in group)
        profile["tiers"][t] = {
            "jobs": len(group),
            "size_mix": {
                str(g): round(n / len(group), PROB_DIGITS) for g, n in sorted(sizes.items())
            },
            "duration_quantiles": [[q, round(_quantile(durations, q))] for q in QUANTILES],
        }
    return profile


def render_profile_module(profile: dict[str, Any]) -> str:
    import pprint

    body = pprint.pformat(profile, width=88, sort_dicts=False)
    return (
        '"""Empirical demo-workload profile. GENERATED by\n'
        "``python -m replay.traces.workload`` from the vendored traces via\n"
        ":func:`replay.traces.workload.derive_workload_profile`; do not edit by hand.\n"
        '"""\n\n'
        f"WORKLOAD_PROFILE = {body}\n"
    )


def default_profile() -> dict[str, Any]:
    from replay.traces.profile_table import WORKLOAD_PROFILE

    return WORKLOAD_PROFILE


# --------------------------------------------------------------------------- sampling


class _DurationSampler:
    """Inverse CDF, log-linear between quantiles, values clamped to [lo, hi]."""

    def __init__(self, quantiles: list[list[float]], lo: float, hi: float):
        self.q = [float(q) for q, _ in quantiles]
        self.x = [min(max(float(x), lo), hi) for _, x in quantiles]

    def sample(self, u: float) -> float:
        i = min(max(bisect_left(self.q, u), 1), len(self.q) - 1)
        q0, q1, x0, x1 = self.q[i - 1], self.q[i], self.x[i - 1], self.x[i]
        f = (u - q0) / (q1 - q0) if q1 > q0 else 0.0
        return x0 * (x1 / x0) ** f

    def mean(self) -> float:
        total = 0.0
        for i in range(1, len(self.q)):
            x0, x1, w = self.x[i - 1], self.x[i], self.q[i] - self.q[i - 1]
            total += w * (x0 if x1 == x0 else (x1 - x0) / math.log(x1 / x0))
        return total


class WorkloadGenerator:
    """Seeded stream of demo jobs; see the module docstring for the rules."""

    def __init__(
        self,
        profile: dict[str, Any] | None = None,
        seed: int = 0,
        *,
        cluster_gpus: int = 10_000,
        load: float = 1.05,
        multi_node_scale: int = 4,
        max_gpus: int = 256,
        min_duration_s: float = 60.0,
        max_duration_s: float = 7 * 24 * 3600.0,
        queue_skew: float = 1.0,
    ):
        if load <= 0 or cluster_gpus <= 0 or min_duration_s <= 0:
            raise ValueError("load, cluster_gpus and min_duration_s must be positive")
        self.profile = profile if profile is not None else default_profile()
        self.seed = seed
        self.multi_node_scale = multi_node_scale
        self.max_gpus = max_gpus
        self.queue_skew = queue_skew
        self._arrivals = random.Random(f"workload:{seed}:arrivals")
        self._draws = random.Random(f"workload:{seed}:jobs")
        self._next_arrival: float | None = None
        self._index = 0
        self._queue_weight_cache: dict[tuple[str, ...], list[float]] = {}

        self.tier_mix = {t: float(self.profile["tier_mix"].get(t, 0.0)) for t in TIERS}
        self.size_mix: dict[str, list[tuple[int, float]]] = {}
        self._durations: dict[str, _DurationSampler] = {}
        for t in TIERS:
            spec = self.profile["tiers"][t]
            mix: dict[int, float] = {}
            for g, p in spec["size_mix"].items():
                size = self.scale_size(int(g))
                mix[size] = mix.get(size, 0.0) + float(p)
            total = sum(mix.values())
            self.size_mix[t] = [(g, p / total) for g, p in sorted(mix.items())]
            self._durations[t] = _DurationSampler(
                spec["duration_quantiles"], min_duration_s, max_duration_s
            )
        total = sum(self.tier_mix.values())
        work = sum(
            p / total * self.mean_gpus(t) * self._durations[t].mean()
            for t, p in self.tier_mix.items()
        )
        #: Mean GPU-seconds per job under this generator's sampling.
        self.mean_gpu_seconds = work
        #: Poisson arrival rate, jobs per second.
        self.rate_per_s = load * cluster_gpus / work

    # -- distributions --------------------------------------------------------
    def scale_size(self, gpus: int) -> int:
        gpus = whole_nodes(gpus)
        if gpus > GPUS_PER_NODE:
            gpus = min(gpus * self.multi_node_scale, self.max_gpus)
        return max(1, min(gpus, self.max_gpus))

    def mean_gpus(self, tier: str) -> float:
        return sum(g * p for g, p in self.size_mix[tier])

    def mean_duration_s(self, tier: str) -> float:
        return self._durations[tier].mean()

    def queue_weights(self, names: list[str]) -> list[float]:
        """Zipf weights of a tier's queues, ranked in a seed-dependent order."""
        key = tuple(names)
        weights = self._queue_weight_cache.get(key)
        if weights is None:
            order = sorted(
                names, key=lambda n: (random.Random(f"{self.seed}:queue:{n}").random(), n)
            )
            rank = {n: r for r, n in enumerate(order)}
            weights = [1.0 / (1 + rank[n]) ** self.queue_skew for n in names]
            self._queue_weight_cache[key] = weights
        return weights

    # -- jobs -----------------------------------------------------------------
    def _make_job(self, by_tier: dict[str, list[str]]) -> GeneratedJob:
        u_tier, u_queue, u_size, u_dur, u_model, u_pre = (self._draws.random() for _ in range(6))
        index = self._index
        self._index += 1

        tiers = [t for t in TIERS if by_tier.get(t)]
        weights = [self.tier_mix[t] for t in tiers]
        if sum(weights) <= 0:
            weights = [1.0] * len(tiers)
        tier = tiers[_pick(u_tier * sum(weights), weights)]

        names = by_tier[tier]
        qw = self.queue_weights(names)
        queue = names[_pick(u_queue * sum(qw), qw)]

        sizes = self.size_mix[tier]
        gpus = sizes[_pick(u_size, [p for _, p in sizes])][0]
        duration = round(self._durations[tier].sample(u_dur), 1)
        model = choose_model(gpus, u_model)
        memory = MODEL_CATALOG[model]
        if model == "llama-7b" and gpus >= GPUS_PER_NODE:
            memory = 80
        multi = gpus > GPUS_PER_NODE
        if gpus >= 64:
            ckpt = 30
        elif tier == "core" or multi:
            ckpt = 60
        else:
            ckpt = 120
        return GeneratedJob(
            name=f"{model}-{tier}-{self.seed}-{index:06d}",
            queue=queue,
            tier=tier,
            gpus=gpus,
            gpus_per_node=GPUS_PER_NODE if multi else None,
            duration_s=duration,
            rdma=multi,
            model_name=model,
            preemptible=is_preemptible(tier, u_pre),
            gpu_memory_gb=memory,
            checkpoint_interval_minutes=ckpt,
        )

    @staticmethod
    def _by_tier(queues: list[tuple[str, str]]) -> dict[str, list[str]]:
        if not queues:
            raise ValueError("need at least one (queue_name, tier)")
        by_tier: dict[str, list[str]] = {}
        for name, tier in queues:
            if tier not in TIERS:
                raise ValueError(f"unknown tier {tier!r} for queue {name!r}")
            by_tier.setdefault(tier, []).append(name)
        return by_tier

    def next_jobs(
        self, now_s: float, dt_s: float, queues: list[tuple[str, str]]
    ) -> list[GeneratedJob]:
        """Jobs arriving in ``[now_s, now_s + dt_s)``, in arrival order."""
        by_tier = self._by_tier(queues)
        if self._next_arrival is None or self._next_arrival < now_s:
            self._next_arrival = now_s + self._arrivals.expovariate(self.rate_per_s)
        end = now_s + dt_s
        jobs = []
        while self._next_arrival < end:
            jobs.append(self._make_job(by_tier))
            self._next_arrival += self._arrivals.expovariate(self.rate_per_s)
        return jobs

    def backlog(self, queues: list[tuple[str, str]], gpus: int) -> list[GeneratedJob]:
        """Jobs totalling at least ``gpus`` GPUs, to fill an empty demo cluster at once."""
        by_tier = self._by_tier(queues)
        jobs: list[GeneratedJob] = []
        total = 0
        while total < gpus:
            jobs.append(self._make_job(by_tier))
            total += jobs[-1].gpus
        return jobs


def _pick(u: float, weights: list[float]) -> int:
    """Index ``i`` with ``sum(weights[:i]) <= u < sum(weights[:i + 1])``."""
    cum = list(accumulate(weights))
    return min(bisect_right(cum, u), len(cum) - 1)


def main() -> None:
    path = Path(__file__).with_name("profile_table.py")
    path.write_text(render_profile_module(derive_workload_profile()))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
