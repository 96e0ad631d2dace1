"""Readers for the public GPU-cluster job traces vendored in ``data/traces/``.

Standard library only (``csv`` + ``lzma``), no Django: the trace replay and the
simulator core import this module in plain Python.

Every reader returns a list of :class:`TraceJob`, sorted by ``(submit_s, id)``.

Sources
-------
* **Philly** (Microsoft, 2017; ``philly_pollux_jobs.csv.xz``): one row per job with
  submit timestamp, run time, GPU count and virtual cluster (VC). The queue is the
  VC. The file has no job id, so ``id`` is ``"philly-NNNNN"``, the 0-based data row
  of the job in the file (stable whatever window is read). ``submit_s`` counts from
  the window start (``start`` at 00:00, local wall clock of the trace) or, with
  ``start=None``, from the first submit of the whole file (2017-09-04 10:30:41).
  The window is half-open on the submit time: ``start <= submit < end``.
* **ITP** (Microsoft, 2021; ``elasticflow_itp_jobs.csv.xz``): 10 clusters, no VC.
  The queue is the cluster name (``cluster01`` .. ``cluster10``); ``id`` is the
  trace's UUID. ``submit_s`` counts from ``start_s`` when given, else it is the
  trace's own relative submission time.
* **Alibaba OpenB** (2023): *not vendored* (no licence file upstream; see
  ``data/traces/README.md``). :func:`read_alibaba` reads a copy you fetched
  yourself. Only pods that hold whole GPUs (``num_gpu >= 1`` and
  ``gpu_milli == 1000``) and were scheduled are returned as training jobs;
  CPU-only pods, GPU-sharing pods (``num_gpu == 1`` and ``gpu_milli < 1000``,
  3,078 of 8,152 in the default file) and never-scheduled pods are skipped —
  :func:`summarize_alibaba` counts them. The queue is the QoS class (``LS``,
  ``BE``, ``Burstable``, ``Guaranteed``); ``submit_s`` is ``creation_time`` and
  ``duration_s`` is ``deletion_time - scheduled_time`` (censored at the end of
  collection for pods still running then).

Seeded mapping of the missing columns
-------------------------------------
None of the traces says which priority tier a job had, whether it needed RDMA,
which model it trained or whether it could be preempted. :func:`infer_attributes`
fills them in, deterministically from ``(seed, job id)``:

* Four uniforms ``u1..u4`` in [0, 1) are taken from the BLAKE2b digest of
  ``"{seed}:{job_id}"``. The same seed always gives the same mapping, in any
  process (no dependence on ``PYTHONHASHSEED``); another seed gives another one.
* **rdma** = ``gpus > 8`` (the job spans more than one 8-GPU node). Not random.
* **tier** is drawn with ``u1`` from a table indexed by size class and duration
  class (short < 1 h <= medium < 24 h <= long); probabilities are
  (urgent, core, finetune, experiment):

  ==============  =========================  =========================  =========================
  size class      short                      medium                     long
  ==============  =========================  =========================  =========================
  1 GPU           .02 / .03 / .15 / .80      .02 / .10 / .38 / .50      .02 / .20 / .38 / .40
  2-7 GPUs        .03 / .07 / .25 / .65      .03 / .22 / .45 / .30      .02 / .35 / .43 / .20
  8 GPUs (node)   .05 / .15 / .30 / .50      .05 / .40 / .40 / .15      .03 / .55 / .32 / .10
  > 8 (multi)     .08 / .42 / .25 / .25      .05 / .70 / .20 / .05      .05 / .70 / .20 / .05
  ==============  =========================  =========================  =========================

  So multi-node jobs are mostly ``core``, tiny short jobs mostly ``experiment``.
* **preemptible** (``u2``): ``experiment`` always; ``finetune`` with probability
  0.5; ``core`` 0.1; ``urgent`` never.
* **model_name** (``u3``): from :data:`MODEL_CATALOG`, with weights by size
  (see :data:`MODEL_WEIGHTS_BY_SIZE`): >= 64 GPUs mostly ``llama-70b``,
  multi-node mostly ``llama-7b``/``llama-13b``/``vit-h``, single nodes a mix,
  1 GPU mostly ``resnet50``/``bert-base``/``bert-large``.
* ``u4`` is unused (reserved, so a new rule does not reshuffle the others).

For Alibaba, ``BE`` (best-effort) pods are always preemptible; otherwise the same
rules apply.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import lzma
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import date, datetime
from pathlib import Path

log = logging.getLogger(__name__)

#: The repository's ``data/traces`` directory (never ``../shared``).
DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "traces"
PHILLY_PATH = DATA_DIR / "philly_pollux_jobs.csv.xz"
PHILLY_CAPACITY_PATH = DATA_DIR / "philly_vc_capacity.csv"
ITP_PATH = DATA_DIR / "elasticflow_itp_jobs.csv.xz"
#: Not vendored (licence unclear); place a copy here yourself if you may.
ALIBABA_PODS_PATH = DATA_DIR / "alibaba_openb_pod_list_default.csv"
ALIBABA_URL = (
    "https://github.com/alibaba/clusterdata/blob/50a91c7c74abe3b658188dc78ac1dd302970d40c/"
    "cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv"
)

TIERS = ("urgent", "core", "finetune", "experiment")
GPUS_PER_NODE = 8
SHORT_S = 3600.0
LONG_S = 24 * 3600.0

# (urgent, core, finetune, experiment) by size class then duration class.
TIER_TABLE: dict[str, dict[str, tuple[float, float, float, float]]] = {
    "single": {
        "short": (0.02, 0.03, 0.15, 0.80),
        "medium": (0.02, 0.10, 0.38, 0.50),
        "long": (0.02, 0.20, 0.38, 0.40),
    },
    "small": {
        "short": (0.03, 0.07, 0.25, 0.65),
        "medium": (0.03, 0.22, 0.45, 0.30),
        "long": (0.02, 0.35, 0.43, 0.20),
    },
    "node": {
        "short": (0.05, 0.15, 0.30, 0.50),
        "medium": (0.05, 0.40, 0.40, 0.15),
        "long": (0.03, 0.55, 0.32, 0.10),
    },
    "multi": {
        "short": (0.08, 0.42, 0.25, 0.25),
        "medium": (0.05, 0.70, 0.20, 0.05),
        "long": (0.05, 0.70, 0.20, 0.05),
    },
}

PREEMPTIBLE_PROBABILITY = {"urgent": 0.0, "core": 0.1, "finetune": 0.5, "experiment": 1.0}

#: Plausible models and the GPU memory (GB per GPU) each asks for; ``None`` means
#: it fits on any GPU of the cluster.
MODEL_CATALOG: dict[str, int | None] = {
    "llama-70b": 80,
    "llama-13b": 80,
    "llama-7b": 40,
    "vit-h": 80,
    "gpt2-xl": 40,
    "bert-large": 32,
    "t5-large": 32,
    "resnet50": None,
    "bert-base": None,
}

#: (minimum GPUs, ((model, weight), ...)); the first row whose minimum is <= gpus wins.
MODEL_WEIGHTS_BY_SIZE: tuple[tuple[int, tuple[tuple[str, float], ...]], ...] = (
    (64, (("llama-70b", 0.60), ("llama-13b", 0.25), ("vit-h", 0.15))),
    (16, (("llama-13b", 0.35), ("llama-7b", 0.35), ("vit-h", 0.20), ("gpt2-xl", 0.10))),
    (
        8,
        (
            ("llama-7b", 0.35),
            ("vit-h", 0.20),
            ("bert-large", 0.20),
            ("resnet50", 0.15),
            ("gpt2-xl", 0.10),
        ),
    ),
    (
        2,
        (
            ("bert-large", 0.30),
            ("resnet50", 0.30),
            ("llama-7b", 0.20),
            ("vit-h", 0.10),
            ("t5-large", 0.10),
        ),
    ),
    (
        1,
        (
            ("resnet50", 0.35),
            ("bert-base", 0.25),
            ("bert-large", 0.20),
            ("t5-large", 0.10),
            ("llama-7b", 0.10),
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a public trace, with the missing columns filled in."""

    id: str
    submit_s: float  # seconds from the trace's (or window's) start
    queue: str
    gpus: int
    duration_s: float  # true run time; a replay must hide it from the scheduler
    tier: str
    rdma: bool
    model_name: str | None
    preemptible: bool


