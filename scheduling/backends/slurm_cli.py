"""Thin, typed client for the Slurm command line (sbatch, squeue, sinfo, scontrol, scancel).

Framework-free: no Django imports.  Every call goes through ``subprocess.run`` with a
timeout and an explicit environment (``SLURM_CONF`` picks the cluster).

Errors are split in two:

* :class:`SlurmTransientError` -- the controller could not be reached, the call timed
  out, the controller was busy.  Retrying later may succeed.
* :class:`SlurmPermanentError` -- Slurm understood and refused the request (invalid
  job id, unknown node, impossible resource request, ...).  Retrying will not help.

Parsers (``parse_*``) are pure functions over the JSON that ``squeue --json`` and
``sinfo --json`` print.  They were written against Slurm 22.05 (OpenAPI plugin
v0.0.38) and accept the shapes of later versions where they are known to differ
(states as lists, numbers as ``{"set": .., "number": ..}`` objects, ``gres_used``
with or without ``(IDX:..)``).

Traps seen on 22.05 (all handled here):

* ``squeue --json`` / ``sinfo --json`` exit 0 with an *empty* list and a non-empty
  ``errors`` array when the controller is unreachable; treating that as "no jobs"
  would make a reconciler think every job vanished.  It raises
  :class:`SlurmTransientError`.
* ``scancel JOBID`` for an unknown job prints nothing and exits 0; with ``-v`` it
  prints ``error: ... Invalid job id specified`` and still exits 0.  ``cancel()``
  uses ``-v`` and stderr is checked for errors even on success.
* ``squeue --json`` ignores every filter option (``-t``, ``-j``, ``-u``): filtering is
  done here.
* Signals other than KILL are not delivered to the batch shell unless
  ``scancel --full`` (or ``--batch``) is used; ``signal()`` uses ``--full``.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "ACTIVE_JOB_STATES",
    "FINISHED_JOB_STATES",
    "SlurmCLI",
    "SlurmError",
    "SlurmJob",
    "SlurmNode",
    "SlurmPermanentError",
    "SlurmTransientError",
    "classify_error",
    "expand_hostlist",
    "parse_gres",
    "parse_gres_detail",
    "parse_index_list",
    "parse_jobs",
    "parse_nodes",
    "parse_sbatch_parsable",
]

DEFAULT_TIMEOUT = 30.0


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------
class SlurmError(Exception):
    """Base class; ``command`` is the argv, ``stderr`` what Slurm printed."""

    def __init__(
        self, message: str, *, command: Sequence[str] = (), stderr: str = "", returncode=None
    ):
        super().__init__(message)
        self.command = list(command)
        self.stderr = stderr
        self.returncode = returncode


class SlurmTransientError(SlurmError):
    """Controller unreachable, timed out or busy: retry later."""


class SlurmPermanentError(SlurmError):
    """Slurm refused the request (invalid job/node, impossible request): do not retry."""


_TRANSIENT_PATTERNS = re.compile(
    "|".join(
        [
            r"unable to contact slurm controller",
            r"socket timed out",
            r"connection refused",
            r"connection reset",
            r"communication connection failure",
            r"zero bytes were transmitted",
            r"slurm backup controller in standby",
            r"resource temporarily unavailable",  # EAGAIN, e.g. MaxJobCount reached
            r"slurmctld is busy",
            r"too many pending rpcs",
            r"transmission timeout",
            r"failed while looking for",  # --json load error (controller down)
            r"unexpected message received",
            r"protocol authentication error",
        ]
    ),
    re.IGNORECASE,
)

# Messages printed on stderr while the command still exits 0 that mean failure.
_ERROR_ON_SUCCESS = re.compile(r"\berror\b", re.IGNORECASE)


def classify_error(stderr: str) -> type[SlurmError]:
    """Which error class a Slurm client's stderr calls for (pure function)."""
    if _TRANSIENT_PATTERNS.search(stderr or ""):
        return SlurmTransientError
    return SlurmPermanentError


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------
ACTIVE_JOB_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "CONFIGURING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
FINISHED_JOB_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)


