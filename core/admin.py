"""The Django admin: cluster admins only, every change audited, history and live state
read-only.

Two kinds of model admin, and no third (``tests/security/test_admin_audit.py`` checks
every registered one): ``AuditedAdmin`` writes an ``AuditRecord`` for each addition,
change (fields before and after) and deletion, in the admin's own transaction; and
``ReadOnlyAdmin`` shows rows that only the services may write (jobs, contract history,
quota requests, alerts, the audit log itself).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db import connection, models
from django.forms.models import model_to_dict
from django.utils.html import format_html
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy

from core import audit, people, realtime
from core.api import client_ip
from core.models import AuditRecord, LineMembership, Profile
from core.roles import is_admin

# Never written into an audit record, whatever model carries them.
SECRET_FIELDS = frozenset({"password", "key"})


def _admins_only(request) -> bool:
    """The Django admin follows the portal role, not Django's ``is_staff`` flag."""
    return request.user.is_active and is_admin(request.user)


admin.site.has_permission = _admins_only


def _fields(obj: Any) -> dict[str, Any]:
    """The object's field values as an audit record keeps them (JSON-safe, no secrets)."""
    values = model_to_dict(obj)
    return {
        name: (value if isinstance(value, bool | int | float | str | None) else str(value))
        for name, value in values.items()
        if name not in SECRET_FIELDS
    }


class ReadCount(int):
    """A count that prints with thousands separators (``68,503``), the portal's one rule
    for counts people read (``scheduling.engine.explain.num``), and is an ``int`` for
    everything else: the admin's templates compare it and pluralize by it."""

    def __str__(self) -> str:
        return f"{int(self):,}"


class SeparatedChangeList(ChangeList):
    """The admin's list, whose counts read as the portal's pages write them: "68,503 jobs",
    "All 68,503 selected", "3 results (68,503 total)"."""

    def get_results(self, request) -> None:
        super().get_results(request)
        self.result_count = ReadCount(self.result_count)
        if self.full_result_count is not None:
            self.full_result_count = ReadCount(self.full_result_count)


class PortalAdmin(admin.ModelAdmin):
    """What every model admin of the portal shares: counts with separators, and the times a
    row stamps itself (``at``, ``created_at``, ``updated_at``: not editable, so Django
    leaves them off the page) shown on its page, read-only."""

    def get_changelist(self, request, **kwargs) -> type[ChangeList]:
        return SeparatedChangeList

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        shown = list(super().get_readonly_fields(request, obj))
        stamps = [
            f.name
            for f in self.model._meta.concrete_fields
            if not f.editable and not f.primary_key and f.name not in shown
        ]
        return shown + stamps

    @admin.display(description="#", ordering="pk")
    def number(self, obj: Any) -> str:
        """A row's id as the portal writes it (``#4186``), for the lists that show it."""
        return f"#{obj.pk}"


def _person_of(obj: Any) -> Any:
    """The user whose access ``obj`` is part of (an account, its role, a line membership),
    or None."""
    if isinstance(obj, get_user_model()):
        return obj.pk
    if isinstance(obj, Profile | LineMembership):
        return obj.user_id
    return None


def _access_changed(obj: Any, action: str) -> None:
    """Live connections follow the change: the person's reconnect with what they may now
    see, or close if they may no longer sign in (``core.realtime``)."""
    user_pk = _person_of(obj)
    if user_pk is not None:
        realtime.close_live_connections(user_pk=user_pk, reason=action)


