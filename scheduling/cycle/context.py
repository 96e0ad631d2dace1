"""What one loop iteration carries from step to step: the backend, its observation, the report.

``Cycle`` is the shared context of the concern modules (``reconcile``, ``isolation``,
``stops``, ``launch``, ``verdicts``): each is a set of functions taking the cycle, so
each can be driven alone in a test with a small simulated cluster. Timeline lines are
collected in ``events`` and written in one statement by ``flush_events``; the live
``job.updated`` event of each line is published after commit, with the job's state at
the time it was written.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings

from core import events
from core.realtime import publish_on_commit
from scheduling import borrow_inputs
from scheduling.backends.base import BackendError, ClusterBackend, Observation
from scheduling.clock import to_datetime
from scheduling.engine import types as et
from scheduling.models import Job, JobEvent

_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")

PRODUCTION_PRESET = "full"


def production_policy() -> et.PolicyConfig:
    """The policy the live loop runs (the ``full`` preset): the grace period from the
    settings, the borrowing knobs (#19) from the admins' quota policy."""
    return et.PolicyConfig.preset(
        PRODUCTION_PRESET,
        grace_seconds=float(getattr(settings, "PREEMPTION_GRACE_SECONDS", 300)),
        **borrow_inputs.policy_knobs(),
    )


def shared_nodes_first() -> bool:
    """Whether the live loop sends single-node jobs to learnt shared inference nodes first
    (``PolicyConfig.shared_nodes_first``): the preset's value, not an admin knob, so
    reading it needs no query (the node page says it)."""
    return et.PolicyConfig.preset(PRODUCTION_PRESET).shared_nodes_first


@dataclass
class CycleReport:
    """What an iteration did (``counts``), what failed on the backend, and what drifted."""

    counts: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    touched_backend: bool = False


def fmt_placement(
    slots: tuple[et.Slot, ...] | list[et.Slot], node_gpus: Mapping[str, int] | None = None
) -> str:
    """A placement as a timeline line shows it: ``node[0,1], node2[3]`` where a node lends
    part of its GPUs, and nodes used whole by name alone, consecutive ones as a range
    (``node_gpus``: each node's GPUs; without it every node shows its GPUs). A 256-GPU job
    reads ``32 whole nodes (256 GPUs): r005-n00 to r005-n31``, not 32 lists of 8 GPUs."""
    sizes = node_gpus or {}
    whole: list[et.Slot] = []
    part: list[str] = []
    for s in slots:
        if len(s.gpus) == sizes.get(s.node):
            whole.append(s)
        else:
            part.append(f"{s.node}[{','.join(map(str, s.gpus))}]")
    if not whole:
        return ", ".join(part)
    gpus = sum(len(s.gpus) for s in whole)
    named = node_ranges([s.node for s in whole])
    if len(whole) == 1:
        lead = f"{named} (whole node, {gpus} GPUs)"
    else:
        lead = f"{len(whole):,} whole nodes ({gpus:,} GPUs): {named}"
    return "; ".join([lead, *([", ".join(part)] if part else [])])


def node_ranges(names: list[str]) -> str:
    """Node names with runs of three or more consecutive numbers joined: ``r005-n00 to
    r005-n05``, ``r005-n07``. Names are kept in the order given; a run goes on while a
    name's trailing number is one more than the previous one's, with the same prefix and
    width."""
    runs: list[list[str]] = []
    last: tuple[str, int, int] | None = None
    for name in names:
        m = _TRAILING_NUMBER.match(name)
        key = (m.group(1), len(m.group(2)), int(m.group(2))) if m else None
        if key and last and key[:2] == last[:2] and key[2] == last[2] + 1:
            runs[-1].append(name)
        else:
            runs.append([name])
        last = key
    return ", ".join(f"{run[0]} to {run[-1]}" if len(run) >= 3 else ", ".join(run) for run in runs)


class Cycle:
    """One iteration against one opened backend. Use ``run_cycle``."""

    def __init__(self, backend: ClusterBackend, obs: Observation, kind: str) -> None:
        self.backend = backend
        self.obs = obs
        self.now = obs.now
        self.kind = kind
        self.report = CycleReport()
        self.events: list[JobEvent] = []
        # pending reasons of planned starts not launched (yet): written with the verdicts
        self.launch_verdicts: dict[int, et.Verdict] = {}
        # pending reasons of jobs on hold (``scheduling.holds``) or held for their
        # dependencies (``scheduling.dependencies``): the engine never saw them
        self.dependency_verdicts: dict[int, et.Verdict] = {}
        # when the jobs that waited for others or were held were released (the last of
        # those ended, the hold was released): their wait counts from then
        # (``telemetry.record_starts``)
        self.released_at: dict[int, float] = {}
        # nodes' recent models after the runs that ended (``finished.note_models``): the
        # snapshot plans with them; written last (``finished.remember_models``)
        self.recent_models: dict[str, list[str]] = {}

    def stamp(self, job: Job | None = None) -> datetime:
        """When this cycle did something to ``job``: the cycle's cluster time, but never
        before the job's submission (a job submitted while this cycle ran read the clock
        after the cycle did), so a timeline never goes back in time."""
        at: datetime = to_datetime(self.now)  # type: ignore[assignment]
        submitted = vars(job).get("submitted_at") if job is not None else None
        return max(at, submitted) if submitted is not None else at

    def ended(self, job: Job, ended_at: float | None) -> datetime:
        """When ``job``'s run ended: the backend's ``ended_at`` when it gives one (a run seen
        ended by this cycle ended up to a period before it), kept between the run's start
        (or the job's submission) and this cycle's stamp; else the cycle's stamp."""
        at = self.stamp(job)
        if ended_at is None:
            return at
        floor = job.started_at or vars(job).get("submitted_at") or at
        return min(at, max(to_datetime(ended_at), floor))  # type: ignore[type-var]

    def event(
        self, job: Job | int, kind: str, message: str, state: str = "", at: datetime | None = None
    ) -> None:
        """Add a line to the job's timeline (at cluster time, or ``at``) and tell its watchers."""
        job_id = job if isinstance(job, int) else job.pk
        st = state or (job.state if isinstance(job, Job) else "")
        at = at or self.stamp(job if isinstance(job, Job) else None)
        publish_on_commit(*events.job_updated(job_id, st, event=(kind, message)))
        self.events.append(JobEvent(job_id=job_id, at=at, kind=kind, message=message))

    def call(self, what: str, fn: Callable[..., Any], *args: Any) -> bool:
        """Call the backend; record and swallow its error (False) so one node or job can't stop the cycle."""
        self.report.touched_backend = True
        try:
            fn(*args)
            return True
        except BackendError as err:
            kind = "permanent" if err.permanent else "transient"
            self.report.errors.append(f"{what}: {kind}: {err}")
            return False

    def flush_events(self) -> None:
        """Write the collected timeline lines in a few statements."""
        JobEvent.objects.bulk_create(self.events, batch_size=1000)
        self.events.clear()