@dataclass(frozen=True)
class SlurmJob:
    job_id: int
    name: str
    state: str  # base state, upper case: "PENDING", "RUNNING", "COMPLETED", ...
    reason: str | None  # state_reason; None when Slurm says "None"
    nodes: tuple[str, ...]  # allocated nodes, expanded (empty while pending)
    gpus_per_node: int  # requested GPUs per node (tres_per_node / gres detail)
    gpu_indices: Mapping[str, tuple[int, ...]]  # node -> allocated GPU indices
    comment: str | None
    start_time: datetime | None  # UTC; None until the job started (no estimates)
    submit_time: datetime | None = None
    end_time: datetime | None = None  # only for finished jobs
    node_count: int = 0
    required_nodes: tuple[str, ...] = ()  # --nodelist as Slurm recorded it
    partition: str | None = None
    user: str | None = None
    batch_host: str | None = None
    requeue: bool = False  # may Slurm requeue it
    restart_count: int = 0  # how often it was requeued
    exit_code: int | None = None
    state_flags: tuple[str, ...] = ()  # extra state words of newer Slurm ("REQUEUED", ...)
    held: bool = False

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_JOB_STATES

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_JOB_STATES

    @property
    def is_running(self) -> bool:
        return self.state == "RUNNING"

    @property
    def total_gpus(self) -> int:
        if self.gpu_indices:
            return sum(len(v) for v in self.gpu_indices.values())
        return self.gpus_per_node * max(self.node_count, 1)


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # base state, lower case: idle/mixed/allocated/down/unknown/future/error
    flags: frozenset[str]  # lower case: drain, not_responding, completing, maintenance, ...
    reason: str | None
    features: tuple[str, ...]  # active features, e.g. ("rack1", "rdma")
    gpus_total: int
    gpus_used: int
    cpus: int = 0
    cpus_allocated: int = 0
    partitions: tuple[str, ...] = ()
    gpu_indices_used: tuple[int, ...] | None = None  # when Slurm reports IDX
    raw_state: str = ""  # as sinfo's %T would print it, e.g. "idle+drain"

    @property
    def drain(self) -> bool:
        """Drain requested (``drain``: still running jobs, ``drained``: empty)."""
        return "drain" in self.flags

    @property
    def drained(self) -> bool:
        return self.drain and self.state in ("idle", "down") and self.gpus_used == 0

    @property
    def not_responding(self) -> bool:
        return "not_responding" in self.flags

    @property
    def down(self) -> bool:
        return self.state in ("down", "error", "future") or "fail" in self.flags

    @property
    def schedulable(self) -> bool:
        """Can take new work now."""
        return (
            self.state in ("idle", "mixed")
            and not self.flags & {"drain", "not_responding", "maintenance", "reserved", "fail"}
            and self.gpus_free > 0
        )

    @property
    def gpus_free(self) -> int:
        return max(self.gpus_total - self.gpus_used, 0)

    @property
    def rack(self) -> str | None:
        return next((f for f in self.features if f.startswith("rack")), None)

    @property
    def rdma(self) -> bool:
        return any(f.lower() in ("rdma", "infiniband", "ib", "roce") for f in self.features)


# ---------------------------------------------------------------------------------------
# Pure parsers
# ---------------------------------------------------------------------------------------
def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside of brackets/parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth = max(depth - 1, 0)
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_hostlist(hostlist: str | Iterable[str] | None) -> list[str]:
    """``"gpu[1-3,7],login01"`` -> ``["gpu1", "gpu2", "gpu3", "gpu7", "login01"]``.

    Keeps zero padding (``n[01-03]``) and handles several bracket groups in one name.
    Accepts a list (of names or hostlists) too.
    """
    if not hostlist:
        return []
    if not isinstance(hostlist, str):
        out: list[str] = []
        for item in hostlist:
            out.extend(expand_hostlist(item))
        return out
    result: list[str] = []
    for part in _split_top(hostlist):
        result.extend(_expand_one(part))
    return result


