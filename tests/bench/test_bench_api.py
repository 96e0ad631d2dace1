"""bench_api drives a live portal over HTTP and reports what docs/api.md quotes: list latency,
submissions side by side with the baseline insert (#16), their ratio, server CPU per request."""

from __future__ import annotations

import io
import json
import os

import pytest
from django.core.management import CommandError, call_command

from bench.models import BaselineRow
from scheduling.models import Job
from tests.browser.conftest import in_thread

pytestmark = pytest.mark.django_db(transaction=True)


def bench_api(url: str, **options) -> dict:
    out = io.StringIO()
    in_thread(  # the command runs its own event loop; Playwright's may hold this thread
        lambda: call_command(
            "bench_api", url=url, user="researcher", json=True, stdout=out, **options
        )
    )
    return json.loads(out.getvalue())


def test_a_short_run_tops_up_times_the_lists_and_submits_beside_the_baseline(
    live_server, demo, bench_endpoints
):
    report = bench_api(
        live_server.url, seconds=1, clients=2, pending=40, list_requests=2, rounds=2,
        cpu_pid=[os.getpid()],  # the live server runs in this process
    )  # fmt: skip
    submit, inserts = report["submit"], report["baseline"]
    for row in (submit, inserts):
        assert row["ok"] > 0 and row["errors"] == {} and row["per_second"] > 0
        assert row["p50_ms"] <= row["p95_ms"] <= row["max_ms"]
        assert row["cpu_ms_per_request"][str(os.getpid())] > 0
    assert report["rounds"] == 2
    assert report["ratio"] == round(submit["per_second"] / inserts["per_second"], 3)
    listed_at = report["lists"]["pending_jobs"]
    assert listed_at == 40, "the lists are timed at exactly --pending jobs, before submitting"
    assert Job.objects.filter(state="pending").count() >= listed_at + submit["ok"]
    assert BaselineRow.objects.count() >= inserts["ok"] + 1  # + the probe
    for path, row in report["lists"]["endpoints"].items():
        assert row["statuses"] == {"200": 2}, path
    assert report["load_average_before"] >= 0 and report["load_average_after"] >= 0


def test_without_the_endpoint_it_says_how_to_mount_it(live_server, demo):
    with pytest.raises(CommandError, match="BENCH_ENDPOINTS=1"):
        bench_api(live_server.url, seconds=1, clients=1, pending=0)
    assert not Job.objects.filter(name__startswith="bench-").exists(), "refused before any job"


def test_no_baseline_submits_alone(live_server, demo):
    report = bench_api(live_server.url, seconds=1, clients=2, pending=0, no_baseline=True)
    assert report["submit"]["ok"] > 0
    assert "baseline" not in report and "ratio" not in report
    assert not BaselineRow.objects.exists()


def test_an_unknown_cpu_pid_is_refused_before_any_request(live_server, demo):
    with pytest.raises(CommandError, match="--cpu-pid 999999999: no such process"):
        bench_api(live_server.url, seconds=1, clients=1, pending=0, cpu_pid=[999999999])
