from django.contrib import admin

from quotas.models import BusinessLine, Queue, QuotaChange


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