def _expand_one(name: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", name)
    if not m:
        return [name]
    head, tail = name[: m.start()], name[m.end() :]
    out = []
    for rng in m.group(1).split(","):
        rng = rng.strip()
        if "-" in rng:
            lo, hi = rng.split("-", 1)
            width = len(lo)
            for i in range(int(lo), int(hi) + 1):
                out.extend(_expand_one(f"{head}{i:0{width}d}{tail}"))
        elif rng:
            out.extend(_expand_one(f"{head}{rng}{tail}"))
    return out


def parse_index_list(text: str | None) -> tuple[int, ...]:
    """``"0-1,4"`` -> ``(0, 1, 4)``; ``"N/A"``/empty -> ``()``."""
    if not text:
        return ()
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part or not part[0].isdigit():
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return tuple(out)


@dataclass(frozen=True)
class GresEntry:
    name: str  # "gpu"
    type: str | None  # "a100" in "gpu:a100:2"
    count: int
    indices: tuple[int, ...] | None  # from (IDX:..); None when not reported


_GRES_ENTRY = re.compile(
    r"^(?:gres[:/])?(?P<name>[A-Za-z_][\w.]*)"
    r"(?::(?P<a>[^:()]+))?(?::(?P<b>[^:()]+))?"
    r"(?P<rest>(?:\([^)]*\))*)$"
)


def parse_gres(text: str | None) -> list[GresEntry]:
    """Parse a GRES string as Slurm prints it.

    Handles ``gpu:8``, ``gpu:a100:8(S:0-1)``, ``gpu:2(IDX:0-1)``, ``gpu(CNT:2)(IDX:0,3)``,
    ``gres/gpu:2``, ``gres:gpu:2``, ``gpu:a100:0(IDX:N/A)``, several comma-separated
    entries, and ``(null)``/``N/A``/empty.
    """
    if not text or text in ("(null)", "N/A"):
        return []
    entries = []
    for part in _split_top(text):
        m = _GRES_ENTRY.match(part)
        if not m:
            continue
        a, b = m.group("a"), m.group("b")
        gtype: str | None = None
        count: int | None = None
        if b is not None:
            gtype = a
            count = _leading_int(b)
        elif a is not None:
            if a[0].isdigit():
                count = _leading_int(a)
            else:
                gtype = a
        rest = m.group("rest") or ""
        cnt = re.search(r"\(CNT:(\d+)\)", rest)
        if cnt:
            count = int(cnt.group(1))
        idx_m = re.search(r"\(IDX:([^)]*)\)", rest)
        indices = parse_index_list(idx_m.group(1)) if idx_m else None
        if count is None:
            count = len(indices) if indices else 1
        entries.append(GresEntry(m.group("name"), gtype, count, indices))
    return entries


def _leading_int(text: str) -> int:
    m = re.match(r"\d+", text)
    if not m:
        return 0
    return int(m.group(0))


def gpu_count(gres: str | None) -> int:
    return sum(e.count for e in parse_gres(gres) if e.name == "gpu")


def parse_gres_detail(
    detail: Sequence[str] | str | None, nodes: Sequence[str]
) -> dict[str, tuple[int, ...]]:
    """Map each allocated node to its GPU indices from squeue's ``gres_detail``.

    22.05 prints one string per allocated node, in node order, e.g.
    ``["gpu:8(IDX:0-7)", "gpu:8(IDX:0-7)"]``.
    """
    if not detail:
        return {}
    if isinstance(detail, str):
        detail = [detail]
    result: dict[str, tuple[int, ...]] = {}
    for node, text in zip(nodes, detail, strict=False):
        idx: list[int] = []
        for entry in parse_gres(text):
            if entry.name == "gpu" and entry.indices:
                idx.extend(entry.indices)
        result[node] = tuple(idx)
    return result


def _num(value: Any) -> int | None:
    """Slurm numbers: plain ints, or ``{"set": bool, "infinite": bool, "number": n}``."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        return _num(value.get("number"))
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _time(value: Any) -> datetime | None:
    ts = _num(value)
    if not ts or ts <= 0:
        return None
    return datetime.fromtimestamp(ts, tz=UTC)


def _str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    text = str(value).strip()
    if not text or text in ("(null)", "None", "N/A"):
        return None
    return text


def _words(value: Any) -> list[str]:
    """A state that may be ``"RUNNING"``, ``["RUNNING", "REQUEUED"]`` or ``"idle+drain"``."""
    if value is None:
        return []
    if isinstance(value, str):
        return [w for w in re.split(r"[+,\s]+", value) if w]
    if isinstance(value, list | tuple):
        out: list[str] = []
        for v in value:
            out.extend(_words(v))
        return out
    return [str(value)]


def _check_json_errors(data: Mapping[str, Any], what: str) -> None:
    errors = data.get("errors") or []
    if not errors:
        return
    parts = []
    for err in errors:
        if isinstance(err, dict):
            parts.append(
                " ".join(
                    str(err.get(k))
                    for k in ("source", "description", "error")
                    if err.get(k) not in (None, "")
                )
            )
        else:
            parts.append(str(err))
    message = f"{what}: " + "; ".join(parts)
    # Errors inside --json output are load failures (controller unreachable/busy).
    raise SlurmTransientError(message, stderr=message)


def _as_json(data: Mapping[str, Any] | str | bytes) -> Mapping[str, Any]:
    import json

    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise SlurmTransientError(f"unparseable Slurm JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SlurmPermanentError(f"unexpected Slurm JSON: {type(data).__name__}")
    return data


def _tres_gpus_per_node(tres: Any) -> int | None:
    """``"gres:gpu:2"`` (22.05), ``"gres/gpu:2"`` / ``"gres/gpu=2"`` (later) -> 2."""
    text = _str(tres)
    if not text:
        return None
    total = None
    for part in _split_top(text):
        part = part.replace("=", ":")
        for entry in parse_gres(part):
            if entry.name == "gpu":
                total = (total or 0) + entry.count
    return total


def parse_job(raw: Mapping[str, Any]) -> SlurmJob:
    """One element of ``squeue --json``'s ``jobs`` list."""
    words = [w.upper() for w in _words(raw.get("job_state"))]
    state = words[0] if words else "UNKNOWN"
    state_flags = tuple(words[1:])
    reason = _str(raw.get("state_reason"))
    nodes = tuple(expand_hostlist(_str(raw.get("nodes"))))
    if not nodes and isinstance(raw.get("job_resources"), dict):
        res = raw["job_resources"]
        alloc = res.get("allocated_nodes") or res.get("nodes")
        if isinstance(alloc, list):
            nodes = tuple(n.get("nodename") or n.get("name") for n in alloc if isinstance(n, dict))
        elif isinstance(alloc, str):
            nodes = tuple(expand_hostlist(alloc))
    gpu_indices = parse_gres_detail(raw.get("gres_detail"), nodes) if nodes else {}
    gpus_per_node = _tres_gpus_per_node(raw.get("tres_per_node"))
    if gpus_per_node is None:
        counts = [len(v) for v in gpu_indices.values() if v]
        gpus_per_node = max(counts) if counts else 0
    # 22.05 puts an estimate in start_time of pending jobs, and the cancel time in that
    # of jobs cancelled while pending: only a job that got nodes has started.
    started = state not in ("PENDING", "UNKNOWN") and bool(nodes)
    finished = state in FINISHED_JOB_STATES
    priority = _num(raw.get("priority"))
    held = state == "PENDING" and (
        priority == 0 or reason in ("JobHeldUser", "JobHeldAdmin", "JobHeld")
    )
    user = _str(raw.get("user_name"))
    exit_code = raw.get("exit_code")
    if isinstance(exit_code, dict):  # newer: {"status": [...], "return_code": {...}}
        exit_code = _num(exit_code.get("return_code"))
    else:
        exit_code = _num(exit_code)
    return SlurmJob(
        job_id=int(_num(raw.get("job_id")) or 0),
        name=str(raw.get("name") or ""),
        state=state,
        reason=reason,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu_indices=gpu_indices,
        comment=_str(raw.get("comment")),
        start_time=_time(raw.get("start_time")) if started else None,
        submit_time=_time(raw.get("submit_time")),
        end_time=_time(raw.get("end_time")) if finished else None,
        node_count=_num(raw.get("node_count")) or len(nodes),
        required_nodes=tuple(expand_hostlist(_str(raw.get("required_nodes")))),
        partition=_str(raw.get("partition")),
        user=user,
        batch_host=_str(raw.get("batch_host")),
        requeue=bool(raw.get("requeue", False)),
        restart_count=_num(raw.get("restart_cnt")) or 0,
        exit_code=exit_code,
        state_flags=state_flags,
        held=bool(held),
    )


def _records(
    data: Mapping[str, Any] | str | bytes, key: str, command: str, output: str
) -> list[Mapping[str, Any]]:
    """The objects of list ``key`` in the JSON ``output`` of ``command``.

    Errors the output reports are load failures (SlurmTransientError); output
    without the list is permanent: retrying cannot give it one.
    """
    data = _as_json(data)
    _check_json_errors(data, command)
    records = data.get(key)
    if records is None:
        raise SlurmPermanentError(f"{output} has no '{key}' list")
    return [r for r in records if isinstance(r, dict)]


def parse_jobs(data: Mapping[str, Any] | str | bytes) -> list[SlurmJob]:
    """``squeue --json`` output -> jobs.  Raises SlurmTransientError on load errors."""
    return [parse_job(j) for j in _records(data, "jobs", "squeue", "squeue --json output")]


_BASE_NODE_STATES = (
    "idle",
    "mixed",
    "allocated",
    "down",
    "error",
    "future",
    "unknown",
)


def parse_node(raw: Mapping[str, Any]) -> SlurmNode:
    """One element of ``sinfo --json`` (22.05) / ``scontrol show nodes --json``."""
    words = [w.lower() for w in _words(raw.get("state"))]
    words += [w.lower() for w in _words(raw.get("state_flags"))]
    state = next((w for w in words if w in _BASE_NODE_STATES), words[0] if words else "unknown")
    if state == "alloc":
        state = "allocated"
    flags = frozenset(w.rstrip("*") for w in words if w != state)
    if any(w.endswith("*") for w in words):
        flags = flags | {"not_responding"}
    features = _str(raw.get("active_features")) or _str(raw.get("features")) or ""
    gres_used_entries = [e for e in parse_gres(_str(raw.get("gres_used"))) if e.name == "gpu"]
    gpus_used = sum(e.count for e in gres_used_entries)
    used_idx: tuple[int, ...] | None = None
    if any(e.indices is not None for e in gres_used_entries):
        used_idx = tuple(i for e in gres_used_entries for i in (e.indices or ()))
    raw_state = "+".join([state, *sorted(flags)])
    partitions = raw.get("partitions") or ()
    if isinstance(partitions, str):
        partitions = partitions.split(",")
    return SlurmNode(
        name=str(raw.get("name") or raw.get("hostname") or ""),
        state=state,
        flags=flags,
        reason=_str(raw.get("reason")),
        features=tuple(f for f in features.split(",") if f),
        gpus_total=gpu_count(_str(raw.get("gres"))),
        gpus_used=gpus_used,
        cpus=_num(raw.get("cpus")) or 0,
        cpus_allocated=_num(raw.get("alloc_cpus")) or 0,
        partitions=tuple(partitions),
        gpu_indices_used=used_idx,
        raw_state=raw_state,
    )


def parse_nodes(data: Mapping[str, Any] | str | bytes) -> list[SlurmNode]:
    """``sinfo --json`` (22.05) or ``scontrol show nodes --json`` output -> nodes."""
    return [parse_node(n) for n in _records(data, "nodes", "sinfo", "Slurm JSON output")]


def parse_sbatch_parsable(stdout: str) -> int:
    """``sbatch --parsable`` prints ``jobid`` or ``jobid;cluster``."""
    line = next((ln.strip() for ln in stdout.splitlines() if ln.strip()), "")
    head = line.split(";", 1)[0]
    if not head.isdigit():
        raise SlurmPermanentError(f"sbatch printed no job id: {stdout!r}")
    return int(head)


# ---------------------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------------------
_DROP_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_", "SCANCEL_", "SCONTROL_")


@dataclass
class SlurmCLI:
    """Runs Slurm's client commands against the cluster that ``env["SLURM_CONF"]`` names.

    ``env`` is laid over the current process environment after dropping every
    ``SLURM_*``/``SBATCH_*``/``SQUEUE_*`` variable of the portal's own process (those
    would silently change what sbatch and squeue do); pass ``SLURM_CONF`` in ``env``
    (or have it in the process environment) to choose the cluster.
    """

    env: Mapping[str, str] | None = field(default=None, repr=False)  # may hold secrets
    timeout: float = DEFAULT_TIMEOUT
    partition: str | None = None
    bin_dir: str | None = None
    _base_env: dict[str, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_ENV_PREFIXES)}
        if "SLURM_CONF" in os.environ:
            base["SLURM_CONF"] = os.environ["SLURM_CONF"]
        base.update(self.env or {})
        self._base_env = base

    # -- low level -----------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
        extra_env: Mapping[str, str] | None = None,
        ok_stderr: Sequence[str] = (),
    ) -> str:
        """Run one Slurm command; return stdout or raise a classified SlurmError.

        ``ok_stderr``: regexes of stderr messages that are not failures.
        """
        argv = list(argv)
        if self.bin_dir:
            argv[0] = os.path.join(self.bin_dir, argv[0])
        env = dict(self._base_env)
        if extra_env:
            env.update(extra_env)
        limit = self.timeout if timeout is None else timeout
        try:
            cp = subprocess.run(
                argv,
                input=input,
                env=env,
                capture_output=True,
                text=True,
                timeout=limit,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr or ""
            if isinstance(err, bytes):
                err = err.decode(errors="replace")
            raise SlurmTransientError(
                f"{' '.join(argv)} timed out after {limit:.0f}s {err}".strip(),
                command=argv,
                stderr=err or "",
            ) from exc
        except FileNotFoundError as exc:
            raise SlurmPermanentError(
                f"{argv[0]} not found: Slurm clients are not installed "
                "(scripts/install-slurm.sh installs them)",
                command=argv,
            ) from exc
        stderr = (cp.stderr or "").strip()
        lines = stderr.splitlines()
        relevant = [
            ln for ln in lines if not any(re.search(p, ln, re.IGNORECASE) for p in ok_stderr)
        ]
        if cp.returncode != 0:
            problem = bool(relevant) or not lines
        else:  # e.g. scancel exits 0 after "error: ... Invalid job id specified"
            problem = any(_ERROR_ON_SUCCESS.search(ln) for ln in relevant)
        if problem:
            cls = classify_error(stderr)
            raise cls(
                f"{' '.join(argv)} failed (exit {cp.returncode}): {stderr or '(no stderr)'}",
                command=argv,
                stderr=stderr,
                returncode=cp.returncode,
            )
        return cp.stdout

    # -- queries -------------------------------------------------------------------
    def ping(self) -> bool:
        """True when the controller answers."""
        try:
            out = self.run(["scontrol", "ping"], timeout=min(self.timeout, 15))
        except SlurmError:
            return False
        return "UP" in out

    def list_jobs(self, all_states: bool = True) -> list[SlurmJob]:
        """All jobs slurmctld knows (finished ones stay for MinJobAge).

        ``all_states=False`` keeps only active (pending/running/...) jobs.
        """
        jobs = parse_jobs(self.run(["squeue", "--all", "--json"]))
        if not all_states:
            jobs = [j for j in jobs if not j.is_finished]
        return jobs

    def get_job(self, job_id: int) -> SlurmJob | None:
        """The job, or None when slurmctld does not (or no longer) know it."""
        return next((j for j in self.list_jobs() if j.job_id == int(job_id)), None)

    def list_nodes(self) -> list[SlurmNode]:
        out = self.run(["sinfo", "--json"])
        data = _as_json(out)
        if "nodes" not in data and not data.get("errors"):
            # Slurm >= 23.02 prints partition/node groups in sinfo --json; the
            # per-node list comes from scontrol there.  (Not run here: 22.05 only.)
            data = _as_json(self.run(["scontrol", "show", "nodes", "--json"]))
        nodes = parse_nodes(data)
        # sinfo lists a node once per partition: keep the first.
        seen: dict[str, SlurmNode] = {}
        for node in nodes:
            seen.setdefault(node.name, node)
        return list(seen.values())

    def get_node(self, name: str) -> SlurmNode | None:
        return next((n for n in self.list_nodes() if n.name == name), None)

    # -- jobs ----------------------------------------------------------------------
    def submit(
        self,
        name: str,
        nodelist: list[str],
        gpus_per_node: int,
        nodes: int,
        script: str,
        comment: str | None,
        requeue: bool = True,
        signal: str | None = "USR1@60",
        *,
        output: str = "/dev/null",
        workdir: str | None = None,
        environment: Mapping[str, str] | None = None,
        partition: str | None = None,
        time_limit: str | None = None,
        hold: bool = False,
        extra_args: Sequence[str] = (),
    ) -> int:
        """Submit a batch job pinned to ``nodelist``; return the Slurm job id.

        ``script`` is the batch script text (a ``#!/bin/bash`` line is added when it
        has none).  ``signal`` is sbatch's ``--signal`` (``USR1@60`` signals the job
        *steps* 60 s before the time limit; ``B:USR1@60`` the batch shell).
        Only ``PATH`` and the names in ``environment`` are exported to the job
        (``--export=PATH,...``): the portal's own environment (secrets) never leaks
        into user jobs.  ``output`` is the job's stdout/stderr file.
        """
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        if gpus_per_node < 0:
            raise ValueError("gpus_per_node must be >= 0")
        if nodelist and len(nodelist) > nodes:
            raise ValueError(f"nodelist has {len(nodelist)} nodes but nodes={nodes}")
        if not script.startswith("#!"):
            script = "#!/bin/bash\n" + script
        env_names = ["PATH"]
        for key in environment or {}:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"invalid environment variable name {key!r}")
            if key not in env_names:
                env_names.append(key)
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={name}",
            f"--nodes={nodes}",
            "--ntasks-per-node=1",
            f"--output={output}",
            f"--export={','.join(env_names)}",
            "--requeue" if requeue else "--no-requeue",
        ]
        if nodelist:
            argv.append(f"--nodelist={','.join(nodelist)}")
        if gpus_per_node:
            argv.append(f"--gres=gpu:{gpus_per_node}")
        if comment:
            argv.append(f"--comment={comment}")
        if signal:
            argv.append(f"--signal={signal}")
        if workdir:
            argv.append(f"--chdir={workdir}")
        part = partition or self.partition
        if part:
            argv.append(f"--partition={part}")
        if time_limit:
            argv.append(f"--time={time_limit}")
        if hold:
            argv.append("--hold")
        argv.extend(extra_args)
        out = self.run(argv, input=script, extra_env=dict(environment or {}))
        return parse_sbatch_parsable(out)

    def cancel(self, job_id: int) -> None:
        """Cancel a job.  Cancelling a job that already finished is not an error;
        an unknown job id raises SlurmPermanentError.

        ``-v`` is needed: without it 22.05's scancel prints nothing and exits 0 for an
        invalid job id.
        """
        self.run(
            ["scancel", "-v", str(int(job_id))],
            ok_stderr=[r"already completing or completed"],
        )

    def signal(self, job_id: int, sig: str | int, *, batch_only: bool = False) -> None:
        """Send ``sig`` (``"USR1"``, ``10`` ...) to the running job.

        Default ``--full``: the batch shell, its children and all steps get it (a plain
        ``scancel --signal`` skips the batch shell).  ``batch_only``: only the shell.
        """
        scope = "--batch" if batch_only else "--full"
        sig_text = str(sig).upper().removeprefix("SIG") if not isinstance(sig, int) else str(sig)
        self.run(["scancel", f"--signal={sig_text}", scope, str(int(job_id))])

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        """Put a running (or finished) job back to pending; ``hold`` keeps it held.

        Slurm then keeps it pending (reason ``BeginTime``) for ``cred_expire`` + 1
        seconds (121 s by default) before it may start again.
        """
        self.run(["scontrol", "requeuehold" if hold else "requeue", str(int(job_id))])

    def hold(self, job_id: int) -> None:
        self.run(["scontrol", "hold", str(int(job_id))])

    def release(self, job_id: int) -> None:
        self.run(["scontrol", "release", str(int(job_id))])

    # -- nodes ---------------------------------------------------------------------
    def drain(self, node: str, reason: str) -> None:
        """Drain a node: running jobs finish, nothing new starts.  ``reason`` is required."""
        if not reason or not reason.strip():
            raise ValueError("Slurm needs a reason to drain a node")
        self.run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])

    def resume(self, node: str) -> None:
        """Undo drain/down.  Raises SlurmPermanentError when the node is neither."""
        self.run(["scontrol", "update", f"nodename={node}", "state=resume"])
