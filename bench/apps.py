from django.apps import AppConfig


class BenchConfig(AppConfig):
    """The benchmark commands and ``manage.py replay``; no models, no URLs, no beat entries.

    Sits just below the shell: it may use every app, and no app imports it.
    """

    name = "bench"
    verbose_name = "Benchmarks"
