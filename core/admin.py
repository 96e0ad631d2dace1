from django.contrib import admin

from core.models import AuditRecord, LineMembership, Profile
from core.roles import is_admin


def _admins_only(request) -> bool:
    """The Django admin follows the portal role, not Django's ``is_staff`` flag."""
    return request.user.is_active and is_admin(request.user)


admin.site.has_permission = _admins_only


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    list_display = ["user", "role"]
    list_filter = ["role"]


@admin.register(LineMembership)
class LineMembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "business_line", "is_lead"]


@admin.register(AuditRecord)
class AuditRecordAdmin(admin.ModelAdmin):
    """Read-only: the audit log is append-only."""

    list_display = ["at", "actor_name", "action", "target_type", "target_id", "source_ip"]
    list_filter = ["action"]
    search_fields = ["actor_name", "target_id", "reason"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
