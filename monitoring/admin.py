from django.contrib import admin

from monitoring.models import Alert


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["created_at", "kind", "severity", "status", "subject", "count"]
    list_filter = ["kind", "severity", "status"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False
