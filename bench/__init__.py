"""Benchmarks and the trace replay's command: measuring the portal, never part of serving it.

A Django app above the others (below the ``portal`` shell; import-linter layers in
pyproject.toml), so a benchmark may use every app's models and services and no app
imports it. Entry points (docs/benchmarks.md):

- ``manage.py bench_cycle`` (engine alone, or ``--with-db``), ``bench_pages``,
  ``bench_api``, ``bench_live``, ``bench_burst``; ``manage.py replay`` (the
  Django-free ``replay`` package behind a command);
- ``python -m bench.engine`` and ``python -m bench.simcore``: the pure cores timed
  without Django.
"""
