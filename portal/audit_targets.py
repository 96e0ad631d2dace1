"""An audit record's target in words a person reads, linked to its page where it has one.

A record keeps its target as ``type:id`` (``scheduling.node:42``), which is what a filter
matches but not what a person knows: the audit page shows ``node r003-n07`` (linked to
the node's page) beside it. One query per target type on the page, whatever its length.
A target deleted since keeps its ``type:id`` alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db.models import Model, Q
from django.urls import NoReverseMatch, reverse

from core.models import AuditRecord, LineMembership, Profile
from monitoring.models import Alert
from quotas.models import BusinessLine, Queue, QuotaRequest
from scheduling.models import Job, Node, SchedulingCycle


@dataclass(frozen=True)
class Target:
    """How one target reads on the page: ``label`` and, when it has a page, its ``url``."""

    label: str
    url: str | None = None


@dataclass(frozen=True)
class _Kind:
    model: type[Model]
    related: tuple[str, ...]
    describe: Callable[[Any], Target]
    # The field a person names this kind by in the filter ("r003-n07", "alice"), if any.
    name_field: str | None = None


def _node(node: Node) -> Target:
    return Target(f"node {node.name}", reverse("monitoring:oncall-node", args=[node.name]))


def _job(job: Job) -> Target:
    return Target(f"job #{job.pk} {job.name}", reverse("scheduling:job-detail", args=[job.pk]))


def _request(request: QuotaRequest) -> Target:
    url = reverse("quotas:request-detail", args=[request.pk])
    return Target(f"quota request #{request.pk}", url)


def _line(line: BusinessLine) -> Target:
    return Target(f"line {line.name}", reverse("quotas:line-detail", args=[line.name]))


def _membership(m: LineMembership) -> Target:
    return Target(f"{m.user.username} in line {m.business_line.name}")


KINDS: dict[str, _Kind] = {
    "scheduling.node": _Kind(Node, (), _node, "name"),
    "scheduling.job": _Kind(Job, (), _job),
    "scheduling.schedulingcycle": _Kind(SchedulingCycle, (), lambda c: Target(f"cycle #{c.pk}")),
    "quotas.quotarequest": _Kind(QuotaRequest, (), _request),
    "quotas.businessline": _Kind(BusinessLine, (), _line, "name"),
    "quotas.queue": _Kind(Queue, (), lambda q: Target(f"queue {q.name}"), "name"),
    "monitoring.alert": _Kind(Alert, (), lambda a: Target(f"alert #{a.pk}: {a.subject}")),
    "auth.user": _Kind(get_user_model(), (), lambda u: Target(f"user {u.username}"), "username"),
    "portal.profile": _Kind(Profile, ("user",), lambda p: Target(f"role of {p.user.username}")),
    "portal.linemembership": _Kind(LineMembership, ("user", "business_line"), _membership),
}  # fmt: skip


def describe(records: Iterable[AuditRecord]) -> dict[int, Target]:
    """Each record's target (by record id), for the records whose target still exists."""
    wanted: dict[str, set[int]] = defaultdict(set)
    for record in records:
        if (
            (record.target_type in KINDS or target_model(record.target_type) is not None)
            and record.target_id.isascii()
            and record.target_id.isdigit()
        ):
            wanted[record.target_type].add(int(record.target_id))
    found: dict[tuple[str, str], Target] = {}
    for target_type, ids in wanted.items():
        kind = KINDS.get(target_type)
        if kind is None:
            found.update(_by_model_name(target_type, ids))
            continue
        for obj in kind.model.objects.select_related(*kind.related).filter(pk__in=ids):
            found[(target_type, str(obj.pk))] = kind.describe(obj)
    return {
        r.pk: found[(r.target_type, r.target_id)]
        for r in records
        if (r.target_type, r.target_id) in found
    }


def target_model(target_type: str) -> type[Model] | None:
    """The model a record's ``target_type`` (``quotas.quotapolicy``) names, or None (a type
    that is no model, or no longer one)."""
    try:
        return apps.get_model(target_type)
    except (LookupError, ValueError):
        return None


def _by_model_name(target_type: str, ids: set[int]) -> dict[tuple[str, str], Target]:
    """Targets of a kind with no words of its own (the quota policy, the simulator's state,
    anything else the Django admin edits): its model's name and id, linked to the admin's
    page for it (the audit page is the admins'). Only the ids are read: the simulator's
    state is the whole simulated cluster."""
    model = target_model(target_type)
    if model is None:
        return {}
    meta = model._meta
    page = f"admin:{meta.app_label}_{meta.model_name}_change"

    def url(pk: int) -> str | None:
        try:
            return reverse(page, args=[pk])
        except NoReverseMatch:  # not in the admin
            return None

    return {
        (target_type, str(pk)): Target(f"{meta.verbose_name} #{pk}", url(pk))
        for pk in model.objects.filter(pk__in=ids).values_list("pk", flat=True)
    }


def named(name: str) -> Q:
    """Records whose target a person calls ``name``: a node, line, queue or user of that
    name (the filter's "an id or name")."""
    query = Q(pk__in=[])
    for target_type, kind in KINDS.items():
        if kind.name_field is None:
            continue
        ids = kind.model.objects.filter(**{kind.name_field: name}).values_list("pk", flat=True)
        if ids := [str(pk) for pk in ids]:
            query |= Q(target_type=target_type, target_id__in=ids)
    return query
