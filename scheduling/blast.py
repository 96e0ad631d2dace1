"""What an action destroys: the figures of the confirmation steps (#15).

Cancelling a running job, draining or cordoning a node each show, before they act, the
jobs they hit, the GPUs those hold, and the work each would lose: the GPU-hours since
its last checkpoint (or since it started, when it has not checkpointed since). Read
only; a few grouped queries whatever the cluster's size.

Cluster time (``scheduling.clock``) is the clock of every figure here, as of the loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Q, Sum

from scheduling.clock import cluster_now
from scheduling.engine.explain import count
from scheduling.engine.types import Code
from scheduling.models import Allocation, Job


def seconds_since_checkpoint(
    started_at: datetime | None, last_checkpoint_at: datetime | None, now: datetime
) -> float:
    """Work a running job would lose if stopped now: since its last checkpoint, or since
    it (re)started when that checkpoint is older (a restart resumes from it). Never < 0."""
    marks = [t for t in (started_at, last_checkpoint_at) if t is not None]
    if not marks:
        return 0.0
    return max(0.0, (now - max(marks)).total_seconds())


@dataclass(frozen=True)
class JobAtRisk:
    """One job an action hits, with the work it would lose if stopped now."""

    id: int
    name: str
    owner: str
    queue: str
    state: str
    gpus: int
    gpus_here: int  # on the node acted on (all of them for a cancel)
    since: datetime | None  # the last checkpoint, or the start when more recent
    hours_at_risk: float
    checkpointed: bool  # False: no checkpoint since it (re)started

    @property
    def gpu_hours_at_risk(self) -> float:
        return round(self.gpus * self.hours_at_risk, 1)


@dataclass(frozen=True)
class BlastRadius:
    """The jobs an action hits and their totals."""

    jobs: tuple[JobAtRisk, ...]
    now: datetime

    @property
    def job_count(self) -> int:
        return len(self.jobs)

    @property
    def gpus_hit(self) -> int:
        """GPUs of the jobs hit, on every node they run on (a multi-node job stops whole)."""
        return sum(j.gpus for j in self.jobs)

    @property
    def gpus_here(self) -> int:
        return sum(j.gpus_here for j in self.jobs)

    @property
    def gpu_hours_at_risk(self) -> float:
        return round(sum(j.gpus * j.hours_at_risk for j in self.jobs), 1)

    @property
    def queues(self) -> list[str]:
        return sorted({j.queue for j in self.jobs})

    def fingerprint(self) -> str:
        """The jobs hit, as the confirmation form carries it: if it differs when the
        second step arrives, the page is shown again with the new figures."""
        return ",".join(str(j.id) for j in sorted(self.jobs, key=lambda j: j.id)) or "none"


def _at_risk(rows: Iterable[dict], here: dict[int, int], now: datetime) -> BlastRadius:
    jobs = []
    for r in rows:
        running = r["state"] in (Job.State.RUNNING, Job.State.PREEMPTING)
        seconds = (
            seconds_since_checkpoint(r["started_at"], r["last_checkpoint_at"], now)
            if running
            else 0.0
        )
        marks = [t for t in (r["started_at"], r["last_checkpoint_at"]) if t is not None]
        since = max(marks) if running and marks else None
        jobs.append(
            JobAtRisk(
                id=r["id"],
                name=r["name"],
                owner=r["owner__username"],
                queue=r["queue__name"],
                state=r["state"],
                gpus=r["gpus"],
                gpus_here=here.get(r["id"], r["gpus"]),
                since=since,
                hours_at_risk=seconds / 3600,
                checkpointed=bool(r["last_checkpoint_at"] and since == r["last_checkpoint_at"]),
            )  # fmt: skip
        )
    return BlastRadius(jobs=tuple(sorted(jobs, key=lambda j: j.id)), now=now)


_FIELDS = ("id", "name", "owner__username", "queue__name", "state", "gpus", "started_at",
           "last_checkpoint_at")  # fmt: skip


def node_blast_radius(name: str, now: datetime | None = None) -> BlastRadius:
    """The active jobs holding GPUs of node ``name`` (two queries)."""
    now = now or cluster_now()
    here = dict(
        Allocation.objects.filter(node__name=name, job__state__in=Job.ACTIVE_STATES)
        .values("job_id")
        .annotate(n=Count("id"))
        .values_list("job_id", "n")
    )
    rows = Job.objects.filter(pk__in=list(here)).values(*_FIELDS)
    return _at_risk(rows, here, now)


def job_blast_radius(job: Job, now: datetime | None = None) -> BlastRadius:
    """The job itself: what cancelling it now loses (no query: the job is given)."""
    now = now or cluster_now()
    row = {
        "id": job.pk, "name": job.name, "owner__username": job.owner.username,
        "queue__name": job.queue.name, "state": job.state, "gpus": job.gpus,
        "started_at": job.started_at, "last_checkpoint_at": job.last_checkpoint_at,
    }  # fmt: skip
    return _at_risk([row], {}, now)


def array_blast_radius(array_id: int, now: datetime | None = None) -> BlastRadius:
    """An array's tasks holding GPUs (running, or checkpointing to stop): what cancelling
    the array now loses (one query; its waiting tasks lose no work)."""
    now = now or cluster_now()
    holding = (Job.State.RUNNING, Job.State.PREEMPTING)
    rows = Job.objects.filter(array_id=array_id, state__in=holding).values(*_FIELDS)
    return _at_risk(rows, {}, now)


def grace_text() -> str:
    """How long a job asked to move is given to checkpoint (the loop's preemption grace),
    in words: "5 minutes", "30 seconds"."""
    seconds = round(float(getattr(settings, "PREEMPTION_GRACE_SECONDS", 300)))
    if seconds % 60 or seconds < 60:
        return count(seconds, "second")
    return count(seconds // 60, "minute")


@dataclass(frozen=True)
class Waiting:
    """Pending jobs of a line (or one queue): all of them, and those held by quota."""

    jobs: int
    gpus: int
    quota_jobs: int
    quota_gpus: int


def waiting_in(line_id: int, queue_id: int | None = None) -> Waiting:
    """What rejecting a quota request leaves waiting: the pending jobs of its line (or
    queue), and those whose verdict is QUOTA_EXCEEDED (one query)."""
    pending = Job.objects.filter(state=Job.State.PENDING, queue__business_line_id=line_id)
    if queue_id is not None:
        pending = pending.filter(queue_id=queue_id)
    quota = Q(pending_code=Code.QUOTA_EXCEEDED)
    row = pending.aggregate(
        n=Count("id"), g=Sum("gpus"), qn=Count("id", filter=quota), qg=Sum("gpus", filter=quota)
    )
    return Waiting(jobs=row["n"], gpus=row["g"] or 0, quota_jobs=row["qn"],
                   quota_gpus=row["qg"] or 0)  # fmt: skip
