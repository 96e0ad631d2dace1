from django.contrib import admin

from core.admin import AuditedAdmin, ReadOnlyAdmin
from quotas.models import BusinessLine, Queue, QuotaChange, QuotaPolicy, QuotaRequest


class NoDeleteAdmin(AuditedAdmin):
    """Audited; never deleted here (a line or queue carries its jobs and contract history)."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(BusinessLine)
class BusinessLineAdmin(NoDeleteAdmin):
    list_display = ["name", "display_name", "quota_gpus", "guarantee_gpus"]
    # Contracts change only through approved quota requests (Q4).
    readonly_fields = ["quota_gpus", "guarantee_gpus"]


@admin.register(Queue)
class QueueAdmin(NoDeleteAdmin):
    list_display = ["name", "business_line", "tier", "quota_gpus", "guarantee_gpus"]
    list_filter = ["business_line", "tier"]
    readonly_fields = ["quota_gpus", "guarantee_gpus"]

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        """A queue's line is set when it is added: its contract was approved against that
        line (Q4), and its jobs count there."""
        fields = super().get_readonly_fields(request, obj)
        return fields if obj is None else [*fields, "business_line"]


@admin.register(QuotaChange)
class QuotaChangeAdmin(ReadOnlyAdmin):
    """The contract history: written by the quota services only, never edited or deleted."""

    list_display = ["changed_at", "business_line", "queue", "changed_by", "quota_after",
                    "guarantee_after"]  # fmt: skip


@admin.register(QuotaRequest)
class QuotaRequestAdmin(ReadOnlyAdmin):
    """Requests are decided on the portal's pages and API (audited there)."""

    list_display = ["number", "business_line", "queue", "requester", "quota_gpus", "guarantee_gpus",
                    "state", "starts_at", "ends_at", "applied_at", "expired_at"]  # fmt: skip
    list_filter = ["state", "business_line"]


@admin.register(QuotaPolicy)
class QuotaPolicyAdmin(NoDeleteAdmin):
    """The admins' reserve and the eviction-suggestion knobs (one row)."""

    list_display = ["reserve_gpus", "eviction_target", "eviction_window_hours",
                    "suggestion_coverage", "usage_days"]  # fmt: skip

    def has_add_permission(self, request) -> bool:
        return not QuotaPolicy.objects.exists()
