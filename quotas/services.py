"""Writers of quota governance: requests, decisions, and contracts taking effect (Q4-Q6).

Every contract change goes through ``_apply`` / ``_restore`` here, inside a transaction
that first locks every ``BusinessLine`` row in primary-key order (``_lock_contracts``).
So two admins approving at the same moment are serialised, and the second re-checks
the sum of guarantees against healthy capacity after the first has committed: the sum
can never be pushed past capacity by concurrent approvals. Each change writes a
``QuotaChange`` row and an audit record, and publishes ``queues.updated`` after commit;
the scheduler reads contracts afresh every cycle, so nothing else needs telling.

The scheduler never changes a contract; only approved requests do (Q4).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q

from core import audit, events, timezones
from core.mail import mail_on_commit
from core.models import Role
from core.realtime import publish_on_commit
from quotas import ledger, transitions
from quotas.models import (
    USAGE_RETENTION_DAYS,
    BusinessLine,
    Queue,
    QuotaChange,
    QuotaPolicy,
    QuotaRequest,
    UsageSample,
)
from quotas.permissions import ensure_may_request, may_decide, may_request_for_line, may_withdraw
from quotas.selectors import (
    build_contracts,
    healthy_gpus,
    list_scheduled_changes,
    request_change,
)
from scheduling.clock import cluster_now
from scheduling.engine import explain
from scheduling.models import Node
from scheduling.selectors import QueueUsage, build_line_usage, build_queue_usage

log = logging.getLogger(__name__)

REASON_MAX = 2000
# How far ahead a request may start or end (and how far back it may start): a contract is
# planned for the next quarters, not for the year 9999 (which the form and the API took
# until session 33), nor the year 1.
PLAN_HORIZON = timedelta(days=2 * 365)
NOTE_MAX = 2000
USAGE_RETENTION = timedelta(days=USAGE_RETENTION_DAYS)


@dataclass(frozen=True)
class QuotaRequestInput:
    """A request as an adapter received it (types checked; the rules are checked here)."""

    business_line: str | int
    reason: str
    queue: str | int | None = None
    quota_gpus: int | None = None
    guarantee_gpus: int | None = None
    starts_at: datetime | None = None
    ends_at: datetime | None = None


# ---------------------------------------------------------------------------
# Helpers


def _lock_contracts() -> None:
    """Serialise every contract writer: lock all lines, always in the same order."""
    list(BusinessLine.objects.select_for_update().order_by("pk").values_list("pk", flat=True))


def _by_id_or_name(model: type, ref: str | int | None):
    if ref is None or ref == "":
        return None
    text = str(ref).strip()
    obj = None
    if text.isdigit():
        obj = model.objects.filter(pk=int(text)).first()
    if obj is None:
        obj = model.objects.filter(name=text).first()
    return obj


def _cluster_gpus() -> int:
    return sum(Node.objects.values_list("gpus_total", flat=True))


def _contract_of(req: QuotaRequest) -> tuple[BusinessLine | Queue, dict[str, int | None]]:
    target = req.queue if req.queue_id else req.business_line
    return target, {"quota_gpus": target.quota_gpus, "guarantee_gpus": target.guarantee_gpus}


def _mail_on_commit(subject: str, body: str, recipients: list[str]) -> None:
    """Mail through Celery after commit (``core.mail``: EMAIL_* from the environment)."""
    mail_on_commit(subject, body, recipients)


def _admin_emails() -> list[str]:
    users = get_user_model().objects.filter(
        Q(profile__role=Role.ADMIN) | Q(is_superuser=True), is_active=True
    )
    return list(users.values_list("email", flat=True))


def _describe(req: QuotaRequest) -> str:
    parts = []
    if req.quota_gpus is not None:
        parts.append(f"quota {req.quota_gpus:,}")
    if req.guarantee_gpus is not None:
        parts.append(f"guarantee {req.guarantee_gpus:,}")
    return f"{' and '.join(parts)} GPUs for {req.target_name}"


def _request_snapshot(req: QuotaRequest) -> dict:
    return {
        "state": req.state,
        "business_line": req.business_line.name,
        "queue": req.queue.name if req.queue_id else None,
        "quota_gpus": req.quota_gpus,
        "guarantee_gpus": req.guarantee_gpus,
        "starts_at": req.starts_at.isoformat() if req.starts_at else None,
        "ends_at": req.ends_at.isoformat() if req.ends_at else None,
    }


# ---------------------------------------------------------------------------
# Creating a request


def create_quota_request(
    user: Any, data: QuotaRequestInput, *, now: datetime | None = None, source_ip: str | None = None
) -> QuotaRequest:
    """A lead's request for their line (or one of its queues). Raises PermissionDenied for
    anyone else, ValidationError (by field) for bad input; stores nothing unless valid.
    Side effects: audit record, mail to the admins after commit."""
    ensure_may_request(user)
    now = now or cluster_now()
    errors: dict[str, list[str]] = {}
    line = _by_id_or_name(BusinessLine, data.business_line)
    if line is None:
        raise ValidationError(
            {"business_line": [f"unknown business line {str(data.business_line)[:60]!r}"]}
        )
    if not may_request_for_line(user, line.pk):
        raise PermissionDenied(f"you do not lead the line {line.name}; only its lead may ask")
    queue = None
    if data.queue not in (None, ""):
        queue = _by_id_or_name(Queue, data.queue)
        if queue is None:
            errors["queue"] = [f"unknown queue {str(data.queue)[:80]!r}"]
        elif queue.business_line_id != line.pk:
            errors["queue"] = [
                f"queue {queue.name} belongs to the line {queue.business_line.name}, "
                f"not {line.name}"
            ]
    reason = (data.reason or "").strip()
    if not reason:
        errors["reason"] = ["say why: the reason is shown to the admins who decide"]
    elif len(reason) > REASON_MAX:
        errors["reason"] = [f"at most {REASON_MAX} characters"]
    latest = now + PLAN_HORIZON
    beyond = [
        n
        for n, at in (("starts_at", data.starts_at), ("ends_at", data.ends_at))
        if at and at > latest
    ]
    if beyond:  # what to mend first: the order of the dates waits for it
        for name in beyond:
            errors[name] = [
                f"at most {PLAN_HORIZON.days // 365} years ahead (by "
                f"{latest.astimezone(UTC):%Y-%m-%d %H:%M} UTC): plan further changes nearer "
                "the time"
            ]
    elif data.starts_at and data.starts_at < now - PLAN_HORIZON:
        # a past start means "as soon as approved"; the year 1 was stored, and every page
        # showing it west of UTC was a 500 (OverflowError below datetime.min)
        errors["starts_at"] = [
            f"at most {PLAN_HORIZON.days // 365} years ago: leave it empty to start as soon "
            "as approved"
        ]
    elif data.starts_at and data.ends_at and data.ends_at <= data.starts_at:
        errors["ends_at"] = ["the end must be after the start"]
    elif data.ends_at and data.ends_at <= now:
        errors["ends_at"] = ["the end is already past"]
    if "queue" not in errors:
        change = ledger.Change(
            line=line.name,
            queue=queue.name if queue else None,
            quota_gpus=data.quota_gpus,
            guarantee_gpus=data.guarantee_gpus,
        )
        for name, messages in ledger.validate_change(
            build_contracts(), change, _cluster_gpus()
        ).items():
            errors.setdefault(name, []).extend(messages)
    if errors:
        raise ValidationError(errors)

    with transaction.atomic():
        req = QuotaRequest.objects.create(
            requester=user,
            business_line=line,
            queue=queue,
            quota_gpus=data.quota_gpus,
            guarantee_gpus=data.guarantee_gpus,
            reason=reason,
            starts_at=data.starts_at,
            ends_at=data.ends_at,
            created_at=now,
        )
        audit.record(
            user, "quota_request.created", req, reason=reason,
            after=_request_snapshot(req), source_ip=source_ip, at=now,
        )  # fmt: skip
    _mail_on_commit(
        f"Quota request #{req.pk}: {_describe(req)}",
        f"{user.username} asks for {_describe(req)}.\n\nReason: {reason}\n\n"
        f"Review it at /quotas/requests/{req.pk}/",
        _admin_emails(),
    )
    return req


# ---------------------------------------------------------------------------
# Deciding


def _locked_request(request_id: int) -> QuotaRequest:
    req = (
        QuotaRequest.objects.select_for_update(of=("self",))
        .select_related("business_line", "queue", "requester")
        .filter(pk=request_id)
        .first()
    )
    if req is None:
        raise QuotaRequest.DoesNotExist(f"no quota request {request_id}")
    return req


def _transition(req: QuotaRequest, action: str) -> str:
    try:
        return transitions.transition(req.state, action)
    except transitions.InvalidTransition as exc:
        raise ValidationError({"state": [str(exc)]}) from None


def _record_decision(user: Any, req: QuotaRequest, new_state: str, note: str, now: datetime,
                     source_ip: str | None, **after: Any) -> None:  # fmt: skip
    """Move the locked ``req`` to ``new_state``, decided by ``user`` at ``now`` with ``note``,
    and write the audit record ``quota_request.<new_state>`` (``after`` adds to its after)."""
    before = _request_snapshot(req)
    req.state = new_state
    req.decided_by, req.decided_at, req.decision_note = user, now, note
    req.save(update_fields=["state", "decided_by", "decided_at", "decision_note"])
    audit.record(user, f"quota_request.{new_state}", req, reason=note, before=before,
                 after={**_request_snapshot(req), **after}, source_ip=source_ip, at=now)  # fmt: skip


def _close(user: Any, request_id: int, action: str, note: str, now: datetime | None,
           source_ip: str | None, *, allowed: Callable[[QuotaRequest], bool] = lambda req: True,
           refused: str = "") -> QuotaRequest:  # fmt: skip
    """Reject or withdraw: lock the request, refuse (``refused``) unless ``allowed`` it, take
    ``action`` and record the decision; committed when it returns."""
    now = now or cluster_now()
    with transaction.atomic():
        req = _locked_request(request_id)
        if not allowed(req):
            raise PermissionDenied(refused)
        _record_decision(user, req, _transition(req, action), note, now, source_ip)
    return req


def _clean_note(note: str | None, *, required: bool) -> str:
    note = (note or "").strip()
    if required and not note:
        raise ValidationError({"note": ["write a note: the requester reads it"]})
    if len(note) > NOTE_MAX:
        raise ValidationError({"note": [f"at most {NOTE_MAX} characters"]})
    return note


def _fit_errors(
    req: QuotaRequest, *, include_scheduled: bool, override_reserve: bool
) -> dict[str, list[str]]:
    """Re-check the request against the contracts and capacity as they are now (locked)."""
    contracts = build_contracts()
    change = request_change(req)
    errors = ledger.validate_change(contracts, change, _cluster_gpus())
    errors.pop("non_field_errors", None)  # already the contract: applying it is harmless
    if errors:
        return {k: [f"no longer valid: {m}" for m in v] for k, v in errors.items()}
    fit = ledger.check_fit(
        contracts,
        change,
        healthy_gpus(),
        QuotaPolicy.load().reserve_gpus,
        scheduled=list_scheduled_changes(exclude_id=req.pk) if include_scheduled else (),
    )
    if not fit.allowed:
        return {"guarantee_gpus": [fit.message()]}
    if fit.needs_reserve_override and not override_reserve:
        return {
            "override_reserve": [
                f"{fit.message()} Approve with override_reserve to use the reserve."
            ]
        }
    return {}


def approve_quota_request(
    user: Any,
    request_id: int,
    note: str = "",
    *,
    override_reserve: bool = False,
    now: datetime | None = None,
    source_ip: str | None = None,
) -> QuotaRequest:
    """An admin approves (the note is optional; a rejection needs one): re-checked under the contract lock (valid contract, sum of
    guarantees within healthy capacity counting approved changes still to start, reserve
    unless overridden). Applies at once when it has no start or a past one; a later start
    is applied by ``apply_due_changes``. Mails the requester after commit."""
    if not may_decide(user):
        raise PermissionDenied("only cluster admins approve quota requests")
    note = _clean_note(note, required=False)
    now = now or cluster_now()
    with transaction.atomic():
        _lock_contracts()
        req = _locked_request(request_id)
        new_state = _transition(req, transitions.APPROVE)
        if req.ends_at and req.ends_at <= now:
            raise ValidationError({"ends_at": ["its period has already ended; reject it"]})
        errors = _fit_errors(req, include_scheduled=True, override_reserve=override_reserve)
        if errors:
            raise ValidationError(errors)
        _record_decision(user, req, new_state, note, now, source_ip,
                         override_reserve=override_reserve)  # fmt: skip
        if req.starts_at is None or req.starts_at <= now:
            _apply(req, now, actor=user, source_ip=source_ip)
    _mail_on_commit(
        f"Quota request #{req.pk} approved",
        f"Your request for {_describe(req)} was approved by {user.username}"
        + (
            " and is in effect now."
            if req.applied_at
            # in the zone the requester chose on /account/, named (UTC by default)
            else f"; it takes effect at "
            f"{timezones.written(req.starts_at, timezones.zone_of_recipient(req.requester))}."
        )
        + (f"\n\nNote: {note}" if note else ""),
        [req.requester.email],
    )
    return req


def reject_quota_request(
    user: Any,
    request_id: int,
    note: str = "",
    *,
    now: datetime | None = None,
    source_ip: str | None = None,
) -> QuotaRequest:
    """An admin rejects, with a note for the requester (mailed after commit)."""
    if not may_decide(user):
        raise PermissionDenied("only cluster admins reject quota requests")
    note = _clean_note(note, required=True)
    req = _close(user, request_id, transitions.REJECT, note, now, source_ip)
    _mail_on_commit(
        f"Quota request #{req.pk} rejected",
        f"Your request for {_describe(req)} was rejected by {user.username}.\n\nNote: {note}",
        [req.requester.email],
    )
    return req


def withdraw_quota_request(
    user: Any,
    request_id: int,
    note: str = "",
    *,
    now: datetime | None = None,
    source_ip: str | None = None,
) -> QuotaRequest:
    """The requester (or a lead of its line) withdraws a pending request."""
    note = _clean_note(note, required=False)
    return _close(user, request_id, transitions.WITHDRAW, note, now, source_ip,
                  allowed=lambda req: may_withdraw(user, req),
                  refused="only the requester or the line's lead may withdraw it")  # fmt: skip


# ---------------------------------------------------------------------------
# Taking effect and ending


def _write_contract(
    req: QuotaRequest,
    values: dict[str, int | None],
    *,
    now: datetime,
    actor: Any,
    reason: str,
    action: str,
    source_ip: str | None = None,
) -> QuotaChange:
    """Set the target's contract (the caller holds the contract lock) and record it."""
    target, before = _contract_of(req)
    target = type(target).objects.select_for_update().get(pk=target.pk)
    for name, value in values.items():
        setattr(target, name, value)
    target.save(update_fields=list(values))
    after = {"quota_gpus": target.quota_gpus, "guarantee_gpus": target.guarantee_gpus}
    change = QuotaChange.objects.create(
        business_line=req.business_line,
        queue=req.queue,
        changed_by=actor if getattr(actor, "pk", None) else None,
        reason=reason,
        quota_before=before["quota_gpus"],
        quota_after=after["quota_gpus"],
        guarantee_before=before["guarantee_gpus"],
        guarantee_after=after["guarantee_gpus"],
        request=req,
        changed_at=now,
    )
    audit.record(actor, action, target, reason=reason, before=before, after=after,
                 source_ip=source_ip, at=now)  # fmt: skip
    publish_on_commit(
        *events.queues_updated(
            queue=req.queue.name if req.queue_id else None,
            quota=events.QuotaFigures(
                line=req.business_line.name, quota_gpus=after["quota_gpus"],
                guarantee_gpus=after["guarantee_gpus"], request=req.pk, change=action,
            ),
        )
    )  # fmt: skip
    if req.queue_id:
        req.queue.quota_gpus, req.queue.guarantee_gpus = target.quota_gpus, target.guarantee_gpus
    else:
        req.business_line.quota_gpus = target.quota_gpus
        req.business_line.guarantee_gpus = target.guarantee_gpus
    return change


