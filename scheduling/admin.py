from django.contrib import admin

from core.admin import ReadOnlyAdmin
from scheduling.models import Job, JobArray, JobEvent, MaintenanceWindow, Node


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    """Nodes are shown here, never added, changed or deleted. Every column is either what
    the backend reports (name, rack, block, GPU model and memory, GPU count, RDMA,
    inference: ``sync_nodes`` registers the row from it, the cycle plans with what it
    observes and finds the row by name, the simulator's inventory is these columns) or
    what the loop observes, learns or is about to tell the backend (state, health,
    residual and inference GPUs, recent models, an uncordon on its way). A node renamed
    here no longer named its backend node; its GPU count changed here, the pages, the
    submit checks and the quota capacity counted GPUs the plan does not have. State
    changes go through the on-call services; nodes come and go with the backend."""

    list_display = ["name", "rack", "block", "gpu_model", "gpus_total", "rdma", "state", "health"]
    list_filter = ["state", "health", "gpu_model", "rdma", "block"]
    search_fields = ["name", "rack"]


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ["at", "kind", "message"]
    can_delete = False  # the timeline is history
    max_num = 0


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    """Jobs are submitted, cancelled, held and released through the services (the cycle
    releases their GPUs, suspends held running jobs); deleting one here would leave the
    cluster running it, and a hold set here would skip its audit record and timeline."""

    list_display = ["number", "name", "owner", "queue", "tier", "gpus", "state", "pending_code",
                    "hold_kind"]  # fmt: skip
    list_filter = ["state", "tier", "queue", "hold_kind"]
    search_fields = ["name", "owner__username"]
    inlines = [JobEventInline]


@admin.register(JobArray)
class JobArrayAdmin(ReadOnlyAdmin):
    """Job arrays are submitted, cancelled and re-bounded through
    ``scheduling.array_services`` (the array page, the API, gpuctl), which check who may,
    write the tasks' timelines and the audit records. A spec or size changed here would no
    longer say what the tasks are; a bound changed here would skip its audit record."""

    list_display = ["id", "name", "owner", "queue", "spec", "size", "max_running", "created_at"]
    list_filter = ["queue"]
    search_fields = ["name", "owner__username"]


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(ReadOnlyAdmin):
    """Maintenance windows are scheduled and cancelled through
    ``scheduling.nodes.maintenance`` (the node page, the API, ``gpuctl maintenance``), which
    check the times, the nodes and overlaps and write the audit records; the loop starts and
    ends them. A window changed here would drain or return nodes nobody asked for, or leave
    drained nodes out of the pool."""

    list_display = ["id", "reason", "starts_at", "ends_at", "state", "created_by"]
    list_filter = ["state"]
    search_fields = ["reason", "nodes__name"]
