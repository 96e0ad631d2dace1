from django.contrib import admin

from core.admin import ReadOnlyAdmin
from monitoring.models import Alert


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    """Alerts are raised by the loop and acknowledged or resolved on the on-call console."""

    list_display = ["created_at", "kind", "severity", "status", "subject", "count"]
    list_filter = ["kind", "severity", "status"]
