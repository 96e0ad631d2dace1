"""Does the database agree with the cluster? (``manage.py check_cluster``, the crash test, soaks)

Read-only. Lists every disagreement found: runs the backend has that no active
job claims (or the reverse), GPUs counted differently, partial gangs, launches
recorded a different number of times than runs were made, and waiting jobs
without a reason.
"""

from __future__ import annotations

from collections import Counter

from django.db import transaction

from scheduling.backend_factory import get_backend
from scheduling.backends.base import RUNNING, STOPPING
from scheduling.models import Allocation, Job, JobEvent, SchedulingCycle


def find_inconsistencies() -> list[str]:
    """Empty when the database and the backend agree GPU for GPU."""
    problems: list[str] = []
    with transaction.atomic():
        backend = get_backend(advance=False)  # read-only: the simulated clock stays put
        obs = backend.observe()
        transaction.set_rollback(True)
    runs = {j.ref: j for j in obs.jobs if j.state in (RUNNING, STOPPING)}
    active = {j.backend_ref: j for j in Job.objects.filter(state__in=["running", "preempting"])}
    for ref in sorted(set(runs) - set(active)):
        problems.append(f"run {ref} is active on the backend but no running job claims it")
    for ref in sorted(set(active) - set(runs)):
        problems.append(f"job {active[ref].pk} is {active[ref].state} but run {ref} is not active")
    db_gpus = set(Allocation.objects.values_list("node__name", "gpu_index"))
    run_gpus = {(s.node, g) for r in runs.values() for s in r.placement for g in s.gpus}
    for node, gpu in sorted(db_gpus ^ run_gpus)[:50]:
        side = "database" if (node, gpu) in db_gpus else "backend"
        problems.append(f"GPU {node}[{gpu}] is allocated only in the {side}")
    held = Counter(Allocation.objects.values_list("job_id", flat=True))
    for job in active.values():
        if held[job.pk] != job.gpus:
            problems.append(f"job {job.pk} holds {held[job.pk]} of its {job.gpus} GPUs")
    launches = Counter(
        JobEvent.objects.filter(kind__in=["started", "adopted"]).values_list("job_id", flat=True)
    )
    for job_id, attempt in Job.objects.values_list("id", "attempt"):
        if launches[job_id] != attempt:
            problems.append(
                f"job {job_id}: {launches[job_id]} launches recorded for {attempt} runs"
            )
    last = SchedulingCycle.objects.filter(kind="cycle").order_by("-started_at").first()
    if last is not None:  # jobs submitted since the last cycle have not been judged yet
        waiting = Job.objects.filter(
            state="pending", pending_code="", submitted_at__lt=last.cluster_time
        )
        for job_id in waiting.values_list("id", flat=True)[:50]:
            problems.append(f"job {job_id} waits without a reason")
    return problems
