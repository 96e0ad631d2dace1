from django.contrib import admin

from quotas.models import BusinessLine, Queue, QuotaChange, QuotaPolicy, QuotaRequest


@admin.register(BusinessLine)
class BusinessLineAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "quota_gpus", "guarantee_gpus"]
    # Contracts change only through approved quota requests (Q4).
    readonly_fields = ["quota_gpus", "guarantee_gpus"]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ["name", "business_line", "tier", "quota_gpus", "guarantee_gpus"]
    list_filter = ["business_line", "tier"]
    readonly_fields = ["quota_gpus", "guarantee_gpus"]


@admin.register(QuotaChange)
class QuotaChangeAdmin(admin.ModelAdmin):
    list_display = ["changed_at", "business_line", "queue", "changed_by", "quota_after",
                    "guarantee_after"]  # fmt: skip

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(QuotaRequest)
class QuotaRequestAdmin(admin.ModelAdmin):
    """Read-only: requests are decided on the portal's pages and API (audited there)."""

    list_display = ["id", "business_line", "queue", "requester", "quota_gpus", "guarantee_gpus",
                    "state", "starts_at", "ends_at", "applied_at", "expired_at"]  # fmt: skip
    list_filter = ["state", "business_line"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(QuotaPolicy)
class QuotaPolicyAdmin(admin.ModelAdmin):
    """The admins' reserve and the eviction-suggestion knobs (one row)."""

    list_display = ["reserve_gpus", "eviction_target", "eviction_window_hours",
                    "suggestion_coverage", "usage_days"]  # fmt: skip

    def has_add_permission(self, request) -> bool:
        return not QuotaPolicy.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
