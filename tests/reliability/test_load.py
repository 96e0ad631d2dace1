"""Load: the benchmark commands' code paths, small enough for every test run.

The figures at full size (100 viewers, 1,000 submissions) are in docs/reliability.md.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from tests.reliability.conftest import child_env, web_server

pytestmark = pytest.mark.django_db(transaction=True)


def run_json(command: str, **options) -> dict:
    out = StringIO()
    call_command(command, json=True, stdout=out, **options)
    return json.loads(out.getvalue())


def test_websocket_viewers_get_each_cycle_within_a_second_of_its_commit(demo, scratch):
    with web_server(child_env(), scratch / "web.log") as base:
        result = run_json("bench_live", url=base, viewers=10, cycles=3, interval=0.2)
    assert result["viewer_errors"] == []
    assert result["delivered"] == result["expected"] == 30, result
    assert result["p95_ms"] < 1000, result


def test_viewers_that_refetch_the_home_page_each_read_a_fresh_one_after_each_cycle(demo, scratch):
    """``--refetch``: each viewer GETs the page after each event, as a visible live page
    does; every one is read (200), and the timings are of pages, after the events."""
    with web_server(child_env(), scratch / "web.log") as base:
        result = run_json(
            "bench_live", url=base, viewers=6, cycles=2, interval=0.5, refetch="/", spread_ms=300
        )
    assert result["refetch_errors"] == 0, result
    assert result["pages_read"] == result["expected"] == 12, result
    assert result["page_p50_ms"] > 150 and result["last_page_max_ms"] >= result["page_p95_ms"]
    assert result["page_p50_ms"] > result["p50_ms"], result  # a page comes after its event


def test_a_burst_of_submissions_is_admitted_and_judged_by_the_next_cycle(demo, scratch):
    with web_server(child_env(), scratch / "web.log") as base:
        result = run_json("bench_burst", url=base, jobs=60, seconds=30, clients=4)
    assert result["ok"], result
    assert result["submit"]["statuses"] == {"201": 60}
    assert result["admitted"]["stored"] == 60 == result["admitted"]["submitted_events"]
    cycle = result["next_cycle"]
    assert cycle["started"] + cycle["waiting_with_reason"] == 60, cycle
    assert cycle["waiting_without_reason"] == 0


def test_the_burst_command_fails_when_a_submission_is_refused(demo, scratch):
    from django.core.management.base import CommandError

    with web_server(child_env(), scratch / "web.log") as base, pytest.raises(CommandError) as err:
        run_json("bench_burst", url=base, jobs=3, seconds=30, clients=1, queue="no-such-queue")
    assert "HTTP 400" in str(err.value)
