"""What a replay runs: the trace's jobs in a window, and the capacity layout.

Traces (``replay.traces.readers``): ``philly``, ``itp``, ``alibaba`` or a path to
a CSV (optionally ``.xz``) in one of those three formats, recognised by its header.

Windows (``--window START:END``, half-open on the submit time, either side may be
empty): Philly takes ISO dates or datetimes (default ``2017-10-01:2017-12-01``);
ITP and Alibaba take trace seconds with an optional unit (``s``, ``m``, ``h``,
``d``), e.g. ``0:7d``. Submit times are shifted so the window starts at 0. The
*submission window* length ``W`` (the denominator of utilization) is ``END -
START``; with no END it runs to the last submit.

Layouts:

* **isolated** (default): each trace queue is its own pool of 8-GPU nodes. Philly
  uses the 11 VC sizes of ``philly_vc_capacity.csv``. Traces without published
  sizes (ITP, Alibaba) get, per queue, ``max(largest job, average demand /
  ISOLATED_TARGET_LOAD)`` rounded up to whole nodes, where the average demand is
  the queue's GPU-seconds submitted in the window divided by ``W``.
* **shared** (``--pool-gpus N``): one pool of ``N`` GPUs (``N/8`` nodes, racks of 32
  nodes, blocks of 8 racks: ``simcore.build_demo_cluster(uniform=True)``). Each
  trace queue is a business line whose quota is the capacity it has when isolated
  (Philly: its VC; others: the rule above), so ``N`` = the sum of the isolated sizes
  compares sharing with isolation, and a smaller ``N`` oversubscribes the quotas.
  Guarantees equal the quotas, scaled down proportionally (rounded down) when the
  quotas add up to more than ``N``: only borrowed work, and work above a guarantee,
  can ever be preempted.

Jobs that could never start (more GPUs than their pool, or than their queue's
quota in a shared pool) are counted as ``rejected`` and not replayed.
"""

from __future__ import annotations

import lzma
import math
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from replay.traces.readers import (
    PHILLY_CAPACITY_PATH,
    TraceJob,
    read_alibaba,
    read_itp,
    read_philly,
    read_philly_capacities,
)

NODE_GPUS = 8
ISOLATED_TARGET_LOAD = 0.7
PHILLY_DEFAULT_WINDOW = ("2017-10-01", "2017-12-01")
TRACE_NAMES = ("philly", "itp", "alibaba")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class Workload:
    """The jobs to replay (submit times from 0 = window start), sorted by submit time."""

    trace: str  # philly | itp | alibaba
    source: str  # the TRACE argument as given
    jobs: tuple[TraceJob, ...]
    window_s: float
    window_label: str
    queues: tuple[str, ...]  # trace queues (VCs, clusters, QoS classes), in a stable order
    published_capacity: dict[str, int] = field(default_factory=dict)  # Philly VC sizes


@dataclass(frozen=True)
class Layout:
    """Pools of 8-GPU nodes and each trace queue's capacity and contract."""

    kind: str  # isolated | shared
    pools: dict[str, int]  # pool name -> GPUs
    pool_of: dict[str, str]  # trace queue -> pool
    capacity: dict[str, int]  # trace queue -> GPUs it is entitled to (pool size or quota)
    quota: dict[str, int | None]  # trace queue -> line quota (None: no quota)
    guarantee: dict[str, int]
    rule: str  # how the numbers were chosen, for the report

    @property
    def total_gpus(self) -> int:
        return sum(self.pools.values())


def nodes_for(gpus: float) -> int:
    return max(1, math.ceil(gpus / NODE_GPUS - 1e-9))


# --------------------------------------------------------------------------- windows


def _parse_when(text: str) -> datetime:
    return datetime.fromisoformat(text.strip())


def _split_window(text: str, parse) -> tuple[str, str]:
    """Split ``START:END`` at the colon where both sides parse (datetimes hold colons)."""
    positions = [m.start() for m in re.finditer(":", text)]
    for pos in positions:
        left, right = text[:pos], text[pos + 1 :]
        try:
            if left:
                parse(left)
            if right:
                parse(right)
        except ValueError:
            continue
        return left, right
    raise ValueError(f"window {text!r}: expected START:END")


def parse_seconds(text: str) -> float:
    """``"90"`` -> 90.0, ``"1.5h"`` -> 5400.0, ``"7d"`` -> 604800.0."""
    t = text.strip().lower()
    unit = 1.0
    if t and t[-1] in _UNITS:
        unit = _UNITS[t[-1]]
        t = t[:-1]
    value = float(t) * unit
    if not math.isfinite(value):
        raise ValueError(f"not a finite time: {text!r}")
    return value


def philly_window(text: str | None) -> tuple[datetime, datetime]:
    start, end = PHILLY_DEFAULT_WINDOW
    if text:
        left, right = _split_window(text, _parse_when)
        start, end = left or start, right or end
    s, e = _parse_when(start), _parse_when(end)
    if e <= s:
        raise ValueError(f"window {text!r}: END must be after START")
    return s, e


def seconds_window(text: str | None) -> tuple[float | None, float | None]:
    if not text:
        return None, None
    left, right = _split_window(text, parse_seconds)
    s = parse_seconds(left) if left else None
    e = parse_seconds(right) if right else None
    if s is not None and e is not None and e <= s:
        raise ValueError(f"window {text!r}: END must be after START")
    return s, e


def _label(d: datetime) -> str:
    return d.date().isoformat() if d.time() == datetime.min.time() else d.isoformat()


def _fmt_s(x: float | None) -> str:
    if x is None:
        return ""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if x and x % size == 0:
            return f"{x / size:g}{unit}"
    return f"{x:g}"


