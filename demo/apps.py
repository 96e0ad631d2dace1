from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The simulator demo: ``seed_demo`` and the beat entry that submits its workload.

    Sits beside the shell: it may use every app's services, and no app imports it.
    """

    name = "demo"
    verbose_name = "Simulator demo"
