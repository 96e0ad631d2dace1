"""What the loop records for ``/metrics`` as it works (``core.telemetry``), after commit."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from core import telemetry
from quotas.models import Queue
from scheduling.models import CONSOLIDATION, Eviction, Job


def _queue_names(ids: Iterable[int]) -> dict[int, str]:
    return dict(Queue.objects.filter(pk__in=set(ids)).values_list("id", "name"))


def record_cycle(kind: str, duration_s: float) -> None:
    """One loop iteration's wall-clock duration."""
    telemetry.on_commit(lambda: telemetry.CYCLE_DURATION.labels(kind).observe(duration_s))


def record_evictions(evictions: list[Eviction]) -> None:
    """Runs stopped to make room: a preemption each, and their GPU-seconds; a run moved by
    consolidation is a migration instead (counted apart, no evicted GPU-seconds)."""
    if not evictions:
        return
    names = _queue_names(e.queue_id for e in evictions)
    rows = [(names.get(e.queue_id, "?"), e.reason, e.gpu_seconds) for e in evictions]

    def record() -> None:
        for queue, reason, gpu_seconds in rows:
            if reason == CONSOLIDATION:
                telemetry.MIGRATIONS.labels(queue).inc()
                continue
            telemetry.PREEMPTIONS.labels(queue, reason).inc()
            telemetry.EVICTED_GPU_SECONDS.labels(queue).inc(gpu_seconds)

    telemetry.on_commit(record)


def record_starts(jobs: list[Job], released_at: Mapping[int, float] | None = None) -> None:
    """Runs admitted; a first start also observes the wait since submission, or since the
    last of the jobs it waited for ended or its hold was released (``released_at``, epoch
    seconds, by job id: it queued from then, ``scheduling.dependencies``,
    ``scheduling.holds``)."""
    if not jobs:
        return
    released = released_at or {}
    names = _queue_names(j.queue_id for j in jobs)
    rows = [
        (names.get(j.queue_id, "?"),
         j.started_at.timestamp() - max(j.submitted_at.timestamp(), released.get(j.pk, 0.0))
         if j.attempt == 1 and j.started_at and j.submitted_at else None)
        for j in jobs
    ]  # fmt: skip

    def record() -> None:
        for queue, wait_s in rows:
            telemetry.JOBS_ADMITTED.labels(queue).inc()
            if wait_s is not None:
                telemetry.JOB_WAIT.labels(queue).observe(max(0.0, wait_s))

    telemetry.on_commit(record)


def record_timeouts(queue_ids: list[int]) -> None:
    """Jobs failed on their time limit (``scheduling.time_limits``), one per job (its queue)."""
    if not queue_ids:
        return
    names = _queue_names(queue_ids)
    queues = [names.get(q, "?") for q in queue_ids]

    def record() -> None:
        for queue in queues:
            telemetry.TIMED_OUT.labels(queue).inc()

    telemetry.on_commit(record)


def record_swaps(swapping_queue_ids: list[int], displaced_queue_ids: list[int]) -> None:
    """Quota swaps that launched: one per swapping job (its queue), and the running jobs
    each turned into borrowed work (their queues)."""
    if not swapping_queue_ids:
        return
    names = _queue_names([*swapping_queue_ids, *displaced_queue_ids])
    swapped = [names.get(q, "?") for q in swapping_queue_ids]
    displaced = [names.get(q, "?") for q in displaced_queue_ids]

    def record() -> None:
        for queue in swapped:
            telemetry.QUOTA_SWAPS.labels(queue).inc()
        for queue in displaced:
            telemetry.SWAP_DISPLACED.labels(queue).inc()

    telemetry.on_commit(record)