# --------------------------------------------------------------------------- traces


def detect_format(path: str | Path) -> str:
    """``philly``, ``itp`` or ``alibaba`` from a CSV header."""
    p = Path(path)
    opener = lzma.open if p.suffix == ".xz" else open
    with opener(p, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        header = {c.strip() for c in f.readline().split(",")}
    if {"timestamp", "duration", "num_gpus", "cluster"} <= header:
        return "philly"
    if {"cluster", "job_id", "submission_time", "duration", "num_gpu"} <= header:
        return "itp"
    if {"name", "num_gpu", "gpu_milli", "qos", "creation_time", "scheduled_time"} <= header:
        return "alibaba"
    raise ValueError(f"{p}: unknown trace format (header {sorted(header)})")


def load_workload(
    trace: str,
    window: str | None = None,
    seed: int = 0,
    capacity_path: str | Path | None = None,
) -> Workload:
    """Read ``trace`` (a name or a path) in ``window`` with the seeded attribute mapping."""
    path: str | None = None
    kind = trace
    if trace not in TRACE_NAMES:
        if not Path(trace).exists():
            raise ValueError(f"unknown trace {trace!r}: expected philly, itp, alibaba or a path")
        path = trace
        kind = detect_format(trace)

    published: dict[str, int] = {}
    if kind == "philly":
        start, end = philly_window(window)
        jobs = read_philly(path, start=start, end=end, seed=seed)
        published = read_philly_capacities(capacity_path or PHILLY_CAPACITY_PATH)
        window_s = (end - start).total_seconds()
        label = f"{_label(start)}:{_label(end)}"
        queues = tuple(published)
    else:
        s, e = seconds_window(window)
        if kind == "itp":
            jobs = read_itp(path, start_s=s, end_s=e, seed=seed)
            if s is None:
                s = 0.0
        else:
            raw = read_alibaba(path, seed=seed)
            origin = s if s is not None else (raw[0].submit_s if raw else 0.0)
            jobs = [
                _shift(j, origin)
                for j in raw
                if (s is None or j.submit_s >= s) and (e is None or j.submit_s < e)
            ]
            s = origin
        window_s = (e - s) if e is not None else max((j.submit_s for j in jobs), default=0.0)
        window_s = max(window_s, 1.0)
        label = f"{_fmt_s(s)}:{_fmt_s(e)}"
        queues = tuple(sorted({j.queue for j in jobs}))
    if not jobs:
        raise ValueError(f"no jobs of {trace!r} in window {label!r}")
    return Workload(
        trace=kind,
        source=trace,
        jobs=tuple(jobs),
        window_s=float(window_s),
        window_label=label,
        queues=queues,
        published_capacity=published,
    )


def _shift(job: TraceJob, origin: float) -> TraceJob:
    return replace(job, submit_s=job.submit_s - origin)


# --------------------------------------------------------------------------- layouts


def demand_gpus(workload: Workload) -> dict[str, float]:
    """Average GPUs each queue asks for over the submission window."""
    out = dict.fromkeys(workload.queues, 0.0)
    for j in workload.jobs:
        out[j.queue] = out.get(j.queue, 0.0) + j.gpus * j.duration_s
    return {q: v / workload.window_s for q, v in out.items()}


def largest_job(workload: Workload) -> dict[str, int]:
    out = dict.fromkeys(workload.queues, 1)
    for j in workload.jobs:
        if j.gpus > out.get(j.queue, 0):
            out[j.queue] = j.gpus
    return out


def build_layout(workload: Workload, pool_gpus: int | None = None) -> Layout:
    queues = workload.queues
    demand = demand_gpus(workload)
    biggest = largest_job(workload)
    if workload.published_capacity:
        entitled = {q: workload.published_capacity[q] for q in queues}
        source = "philly_vc_capacity.csv"
    else:
        entitled = {
            q: NODE_GPUS * max(nodes_for(biggest[q]), nodes_for(demand[q] / ISOLATED_TARGET_LOAD))
            for q in queues
        }
        source = f"max(largest job, average demand / {ISOLATED_TARGET_LOAD}) in whole 8-GPU nodes"
    if pool_gpus is None:
        return Layout(
            kind="isolated",
            pools=dict(entitled),
            pool_of={q: q for q in queues},
            capacity=dict(entitled),
            quota=dict.fromkeys(queues),
            guarantee=dict.fromkeys(queues, 0),
            rule=f"one isolated pool per queue, sized by {source}",
        )
    if pool_gpus < NODE_GPUS or pool_gpus % NODE_GPUS:
        raise ValueError(f"--pool-gpus must be a positive multiple of {NODE_GPUS}")
    # Every queue's quota is the capacity it has when isolated (Philly: its VC).
    quota = dict(entitled)
    qsum = sum(quota.values())
    if qsum <= pool_gpus:
        guarantee = dict(quota)
    else:
        guarantee = {q: quota[q] * pool_gpus // qsum for q in queues}
    return Layout(
        kind="shared",
        pools={"shared": pool_gpus},
        pool_of=dict.fromkeys(queues, "shared"),
        capacity=dict(quota),
        quota=dict(quota),
        guarantee=guarantee,
        rule=(
            f"one shared pool of {pool_gpus} GPUs; quota = the queue's isolated capacity "
            f"({source}); guarantee = quota"
            + ("" if qsum <= pool_gpus else f" scaled by {pool_gpus}/{qsum}")
        ),
    )


__all__ = [
    "ISOLATED_TARGET_LOAD",
    "Layout",
    "NODE_GPUS",
    "Workload",
    "build_layout",
    "demand_gpus",
    "detect_format",
    "load_workload",
    "parse_seconds",
    "philly_window",
    "seconds_window",
]
