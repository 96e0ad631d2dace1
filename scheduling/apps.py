from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        """Make cluster time the portal's one clock (``core.clock.now``), and keep the
        shared nodes' inference GPUs as of every applied plan (``nodes.inference``)."""
        from core import clock
        from scheduling.clock import cluster_now
        from scheduling.nodes.inference import record_plan
        from scheduling.observers import plan_applied

        clock.set_provider(cluster_now)
        plan_applied.connect(record_plan, dispatch_uid="scheduling.inference_gpus")