# --------------------------------------------------------------------------- mapping

_FOUR_U32 = struct.Struct(">4I")
_U32 = 1.0 / 4294967296.0


def _uniforms(seed: int, job_id: str) -> tuple[float, float, float, float]:
    d = hashlib.blake2b(f"{seed}:{job_id}".encode(), digest_size=16).digest()
    a, b, c, e = _FOUR_U32.unpack(d)
    return a * _U32, b * _U32, c * _U32, e * _U32


def size_class(gpus: int) -> str:
    if gpus <= 1:
        return "single"
    if gpus < GPUS_PER_NODE:
        return "small"
    if gpus == GPUS_PER_NODE:
        return "node"
    return "multi"


def duration_class(duration_s: float) -> str:
    if duration_s < SHORT_S:
        return "short"
    if duration_s < LONG_S:
        return "medium"
    return "long"


def _pick(u: float, weights: Iterable[float]) -> int:
    acc = 0.0
    i = -1
    for i, w in enumerate(weights):
        acc += w
        if u < acc:
            return i
    return i  # rounding: the last bucket


def tier_probabilities(gpus: int, duration_s: float) -> tuple[float, float, float, float]:
    """(urgent, core, finetune, experiment) probabilities of the mapping."""
    return TIER_TABLE[size_class(gpus)][duration_class(duration_s)]


