"""Reads of quota governance, scoped to the user asking, and the ledger's inputs from the DB.

Who sees which requests (also in ``docs/quotas.md``): admins see every request; everyone
else sees the requests of the lines they belong to (their lead's requests are visible to
the line's researchers, read-only); nobody sees another line's requests. Contracts and
usage of every line are public to signed-in users (as in ``business-lines/``); a line's
change history (with its reasons) is shown to its members and admins.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import QuerySet

from core.roles import line_ids, role_of
from monitoring.metrics import ratio_text
from monitoring.rollup import EvictionFigures, list_evictions_with_use
from quotas import advice, ledger
from quotas.models import BusinessLine, Queue, QuotaChange, QuotaPolicy, QuotaRequest, UsageSample
from quotas.permissions import sees_all_requests
from scheduling.models import Job
from scheduling.nodes.selectors import list_usable_free_gpus
from scheduling.selectors import build_cluster_summary, build_usage

# ---------------------------------------------------------------------------
# Requests


def list_requests_for_user(user) -> QuerySet[QuotaRequest]:
    """Admins: all; others: the requests of their lines; anonymous: none."""
    qs = QuotaRequest.objects.select_related("business_line", "queue", "requester", "decided_by")
    if sees_all_requests(user):
        return qs
    if role_of(user) is None:
        return qs.none()
    return qs.filter(business_line_id__in=line_ids(user))


def get_request_for_user(user, request_id: int) -> QuotaRequest | None:
    return list_requests_for_user(user).filter(pk=request_id).first()


def list_line_history(line: BusinessLine) -> QuerySet[QuotaChange]:
    """Every contract change of the line and its queues, newest first."""
    return QuotaChange.objects.filter(business_line=line).select_related(
        "queue", "changed_by", "request"
    )


def request_change(req: QuotaRequest) -> ledger.Change:
    return ledger.Change(
        line=req.business_line.name,
        queue=req.queue.name if req.queue_id else None,
        quota_gpus=req.quota_gpus,
        guarantee_gpus=req.guarantee_gpus,
    )


# ---------------------------------------------------------------------------
# Ledger inputs


def build_contracts() -> ledger.Contracts:
    """Every line's and queue's current contract (two queries)."""
    lines = tuple(
        ledger.LineContract(name, quota, guarantee)
        for name, quota, guarantee in BusinessLine.objects.order_by("pk").values_list(
            "name", "quota_gpus", "guarantee_gpus"
        )
    )
    queues = tuple(
        ledger.QueueContract(name, line, quota, guarantee)
        for name, line, quota, guarantee in Queue.objects.order_by("pk").values_list(
            "name", "business_line__name", "quota_gpus", "guarantee_gpus"
        )
    )
    return ledger.Contracts(lines=lines, queues=queues)


def list_scheduled_changes(exclude_id: int | None = None) -> tuple[ledger.Change, ...]:
    """Approved changes that are not in effect yet, in the order they will start."""
    qs = (
        QuotaRequest.objects.filter(
            state=QuotaRequest.State.APPROVED, applied_at__isnull=True, expired_at__isnull=True
        )
        .select_related("business_line", "queue")
        .order_by("starts_at", "pk")
    )
    if exclude_id is not None:
        qs = qs.exclude(pk=exclude_id)
    return tuple(request_change(r) for r in qs)


def healthy_gpus() -> int:
    return build_cluster_summary().gpus_healthy


def build_cluster_state(exclude_scheduled: int | None = None) -> ledger.ClusterState:
    """Contracts, running jobs, pending demand, capacity and the reserve, as the ledger wants."""
    rows = Job.objects.filter(state__in=[Job.State.RUNNING, Job.State.PREEMPTING]).values_list(
        "id", "name", "owner__username", "queue__name", "queue__business_line__name", "gpus",
        "preemptible", "borrowed", "started_at", "state",
    )  # fmt: skip
    holds = tuple(
        ledger.Hold(
            id=pk,
            queue=queue,
            line=line,
            gpus=gpus,
            preemptible=preemptible,
            started_at=started.timestamp() if started else 0.0,
            borrowed=borrowed,
            preempting=state == Job.State.PREEMPTING,
            name=name,
            owner=owner,
        )  # fmt: skip
        for pk, name, owner, queue, line, gpus, preemptible, borrowed, started, state in rows
    )
    names = dict(Queue.objects.values_list("pk", "name"))
    pending = {
        names[qid]: u.pending_gpus for qid, u in build_usage().queues.items() if qid in names
    }
    free = sum(list_usable_free_gpus())
    return ledger.ClusterState(
        contracts=build_contracts(),
        holds=holds,
        pending_gpus=pending,
        healthy_gpus=healthy_gpus(),
        free_gpus=free,
        reserve_gpus=QuotaPolicy.load().reserve_gpus,
        scheduled=list_scheduled_changes(exclude_id=exclude_scheduled),
    )


# ---------------------------------------------------------------------------
# Recent use, impact, suggestions


def build_recent_use(
    line: BusinessLine, queue: Queue | None, now: datetime, days: int
) -> advice.UseSummary:
    """Peak and average use and pending demand over the last ``days`` (from usage samples)."""
    points = UsageSample.objects.filter(
        business_line=line, queue=queue, at__gte=now - timedelta(days=days), at__lte=now
    ).values_list("at", "used_gpus", "pending_gpus")
    return advice.summarize_use([(at.timestamp(), used, pend) for at, used, pend in points])


def build_request_impact(req: QuotaRequest, now: datetime) -> dict:
    """The impact of approving ``req`` (as a dict for the API and the page)."""
    state = build_cluster_state(exclude_scheduled=req.pk)
    change = request_change(req)
    result = ledger.impact(state, change)
    policy = QuotaPolicy.load()
    use = build_recent_use(req.business_line, req.queue, now, policy.usage_days)
    after = result.after
    data = result.as_dict()
    data["recent_use"] = {**use.as_dict(), "days": policy.usage_days}
    data["notes"] += advice.compare_use(use, after.quota_gpus, after.guarantee_gpus)
    data["takes_effect"] = (
        "at approval"
        if req.starts_at is None or req.starts_at <= now
        else f"at {req.starts_at.isoformat()}"
    )
    return data


def build_suggestions(line: BusinessLine, eviction: EvictionFigures) -> list[dict]:
    """R4: for each queue of the line whose eviction ratio (the latest rollup's, over its
    window) is above the policy's target, the smallest guarantee whose replay against the
    window's evictions prevents most of them (``advice.suggest_guarantee``)."""
    if eviction.sampled_at is None:
        return []
    policy = QuotaPolicy.load()
    until = eviction.sampled_at
    since = until - timedelta(seconds=eviction.window_s)
    queues = [
        q
        for q in line.queues.order_by("name")
        if (eviction.ratio(q.pk) or 0.0) > policy.eviction_target
    ]
    if not queues:
        return []
    out = []
    for queue in queues:
        figures = eviction.by_queue[queue.pk]
        events = [
            advice.EvictionEvent(gpus=gpus, gpu_seconds=gpu_s, queue_used=used, at=at.timestamp())
            for at, gpus, gpu_s, used in list_evictions_with_use(queue.pk, since, until)
        ]
        cap = queue.quota_gpus if queue.quota_gpus is not None else line.quota_gpus
        suggestion = advice.suggest_guarantee(
            queue.name,
            events,
            figures["delivered_gpu_s"],
            queue.guarantee_gpus,
            cap,
            policy.eviction_target,
            coverage=policy.suggestion_coverage,
            evicted_gpu_s=figures["evicted_gpu_s"],
        )
        if suggestion is not None:
            out.append(
                {
                    **suggestion.as_dict(),
                    "message": suggestion.message(),
                    "eviction_text": ratio_text(suggestion.eviction_ratio),
                    "target_text": ratio_text(suggestion.target_ratio),
                    "ratio_after_text": ratio_text(suggestion.ratio_after),
                    "ratio_at_floor_text": ratio_text(suggestion.ratio_at_floor)
                    if suggestion.ratio_at_floor is not None
                    else "",
                    "queue_id": queue.pk,
                    "window": eviction.window_label,
                    "window_hours": eviction.window_s / 3600,
                }
            )
    return out
