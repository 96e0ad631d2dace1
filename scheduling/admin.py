from django.contrib import admin

from scheduling.models import Job, JobEvent, Node


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "rack", "block", "gpu_model", "gpus_total", "rdma", "state", "health"]
    list_filter = ["state", "health", "gpu_model", "rdma", "block"]
    search_fields = ["name", "rack"]
    # Node state changes go through the on-call services so they are audited.
    readonly_fields = ["state", "state_reason", "health", "health_detail", "residual_gpus"]


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ["at", "kind", "message"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "queue", "tier", "gpus", "state", "pending_code"]
    list_filter = ["state", "tier", "queue"]
    search_fields = ["name", "owner__username"]
    inlines = [JobEventInline]

    def has_change_permission(self, request, obj=None) -> bool:
        return False