def choose_model(gpus: int, u: float) -> str:
    """Model for a job of ``gpus`` GPUs, given a uniform ``u`` in [0, 1)."""
    table = next(t for min_gpus, t in MODEL_WEIGHTS_BY_SIZE if gpus >= min_gpus)
    return table[_pick(u, (w for _, w in table))][0]


def is_preemptible(tier: str, u: float) -> bool:
    return u < PREEMPTIBLE_PROBABILITY[tier]


def infer_attributes(
    job_id: str, gpus: int, duration_s: float, seed: int = 0
) -> tuple[str, bool, str, bool]:
    """The seeded mapping: ``(tier, rdma, model_name, preemptible)`` for one job."""
    u1, u2, u3, _ = _uniforms(seed, job_id)
    tier = TIERS[_pick(u1, tier_probabilities(gpus, duration_s))]
    return tier, gpus > GPUS_PER_NODE, choose_model(gpus, u3), is_preemptible(tier, u2)


def _job(
    job_id: str, submit_s: float, queue: str, gpus: int, duration_s: float, seed: int
) -> TraceJob:
    tier, rdma, model, preemptible = infer_attributes(job_id, gpus, duration_s, seed)
    return TraceJob(job_id, submit_s, queue, gpus, duration_s, tier, rdma, model, preemptible)


# --------------------------------------------------------------------------- helpers


def _open_text(path: str | os.PathLike[str]) -> io.TextIOBase:
    p = Path(path)
    if p.suffix == ".xz":
        return lzma.open(p, "rt", encoding="utf-8", newline="")
    return open(p, encoding="utf-8", newline="")  # noqa: SIM115 - returned to a with


def _rows(path: str | os.PathLike[str]) -> tuple[list[str], list[list[str]]]:
    with _open_text(path) as f:
        reader = csv.reader(f)
        header = next(reader)
        return header, [r for r in reader if r]


