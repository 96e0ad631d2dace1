"""Say so when a waiting job's estimated start waits on a run that has outlived its
prediction (V1: a time a person can trust, or why not).

A run past its predicted end, and past every prediction its history can make, is taken
by the plan to need ``overrun_s`` more, whenever it is asked (``policy.running_end``):
short on purpose, so that an overrun is no reason to wait before preempting. A waiting
job whose estimate comes from that release reads "in 30 minutes" at every cycle for as
long as the run goes on: on the Philly replay (640 GPUs, ``full``, seed 0) 78% of the
verdicts of reserved jobs of whole nodes, and such runs had a median of 18 hours left
when they got there (docs/replay.md, "Session 38").

Foreseeing their ends instead (as long again as they have run, the median on the traces)
made every estimate worse on both traces: the rest of the running work is predicted
late (the p80), and the early guess for overruns offsets it. So the estimate stays, and
the verdict says what it waits on: the run (the longest-running one when several
release then) and how long it has run, in ``details`` (``overrun_job``,
``overrun_job_ran_seconds``) and in a sentence of its message.

It changes no decision: only the messages and details of these verdicts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import explain
from .placement import ClassKey
from .policy import overruns
from .types import Code, RunningJob

if TYPE_CHECKING:
    from .planner import Planner

OVERRUN_JOB = "overrun_job"
OVERRUN_RAN = "overrun_job_ran_seconds"


def overrunning(p: Planner) -> list[RunningJob]:
    """The runs the plan takes to end ``overrun_s`` from now because they have outlived
    their prediction (``policy.overruns``), the longest-running first."""
    out = [
        r
        for r in p.s.running
        if r.id not in p.victim_ids  # stopped or moved by this plan: it ends otherwise
        and overruns(r, p.now, p.policy)
    ]
    out.sort(key=lambda r: (r.started_at, r.id))
    return out


def note_overruns(p: Planner) -> None:
    """Add the run it waits on to each verdict whose estimate is an overrun's release."""
    at = p.now + p.policy.overrun_s
    if not any(est == at for _reason, est in p.records.values()):
        return
    runs = overrunning(p)
    if not runs:
        return
    reserved = {r.job_id: set(r.nodes) for r in p.reservations}
    pending = {j.id: j for j in p.s.pending}
    by_line: dict[str, RunningJob | None] = {}  # the run each one waits on
    by_class: dict[ClassKey, RunningJob | None] = {}
    said: dict[int, tuple[str, dict[str, int]]] = {}  # per run: its sentence and details
    for job_id, (reason, est) in p.records.items():  # values replaced, keys kept
        if est != at or (job := pending.get(job_id)) is None:
            continue
        code, msg, details, remedy = reason
        if code == Code.PREEMPTING:
            continue  # its estimate is its victims' deadline, whatever else ends then
        nodes = reserved.get(job_id)
        if nodes is not None:
            run = _on(runs, nodes)
        elif code == Code.QUOTA_EXCEEDED:  # the room its line's runs free
            if job.line not in by_line:
                by_line[job.line] = next((r for r in runs if r.line == job.line), None)
            run = by_line[job.line]
        else:  # its turn for the GPUs of its class of nodes
            key = p.shape(job)[0]
            if key not in by_class:
                elig = p.elig_ready(key)
                by_class[key] = _on(
                    runs, {n.name for n, e in zip(p.topo.nodes, elig, strict=True) if e}
                )
            run = by_class[key]
        if run is None:
            continue
        if run.id not in said:
            ran = int(p.now - run.started_at)
            said[run.id] = (
                f" Its estimate waits for job {run.id}, which has run {explain.duration(ran)}, "
                f"past its predicted end; until that job ends, each cycle expects it within "
                f"{explain.duration(p.policy.overrun_s)}, so this estimate keeps moving later.",
                {OVERRUN_JOB: run.id, OVERRUN_RAN: ran},
            )
        note, facts = said[run.id]
        p.records[job_id] = ((code, msg + note, details | facts, remedy), est)


def _on(runs: list[RunningJob], nodes: set[str]) -> RunningJob | None:
    """The longest-running of ``runs`` on any of ``nodes``."""
    return next((r for r in runs if any(s.node in nodes for s in r.placement)), None)
