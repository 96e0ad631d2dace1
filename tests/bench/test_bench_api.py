"""bench_api drives a live portal over HTTP and reports what docs/api.md quotes."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from scheduling.models import Job
from tests.browser.conftest import in_thread

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_short_run_tops_up_times_the_lists_and_submits(live_server, demo):
    out = io.StringIO()
    in_thread(  # the command runs its own event loop; Playwright's may hold this thread
        lambda: call_command(
            "bench_api", url=live_server.url, user="researcher", seconds=1, clients=2,
            pending=40, list_requests=2, json=True, stdout=out,
        )
    )  # fmt: skip
    report = json.loads(out.getvalue())
    submit = report["submit"]
    assert submit["ok"] > 0 and submit["errors"] == {} and submit["per_second"] > 0
    assert submit["p50_ms"] <= submit["p95_ms"] <= submit["max_ms"]
    listed_at = report["lists"]["pending_jobs"]
    assert listed_at == 40, "the lists are timed at exactly --pending jobs, before submitting"
    assert Job.objects.filter(state="pending").count() >= listed_at + submit["ok"]
    for path, row in report["lists"]["endpoints"].items():
        assert row["statuses"] == {"200": 2}, path
