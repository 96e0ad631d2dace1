from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    """Alerts, metrics, the dashboard and the on-call console; listens to the loop's alerts
    and to its applied plans (idle GPUs by cause), and gives the loop the queues' eviction
    figures (borrowing, #19)."""

    name = "monitoring"
    verbose_name = "Monitoring and alerts"

    def ready(self) -> None:
        from monitoring.idle_account import record_plan
        from monitoring.rollup import get_eviction_readings
        from monitoring.services import keep_scheduling_alert
        from scheduling.alerts import alert_raised
        from scheduling.borrow_inputs import provide_eviction_readings
        from scheduling.observers import plan_applied

        alert_raised.connect(keep_scheduling_alert, dispatch_uid="monitoring.keep_alert")
        plan_applied.connect(record_plan, dispatch_uid="monitoring.idle_by_cause")
        # the scheduler's borrowing rules read each queue's eviction figures (#19)
        provide_eviction_readings(get_eviction_readings)
