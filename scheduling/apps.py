from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        """Make cluster time the portal's one clock (``core.clock.now``)."""
        from core import clock
        from scheduling.clock import cluster_now

        clock.set_provider(cluster_now)