class AuditedAdmin(PortalAdmin):
    """A model admin whose every addition, change and deletion leaves an AuditRecord
    (action ``admin.add`` / ``admin.change`` / ``admin.delete``, before and after).

    A POST reads its row ``FOR UPDATE`` (the change and delete views are one transaction;
    the password view is not, and reads it as before): the change view's save writes
    every column back, so a row read before a service committed (a quota approved, a node
    cordoned) and saved after it undid that change without a trace; now the admin waits
    for the service and edits what it committed."""

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is not None and request.method == "POST" and connection.in_atomic_block:
            obj = self.get_queryset(request).select_for_update(of=("self",)).get(pk=obj.pk)
        return obj

    def save_model(self, request, obj, form, change: bool) -> None:
        stored = type(obj)._default_manager.filter(pk=obj.pk).first() if change else None
        if change:
            request._audit_before = _fields(stored) if stored is not None else {}
        super().save_model(request, obj, form, change)
        if (
            isinstance(obj, get_user_model())
            and getattr(stored, "is_active", False)
            and not obj.is_active
        ):
            # A deactivation lets go of what gives access outside the portal's tables (the
            # provider's refresh token: portal.auth.revocation), as an offboarding does.
            people.offboarded.send(sender=type(obj), user=obj)

    def log_addition(self, request, obj, message):
        audit.record(request.user, "admin.add", obj, after=_fields(obj),
                     source_ip=client_ip(request))  # fmt: skip
        _access_changed(obj, "admin.add")
        return super().log_addition(request, obj, message)

    def log_change(self, request, obj, message):
        before = getattr(request, "_audit_before", None)
        after = _fields(obj)
        if before is not None:
            changed = {k for k in after if before.get(k) != after[k]}
            before = {k: v for k, v in before.items() if k in changed}
            after = {k: v for k, v in after.items() if k in changed}
        reason = "password changed" if request.path.endswith("/password/") else ""
        audit.record(request.user, "admin.change", obj, reason=reason, before=before or {},
                     after=after, source_ip=client_ip(request))  # fmt: skip
        _access_changed(obj, "admin.change")
        return super().log_change(request, obj, message)

    def log_deletions(self, request, queryset):
        for obj in queryset:
            audit.record(request.user, "admin.delete", obj, before=_fields(obj),
                         source_ip=client_ip(request))  # fmt: skip
            _access_changed(obj, "admin.delete")
        return super().log_deletions(request, queryset)


def stored_json(field: models.Field) -> Callable[[Any], str]:
    """A JSON field's read-only display: the value as stored, in ``<pre>``. It is a literal
    value, as the audit page shows a record's before and after, not prose with counts;
    Django's admin would write it as one line of ``json.dumps``."""

    def show(obj: Any) -> str:
        value = getattr(obj, field.name)
        if value in (None, "", {}, []):
            return "-"
        text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
        return format_html("<pre>{}</pre>", text)

    show.__name__ = field.name
    show.short_description = field.verbose_name  # type: ignore[attr-defined]
    return show


class ReadOnlyAdmin(PortalAdmin):
    """Rows only the services write: shown, never added, changed or deleted here; JSON
    fields as stored (``stored_json``)."""

    def get_fields(self, request, obj=None) -> list[Any]:
        json_fields = {
            f.name: f for f in self.model._meta.concrete_fields if isinstance(f, models.JSONField)
        }
        return [
            stored_json(json_fields[name]) if name in json_fields else name
            for name in super().get_fields(request, obj)
        ]

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Profile)
class ProfileAdmin(AuditedAdmin):
    """A user's portal role: changing it is a privileged action, audited."""

    list_display = ["user", "role"]
    list_filter = ["role"]


@admin.register(LineMembership)
class LineMembershipAdmin(AuditedAdmin):
    list_display = ["user", "business_line", "is_lead"]


@admin.register(AuditRecord)
class AuditRecordAdmin(ReadOnlyAdmin):
    """Read-only: the audit log is append-only."""

    list_display = ["at", "actor_name", "action", "target_type", "target_id", "source_ip"]
    list_filter = ["action"]
    search_fields = ["actor_name", "target_id", "reason"]


def _no_add(self, request) -> bool:
    return False


# Django's and DRF's own admins, with the audit trail added. A token is made by its owner
# (the account page, ``gpuctl login``); here it is only seen and revoked: one minted here
# for another user would act as that user, and the audit log would name them.
for model, base, extra in (
    (get_user_model(), UserAdmin, {}),
    (Group, GroupAdmin, {}),
    (TokenProxy, TokenAdmin, {"has_add_permission": _no_add}),
):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, type(f"Audited{base.__name__}", (AuditedAdmin, base), extra))