def _apply(req: QuotaRequest, now: datetime, *, actor: Any, source_ip: str | None = None) -> None:
    """Put an approved request in effect (contract lock held, checks already passed)."""
    _, current = _contract_of(req)
    values = {
        name: getattr(req, name)
        for name in ("quota_gpus", "guarantee_gpus")
        if getattr(req, name) is not None
    }
    req.previous = {name: current[name] for name in values}
    _write_contract(
        req, values, now=now, actor=actor, action="quota.applied", source_ip=source_ip,
        reason=f"request #{req.pk} by {req.requester.username} takes effect: {req.reason}",
    )  # fmt: skip
    req.applied_at, req.activation_note = now, ""
    req.save(update_fields=["previous", "applied_at", "activation_note"])


# A contract's fields as the notes people read name them.
CONTRACT_WORDS = {"quota_gpus": "quota", "guarantee_gpus": "guarantee"}


def _gpus(value: int | None) -> str:
    """A contract's GPU count in words: ``2,750 GPUs``; None (no quota of its own): none."""
    return "none" if value is None else explain.count(value, "GPU")


def _restore(req: QuotaRequest, now: datetime) -> None:
    """At ``ends_at``: give back the previous values this request replaced, unless a later
    change has set the field since (the later decision stands). A guarantee whose return
    would push the sum past healthy capacity comes back only as far as it fits."""
    _, current = _contract_of(req)
    notes: list[str] = []
    values: dict[str, int | None] = {}
    for name, previous in (req.previous or {}).items():
        if current[name] != getattr(req, name):
            notes.append(
                f"{CONTRACT_WORDS[name]} left at {_gpus(current[name])}: changed since by "
                "another decision"
            )
            continue
        values[name] = previous
    if values.get("guarantee_gpus") is not None:
        contracts = build_contracts()
        change = request_change(req)
        change = ledger.Change(change.line, change.queue, None, values["guarantee_gpus"])
        fit = ledger.check_fit(contracts, change, healthy_gpus())
        if not fit.allowed:
            room = max(0, fit.healthy_gpus - ledger.guarantee_total(contracts))
            fitting = min(values["guarantee_gpus"], current["guarantee_gpus"] + room)
            notes.append(
                f"guarantee returns to {_gpus(fitting)}, not {values['guarantee_gpus']:,}: the "
                "rest does not fit in healthy capacity now"
            )
            values["guarantee_gpus"] = fitting
    quota = values.get("quota_gpus", current["quota_gpus"])
    guarantee = values.get("guarantee_gpus", current["guarantee_gpus"])
    if quota is not None and guarantee > quota:
        # Never break the guarantee <= quota rule (the DB refuses it anyway).
        values["guarantee_gpus"] = quota
        notes.append(f"guarantee capped at the quota ({quota})")
    reason = f"request #{req.pk} ended: previous contract restored"
    if notes:
        reason += " (" + "; ".join(notes) + ")"
    if values:
        _write_contract(req, values, now=now, actor=None, reason=reason, action="quota.restored")
    req.expired_at = now
    req.activation_note = "; ".join(notes)[:300]
    req.save(update_fields=["expired_at", "activation_note"])