def _as_datetime(value: str | date | datetime | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    return datetime.fromisoformat(value)


def _sorted(jobs: list[TraceJob]) -> list[TraceJob]:
    jobs.sort(key=lambda j: (j.submit_s, j.id))
    return jobs


# --------------------------------------------------------------------------- Philly


def read_philly_capacities(path: str | os.PathLike[str] | None = None) -> dict[str, int]:
    """GPUs per Philly VC for replay (``nodes * gpus_per_node``), in file order."""
    _, rows = _rows(path or PHILLY_CAPACITY_PATH)
    return {vc: int(nodes) * int(per_node) for vc, nodes, per_node in rows}


def read_philly(
    path: str | os.PathLike[str] | None = None,
    start: str | date | datetime | None = "2017-10-01",
    end: str | date | datetime | None = "2017-12-01",
    vcs: Iterable[str] | str | None = None,
    seed: int = 0,
) -> list[TraceJob]:
    """Philly jobs submitted in ``[start, end)`` on the chosen VCs, sorted by submit time.

    ``start``/``end`` are ISO dates or datetimes (``None`` = unbounded). ``vcs=None``
    keeps the 11 VCs of ``philly_vc_capacity.csv``; ``vcs="all"`` keeps all 15;
    otherwise pass the VC names. The defaults are the usual replay window
    (submits from 2017-10-01 through 2017-11-30).
    """
    header, rows = _rows(path or PHILLY_PATH)
    col = {name: i for i, name in enumerate(header)}
    i_ts, i_dur, i_gpus, i_vc = col["timestamp"], col["duration"], col["num_gpus"], col["cluster"]

    if vcs is None:
        keep: set[str] | None = set(read_philly_capacities())
    elif isinstance(vcs, str):
        keep = None if vcs == "all" else {vcs}
    else:
        keep = set(vcs)

    start_dt, end_dt = _as_datetime(start), _as_datetime(end)
    # Timestamps are "YYYY-MM-DD HH:MM:SS": compare as strings, parse only kept rows.
    lo = start_dt.isoformat(sep=" ") if start_dt else None
    hi = end_dt.isoformat(sep=" ") if end_dt else None
    origin = start_dt or datetime.fromisoformat(min(r[i_ts] for r in rows))

    jobs = []
    for n, r in enumerate(rows):
        ts = r[i_ts]
        if (lo is not None and ts < lo) or (hi is not None and ts >= hi):
            continue
        if keep is not None and r[i_vc] not in keep:
            continue
        submit_s = (datetime.fromisoformat(ts) - origin).total_seconds()
        jobs.append(
            _job(f"philly-{n:05d}", submit_s, r[i_vc], int(r[i_gpus]), float(r[i_dur]), seed)
        )
    return _sorted(jobs)


# --------------------------------------------------------------------------- ITP


def _cluster_name(c: str | int) -> str:
    return f"cluster{c:02d}" if isinstance(c, int) else c


def read_itp(
    path: str | os.PathLike[str] | None = None,
    clusters: Iterable[str | int] | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
    seed: int = 0,
) -> list[TraceJob]:
    """ITP jobs (queue = cluster) submitted in ``[start_s, end_s)``, sorted by submit time.

    ``clusters`` takes names (``"cluster04"``) or numbers (``4``); ``None`` keeps all 10.
    ``submit_s`` is relative to ``start_s`` when given, else the trace's own time.
    """
    header, rows = _rows(path or ITP_PATH)
    col = {name: i for i, name in enumerate(header)}
    i_c, i_id, i_sub = col["cluster"], col["job_id"], col["submission_time"]
    i_dur, i_gpus = col["duration"], col["num_gpu"]
    keep = None if clusters is None else {_cluster_name(c) for c in clusters}
    origin = start_s or 0.0

    jobs = []
    for r in rows:
        if keep is not None and r[i_c] not in keep:
            continue
        sub = float(r[i_sub])
        if (start_s is not None and sub < start_s) or (end_s is not None and sub >= end_s):
            continue
        jobs.append(_job(r[i_id], sub - origin, r[i_c], int(r[i_gpus]), float(r[i_dur]), seed))
    return _sorted(jobs)


# --------------------------------------------------------------------------- Alibaba


def _alibaba_path(path: str | os.PathLike[str] | None) -> Path:
    p = Path(path) if path else ALIBABA_PODS_PATH
    if not p.exists():
        raise FileNotFoundError(
            f"{p} not found. The Alibaba OpenB trace is not vendored (its v2023 folder has no "
            f"licence; see data/traces/README.md). Fetch it yourself from {ALIBABA_URL} "
            "if your use is allowed, and pass its path."
        )
    return p


def _alibaba_kind(r: dict[str, str]) -> str:
    gpus, milli = int(r["num_gpu"]), int(r["gpu_milli"] or 0)
    if gpus == 0:
        return "cpu_only"
    if gpus == 1 and milli < 1000:
        return "fractional"
    if not r["scheduled_time"]:
        return "unscheduled"
    if not r["deletion_time"] or int(r["deletion_time"]) <= int(r["scheduled_time"]):
        return "zero_duration"
    return "whole_gpu"


def summarize_alibaba(path: str | os.PathLike[str] | None = None) -> dict[str, int]:
    """Pods by kind: ``whole_gpu`` (returned by :func:`read_alibaba`), ``fractional``
    (GPU-sharing, skipped), ``cpu_only``, ``unscheduled`` and ``zero_duration``."""
    counts = dict.fromkeys(
        ("whole_gpu", "fractional", "cpu_only", "unscheduled", "zero_duration"), 0
    )
    with _open_text(_alibaba_path(path)) as f:
        for r in csv.DictReader(f):
            counts[_alibaba_kind(r)] += 1
    return counts


def read_alibaba(path: str | os.PathLike[str] | None = None, seed: int = 0) -> list[TraceJob]:
    """Whole-GPU, scheduled Alibaba OpenB pods as training jobs (queue = QoS class).

    GPU-sharing (fractional) pods are not training jobs in this model (P1: training
    gets whole GPUs) and are skipped, as are CPU-only and never-scheduled pods; see
    :func:`summarize_alibaba` for the counts.
    """
    jobs = []
    skipped: dict[str, int] = {}
    with _open_text(_alibaba_path(path)) as f:
        for r in csv.DictReader(f):
            kind = _alibaba_kind(r)
            if kind != "whole_gpu":
                skipped[kind] = skipped.get(kind, 0) + 1
                continue
            duration = float(int(r["deletion_time"]) - int(r["scheduled_time"]))
            job = _job(
                r["name"], float(r["creation_time"]), r["qos"], int(r["num_gpu"]), duration, seed
            )
            if r["qos"] == "BE" and not job.preemptible:
                job = replace(job, preemptible=True)
            jobs.append(job)
    log.info("alibaba: %d whole-GPU pods kept, skipped %s", len(jobs), skipped)
    return _sorted(jobs)
