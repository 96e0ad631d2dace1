"""The Django admin: cluster admins only, every change audited, history and live state
read-only.

Two kinds of model admin, and no third (``tests/security/test_admin_audit.py`` checks
every registered one): ``AuditedAdmin`` writes an ``AuditRecord`` for each addition,
change (fields before and after) and deletion, in the admin's own transaction; and
``ReadOnlyAdmin`` shows rows that only the services may write (jobs, contract history,
quota requests, alerts, the audit log itself).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.forms.models import model_to_dict
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy

from core import audit
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


class AuditedAdmin(admin.ModelAdmin):
    """A model admin whose every addition, change and deletion leaves an AuditRecord
    (action ``admin.add`` / ``admin.change`` / ``admin.delete``, before and after)."""

    def save_model(self, request, obj, form, change: bool) -> None:
        if change:
            stored = type(obj)._default_manager.filter(pk=obj.pk).first()
            request._audit_before = _fields(stored) if stored is not None else {}
        super().save_model(request, obj, form, change)

    def log_addition(self, request, obj, message):
        audit.record(request.user, "admin.add", obj, after=_fields(obj),
                     source_ip=client_ip(request))  # fmt: skip
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
        return super().log_change(request, obj, message)

    def log_deletions(self, request, queryset):
        for obj in queryset:
            audit.record(request.user, "admin.delete", obj, before=_fields(obj),
                         source_ip=client_ip(request))  # fmt: skip
        return super().log_deletions(request, queryset)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only the services write: shown, never added, changed or deleted here."""

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


# Django's and DRF's own admins, with the audit trail added.
for model, base in ((get_user_model(), UserAdmin), (Group, GroupAdmin), (TokenProxy, TokenAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, type(f"Audited{base.__name__}", (AuditedAdmin, base), {}))