@dataclass(frozen=True)
class DueReport:
    applied: list[int]
    waiting: list[int]
    expired: list[int]


def apply_due_changes(now: datetime) -> DueReport:
    """Start approved changes whose ``starts_at`` has come, end those whose ``ends_at`` has,
    in one transaction under the contract lock. Idempotent; safe to run concurrently.

    A change that no longer fits (capacity shrank, another contract moved) waits with an
    ``activation_note`` and is retried on the next run; one whose period ended before it
    could start is closed without touching the contract.
    """
    applied: list[int] = []
    waiting: list[int] = []
    expired: list[int] = []
    with transaction.atomic():
        _lock_contracts()
        approved = QuotaRequest.objects.select_related(
            "business_line", "queue", "requester"
        ).filter(state=QuotaRequest.State.APPROVED, expired_at__isnull=True)
        for req in approved.filter(applied_at__isnull=False, ends_at__lte=now).order_by(
            "ends_at", "pk"
        ):
            _restore(req, now)
            expired.append(req.pk)
        for req in approved.filter(applied_at__isnull=True, ends_at__lte=now):
            req.expired_at = now
            req.activation_note = "its period ended before it could take effect"
            req.save(update_fields=["expired_at", "activation_note"])
            expired.append(req.pk)
        due = approved.filter(applied_at__isnull=True, starts_at__lte=now).filter(
            Q(ends_at__isnull=True) | Q(ends_at__gt=now)
        )
        for req in due.order_by("starts_at", "pk"):
            errors = _fit_errors(req, include_scheduled=False, override_reserve=True)
            if errors:
                note = "waiting: " + " ".join(m for msgs in errors.values() for m in msgs)
                if note[:300] != req.activation_note:
                    req.activation_note = note[:300]
                    req.save(update_fields=["activation_note"])
                    audit.record(None, "quota.waiting", req, reason=note)
                waiting.append(req.pk)
                continue
            _apply(req, now, actor=None)
            applied.append(req.pk)
    return DueReport(applied=applied, waiting=waiting, expired=expired)


# ---------------------------------------------------------------------------
# Usage samples


def record_usage_sample(now: datetime) -> int:
    """One usage row per line and per queue (the series behind recent use and the
    eviction ratio); rows older than 30 days are dropped. Returns rows written."""
    line_usage = build_line_usage()
    queue_usage = build_queue_usage()
    targets = [
        (pk, None, line_usage.get(pk)) for pk in BusinessLine.objects.values_list("pk", flat=True)
    ]
    targets += [
        (line_id, qid, queue_usage.get(qid))
        for qid, line_id in Queue.objects.values_list("pk", "business_line_id")
    ]
    rows = []
    for line_id, qid, usage in targets:
        u = usage or QueueUsage()
        rows.append(
            UsageSample(
                at=now,
                business_line_id=line_id,
                queue_id=qid,
                used_gpus=u.used_gpus,
                borrowed_gpus=u.borrowed_gpus,
                pending_gpus=u.pending_gpus,
            )
        )
    UsageSample.objects.bulk_create(rows)
    UsageSample.objects.filter(at__lt=now - USAGE_RETENTION).delete()
    return len(rows)
