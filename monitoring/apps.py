from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    """Alerts, metrics, the dashboard and the on-call console; listens to the loop's alerts."""

    name = "monitoring"
    verbose_name = "Monitoring and alerts"

    def ready(self) -> None:
        from monitoring.services import keep_scheduling_alert
        from scheduling.alerts import alert_raised

        alert_raised.connect(keep_scheduling_alert, dispatch_uid="monitoring.keep_alert")
