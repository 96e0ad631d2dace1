"""/metrics at constant cost (#17) and the new series (#18): counters and histograms come
from where the work happened (summed over processes in multiprocess mode), not from
tables, so the scrape does not slow down as cycle rows pile up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from core import telemetry
from tests.drills import cycle, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db


def scrape(demo) -> dict:
    client = Client()
    client.force_login(demo["admin"])
    out: dict = {}
    for family in text_string_to_metric_families(client.get("/metrics").content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_bench_metrics_prints_each_size_and_rolls_back(demo):
    """The command prints one timing row per size and leaves no rows behind. Whether the
    time stays flat is the command's figure (docs/benchmarks.md), not a timed test: that
    the scrape does not recount cycles or the job history is checked through its SQL in
    test_the_finished_job_history_is_not_counted_at_scrape_time."""
    out = StringIO()
    call_command("bench_metrics", sizes="1000,5000", runs=3, json=True, stdout=out)
    rows = json.loads(out.getvalue())
    assert [r["cycle_rows"] for r in rows] == [1000, 5000]
    assert all(r["runs"] == 3 and 0 < r["median_ms"] <= r["p95_ms"] for r in rows), rows
    from scheduling.models import SchedulingCycle

    assert SchedulingCycle.objects.count() == 0, "the bench rolled back its rows"


def test_bench_metrics_runs_under_make_run_and_production_settings(demo, settings):
    """Not only under the test settings (which allow the test client's host): ``make run``
    allows 127.0.0.1 and localhost, production its public name and redirects to HTTPS."""
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    settings.SECURE_SSL_REDIRECT = True
    out = StringIO()
    call_command("bench_metrics", sizes="10", runs=2, json=True, stdout=out)
    assert [r["cycle_rows"] for r in json.loads(out.getvalue())] == [10]


def test_the_finished_job_history_is_not_counted_at_scrape_time(demo):
    """Jobs are kept forever; a scrape that counted them by state grew with the history
    (bench_metrics --finished-jobs: 1M finished jobs added ~500 ms). gpuportal_jobs is the
    live states only, read through the (state, queue) index."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduling.models import Job

    out = StringIO()
    call_command("bench_metrics", sizes="1,200", runs=1, json=True, finished_jobs=True, stdout=out)
    assert [r["job_rows"] for r in json.loads(out.getvalue())] == [1, 200]
    assert not Job.objects.exists(), "the bench rolled back its jobs"

    from quotas.models import Queue

    queue = Queue.objects.get(name="llm-core")
    spec = {"owner": demo["researcher"], "queue": queue, "tier": queue.tier, "gpus": 1,
            "gpus_per_node": 1}  # fmt: skip
    Job.objects.bulk_create(
        [Job(name=f"done-{i}", state="succeeded", **spec) for i in range(30)]
        + [Job(name="waits", state="pending", **spec)]
    )
    with CaptureQueriesContext(connection) as queries:
        m = scrape(demo)
    jobs = {dict(labels)["state"]: v for (name, labels), v in m.items() if name == "gpuportal_jobs"}
    assert jobs == {"pending": 1, "running": 0, "preempting": 0}
    from scheduling.models import SchedulingCycle

    job_table = Job._meta.db_table
    for query in queries.captured_queries:
        sql = query["sql"]
        assert SchedulingCycle._meta.db_table not in sql, sql  # cycles: recorded, not recounted
        if sql.startswith("SELECT DISTINCT"):
            assert '"name"' not in sql, sql  # one row per GPU model, not one per node
        if f'FROM "{job_table}"' in sql and "GROUP BY" in sql:
            assert '"state" IN' in sql or '"state" =' in sql, sql  # never all of history


def test_new_series_exist_from_the_start_with_zeros(demo):
    telemetry.reset()
    m = scrape(demo)
    assert m[("gpuportal_job_wait_seconds_count", (("queue", "llm-core"),))] == 0
    assert m[("gpuportal_jobs_admitted_total", (("queue", "llm-core"),))] == 0
    assert m[("gpuportal_preemptions_total", (("queue", "llm-core"), ("reason", "inference")))] == 0
    assert m[("gpuportal_scheduling_cycle_duration_seconds_count", (("kind", "sweep"),))] == 0
    assert m[("gpuportal_pending_jobs", (("reason", "QUOTA_EXCEEDED"),))] == 0
    assert m[("gpuportal_alerts", (("kind", "backend_error"), ("severity", "critical")))] == 0
    (info,) = [k for k in m if k[0] == "gpuportal_build_info"]
    assert ("version", "0.1.0") in info[1]
    gpus = {k[1]: v for k, v in m.items() if k[0] == "gpuportal_gpus"}
    assert sum(gpus.values()) == m[("gpuportal_cluster_gpus", ())] == 32
    assert all(dict(labels)["gpu_model"] for labels in gpus)


def test_a_start_is_admitted_and_its_wait_observed_per_queue(
    api, demo, django_capture_on_commit_callbacks
):
    telemetry.reset()
    make_quotas_roomy()
    admin, me = api("admin"), api("researcher")
    with django_capture_on_commit_callbacks(execute=True):
        submit(me, gpus=8, queue="llm-core")
        submit(me, gpus=4, queue="llm-finetune")
        cycle(admin)
    m = scrape(demo)
    for queue in ("llm-core", "llm-finetune"):
        assert m[("gpuportal_jobs_admitted_total", (("queue", queue),))] == 1
        assert m[("gpuportal_job_wait_seconds_count", (("queue", queue),))] == 1
    assert m[("gpuportal_jobs_admitted_total", (("queue", "llm-urgent"),))] == 0
    assert m[("gpuportal_scheduling_cycle_duration_seconds_count", (("kind", "cycle"),))] == 1


def test_a_rolled_back_cycle_counts_nothing(api, demo, django_capture_on_commit_callbacks):
    telemetry.reset()
    with django_capture_on_commit_callbacks(execute=False):
        cycle(api("admin"))  # the commit never comes
    m = scrape(demo)
    assert m[("gpuportal_scheduling_cycle_duration_seconds_count", (("kind", "cycle"),))] == 0


def test_multiprocess_mode_sums_the_values_of_every_process(demo, tmp_path, monkeypatch):
    """Two other processes (a web worker, a Celery worker) record; a scrape here sums."""
    code = (
        "from core import telemetry\n"
        "telemetry.JOBS_ADMITTED.labels('llm-core').inc(3)\n"
        "telemetry.CYCLE_DURATION.labels('cycle').observe(0.2)\n"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    m = scrape(demo)
    assert m[("gpuportal_jobs_admitted_total", (("queue", "llm-core"),))] == 6
    assert m[("gpuportal_scheduling_cycle_duration_seconds_count", (("kind", "cycle"),))] == 2
