"""The simulator's output of a run: deterministic lines from what the simulator knows of it.

A simulated run prints nothing, yet a person reading its output in the portal should
see what a training job would have said: where it started and from what progress, its
progress every few minutes, each periodic checkpoint written to the job's checkpoint
path, a checkpoint-and-stop request and how it ended (stopped, killed, failed and why,
done), and stale processes it left on GPUs. The same run always reads the same (a
function of the saved simulator, nothing random), so tests can assert on it.

Pure: no Django, no simulator object needed beyond one ``SimJob`` and the stale GPUs.
Lines are produced from the end backwards and only as many as ``max_bytes`` can hold,
so a run of many days costs no more than a short one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduling.backends.base import OutputTail
from scheduling.simcore.observation import FAILED, STOPPING, SUCCEEDED
from scheduling.simcore.simulator import SimJob

PROGRESS_EVERY_S = 300.0  # a "step" line every 5 minutes of run time
SECONDS_PER_STEP = 10  # the stand-in trainer's step length: step N = progress // 10 s
SOURCE = "simulator (synthetic output, derived from the simulated run)"


@dataclass(frozen=True)
class RunFacts:
    """What the output of one simulated run is made of (see :func:`run_lines`)."""

    job: SimJob
    now: float
    checkpoint_path: str = ""
    failure_words: str = ""
    # node -> GPU indices that stale processes of this run still hold
    stale_gpus: Mapping[str, tuple[int, ...]] | None = None


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _gpus(indices: tuple[int, ...]) -> str:
    return ",".join(str(g) for g in indices)


def _step(progress_s: float) -> int:
    return int(progress_s) // SECONDS_PER_STEP


def _where(path: str, progress_s: float) -> str:
    if not path:
        return "checkpoint saved (the job gives no checkpoint path)"
    return f"checkpoint written to {path.rstrip('/')}/step-{_step(progress_s)}"


def _head(f: RunFacts) -> str:
    j = f.job
    nodes = "; ".join(f"{node} GPUs {_gpus(g)}" for node, g in j.placement)
    if j.start_progress_s > 0:
        start = (f"resuming from step {_step(j.start_progress_s)} ({j.start_progress_s:.0f} s "
                 f"of training) in {f.checkpoint_path or 'its last checkpoint'}")  # fmt: skip
    else:
        start = "starting from the beginning"
    return f"{_ts(j.started_at)} [{j.job_id}] started on {nodes}: {start}"


def _stop_requested_at(j: SimJob) -> float | None:
    """When the portal asked the run to checkpoint and stop (progress runs 1:1 with time)."""
    if j.stop_deadline is None or j.stop_progress_s is None:
        return None
    return j.started_at + max(0.0, j.stop_progress_s - j.start_progress_s)


def _periodic_end(f: RunFacts) -> float:
    j = f.job
    asked = _stop_requested_at(j)
    if asked is not None:
        return asked
    return j.ended_at if j.ended_at is not None else f.now


def _periodic(f: RunFacts) -> Iterator[str]:
    """Progress and checkpoint lines from the last one back to the first."""
    j = f.job
    end = _periodic_end(f)
    span = max(0.0, end - j.started_at)
    tick = math.floor(span / PROGRESS_EVERY_S)
    every, cost = j.checkpoint_interval_s, j.checkpoint_cost_s
    ckpt = math.floor((span - cost) / every) if every > 0 and span >= cost else 0
    while tick >= 1 or ckpt >= 1:
        t_tick = j.started_at + tick * PROGRESS_EVERY_S if tick >= 1 else -math.inf
        t_ckpt = j.started_at + ckpt * every + cost if ckpt >= 1 else -math.inf
        if t_ckpt >= t_tick:
            progress = j.start_progress_s + ckpt * every
            yield f"{_ts(t_ckpt)} {_where(f.checkpoint_path, progress)} (progress {progress:.0f} s)"
            ckpt -= 1
        else:
            progress = j.start_progress_s + tick * PROGRESS_EVERY_S
            yield f"{_ts(t_tick)} step {_step(progress)}: {progress:.0f} s of training done"
            tick -= 1


def _ending(f: RunFacts) -> list[str]:
    """The lines after the periodic ones, in order: a stop request, the end, stale GPUs."""
    j = f.job
    lines = []
    asked = _stop_requested_at(j)
    if asked is not None and j.stop_deadline is not None:
        lines.append(f"{_ts(asked)} received SIGTERM: the portal asks for a checkpoint and a "
                     f"stop within {j.stop_deadline - asked:.0f} s")  # fmt: skip
    if j.ended_at is None:
        if j.state == STOPPING:
            lines.append(f"{_ts(f.now)} writing a checkpoint before stopping ...")
        return lines
    at, kept = _ts(j.ended_at), j.final_progress_s or 0.0
    if j.state == SUCCEEDED:
        lines.append(f"{at} training complete after {kept:.0f} s: exit 0")
    elif j.state == FAILED:
        words = f.failure_words or j.end_reason or "unknown error"
        lines.append(f"{at} FATAL: {words}")
        lines.append(f"{at} run failed (exit 1); the last checkpoint holds {kept:.0f} s of "
                     "training")  # fmt: skip
    elif j.end_reason == "checkpoint":
        lines.append(f"{at} {_where(f.checkpoint_path, kept)} (progress {kept:.0f} s)")
        lines.append(f"{at} stopped on request after its checkpoint: exit 0")
    elif j.end_reason == "deadline":
        lines.append(f"{at} killed (SIGKILL): the checkpoint did not finish within the grace; "
                     f"the last checkpoint holds {kept:.0f} s of training")  # fmt: skip
    else:  # killed
        lines.append(f"{at} killed (SIGKILL) by the portal without a checkpoint; the last "
                     f"checkpoint holds {kept:.0f} s of training")  # fmt: skip
    for node, gpus in sorted((f.stale_gpus or {}).items()):
        lines.append(f"{at} warning: processes of this run still hold GPU{'s' if len(gpus) > 1 else ''} "
                     f"{_gpus(gpus)} on {node} after it ended (residual processes)")  # fmt: skip
    return lines


def run_lines_backwards(f: RunFacts) -> Iterator[str]:
    """Every line of the run's output, the last first."""
    yield from reversed(_ending(f))
    yield from _periodic(f)
    yield _head(f)


def synthetic_tail(f: RunFacts, max_bytes: int) -> OutputTail:
    """The last ``max_bytes`` of the run's output (whole lines but, when cut, the first)."""
    kept: list[bytes] = []
    size = 0
    truncated = False
    for line in run_lines_backwards(f):
        data = (line + "\n").encode()
        if size + len(data) > max_bytes:
            room = max_bytes - size
            if room > 0:
                kept.append(data[-room:])
                size += room
            truncated = True
            break
        kept.append(data)
        size += len(data)
    return OutputTail(data=b"".join(reversed(kept)), truncated=truncated, source=SOURCE)
