from django.contrib import admin

from core.admin import AuditedAdmin, ReadOnlyAdmin
from scheduling.models import Job, JobEvent, Node


@admin.register(Node)
class NodeAdmin(AuditedAdmin):
    """Labels may be corrected here (audited); state changes go through the on-call
    services, and nodes come and go with the backend, never deleted here."""

    list_display = ["name", "rack", "block", "gpu_model", "gpus_total", "rdma", "state", "health"]
    list_filter = ["state", "health", "gpu_model", "rdma", "block"]
    search_fields = ["name", "rack"]
    # What the loop observes, learns or is about to tell the backend is not a label.
    readonly_fields = ["state", "state_reason", "health", "health_detail", "residual_gpus",
                       "uncordon_requested", "inference_gpus", "inference_profile",
                       "recent_models"]  # fmt: skip

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ["at", "kind", "message"]
    can_delete = False  # the timeline is history
    max_num = 0


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    """Jobs are submitted and cancelled through the services (the cycle releases their
    GPUs); deleting one here would leave the cluster running it."""

    list_display = ["number", "name", "owner", "queue", "tier", "gpus", "state", "pending_code"]
    list_filter = ["state", "tier", "queue"]
    search_fields = ["name", "owner__username"]
    inlines = [JobEventInline]
