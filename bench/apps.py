from django.apps import AppConfig


class BenchConfig(AppConfig):
    """The benchmark commands and ``manage.py replay``; no beat entries. Its one model and
    route are the baseline endpoint of ``bench_api`` (``bench.baseline``), mounted only with
    ``BENCH_ENDPOINTS=1``.

    Sits just below the shell: it may use every app, and no app imports it.
    """

    name = "bench"
    verbose_name = "Benchmarks"
