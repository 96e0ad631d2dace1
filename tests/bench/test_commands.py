"""The bench commands: same names and options as before their move, small runs, bad input refused.

The commands that drive a running portal (bench_api, bench_live, bench_burst) are run
end to end in tests/bench/test_bench_api.py and tests/reliability/test_load.py; here
their options, their checks before any request and their reports.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command, get_commands, load_command_class
from rest_framework.authtoken.models import Token

from bench.cli import api_token
from bench.management.commands import bench_api, bench_burst, bench_live, bench_pages
from scheduling.models import Job, Node

REPO = Path(__file__).resolve().parents[2]
COMMANDS = ("bench_api", "bench_burst", "bench_cycle", "bench_live", "bench_pages", "replay")


def run(command: str, **options) -> str:
    out = io.StringIO()
    call_command(command, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def help_of(command: str) -> str:
    return load_command_class("bench", command).create_parser("manage.py", command).format_help()


# -- where they live ------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_every_benchmark_command_belongs_to_the_bench_app(command):
    assert get_commands()[command] == "bench"


def test_no_benchmark_code_is_left_in_the_production_apps():
    leftovers = [
        p.relative_to(REPO).as_posix()
        for app in ("scheduling", "quotas", "monitoring", "core", "portal")
        for p in (REPO / app).rglob("*.py")
        if p.stem.startswith("bench") or p.stem in ("latency", "replay")
    ]
    assert leftovers == []
    assert not (REPO / "scheduling" / "replay").exists()
    assert not (REPO / "scheduling" / "traces").exists()


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("bench_api", ("--url", "--token", "--user", "--seconds", "--clients", "--pending",
                       "--list-requests", "--json")),
        ("bench_burst", ("--url", "--jobs", "--seconds", "--clients", "--spread", "--user",
                         "--queue", "--gpus", "--no-cycle", "--json")),
        ("bench_live", ("--url", "--viewers", "--cycles", "--interval", "--users", "--workload",
                        "--refetch", "--spread-ms", "--json")),
        ("bench_cycle", ("--gpus", "--pending", "--running", "--runs", "--seed", "--with-db",
                         "--dependents", "--json")),
        ("bench_pages", ("--gpus", "--pending", "--running", "--runs", "--json")),
        ("replay", ("--policy", "--pool-gpus", "--window", "--seed", "--json", "--out",
                    "--cycle-s", "--replan-s", "--check", "--progress")),
    ],
)  # fmt: skip
def test_the_options_are_unchanged(command, options):
    text = help_of(command)
    for option in options:
        assert option in text, option


# -- the engine and the scale benchmarks ------------------------------------------------


def test_bench_cycle_times_the_engine_and_prints_json():
    result = json.loads(run("bench_cycle", gpus=160, pending=20, running=10, runs=1, json=True))
    assert result["gpus"] == 160 and result["pending"] == 20 and result["runs"] == 1
    assert result["violations"] == 0


def test_bench_cycle_prints_one_line_per_figure():
    lines = run("bench_cycle", gpus=80, pending=5, running=3, runs=1).splitlines()
    assert any(line.strip().startswith("median_ms:") for line in lines)
    keys = [line.split(":")[0].strip() for line in lines]
    assert keys == sorted(keys)


@pytest.mark.parametrize(
    "options",
    [{"gpus": 0}, {"runs": 0}, {"pending": -1}, {"running": 200_001}, {"gpus": 300_000}],
)
def test_bench_cycle_refuses_sizes_out_of_range(options):
    with pytest.raises(CommandError, match="out of range"):
        run("bench_cycle", **{"gpus": 80, "pending": 5, "running": 3, "runs": 1, **options})


@pytest.mark.django_db
def test_bench_cycle_with_db_runs_cycles_and_leaves_the_database_as_it_was(demo):
    nodes, jobs = Node.objects.count(), Job.objects.count()
    result = json.loads(
        run("bench_cycle", gpus=128, pending=20, running=10, runs=2, with_db=True, json=True)
    )
    assert result["runs"] == 2 and result["errors"] == 0 and result["violations"] == 0
    assert result["median_ms"] > 0 and result["p95_ms"] >= result["median_ms"]
    assert sum(result["pending_by_reason_last"].values()) <= 20
    assert (Node.objects.count(), Job.objects.count()) == (nodes, jobs)


@pytest.mark.django_db
def test_bench_pages_renders_every_page_and_rolls_back(demo):
    nodes = Node.objects.count()
    result = json.loads(run("bench_pages", gpus=64, pending=10, running=5, runs=1, json=True))
    assert set(result) == set(bench_pages.PAGES)
    assert {row["status"] for row in result.values()} == {200}
    assert Node.objects.count() == nodes


@pytest.mark.parametrize(
    "options", [{"gpus": 4}, {"gpus": 100_001}, {"pending": 100_001}, {"runs": 0}, {"runs": 101}]
)
def test_bench_pages_refuses_sizes_out_of_range(options):
    with pytest.raises(CommandError, match="--gpus 8..100000"):
        run("bench_pages", **{"gpus": 64, "pending": 5, "running": 3, "runs": 1, **options})


# -- the client benchmarks: checks before any request, and their reports ---------------------


@pytest.mark.parametrize(
    ("command", "options", "message"),
    [
        ("bench_api", {"clients": 0}, "--clients must be >= 1"),
        ("bench_api", {"seconds": 0}, "--seconds > 0"),
        ("bench_burst", {"jobs": 0}, "--jobs and --clients must be >= 1"),
        ("bench_burst", {"clients": 0}, "--jobs and --clients must be >= 1"),
        ("bench_live", {"viewers": 0}, "--viewers and --cycles must be >= 1"),
        ("bench_live", {"spread_ms": -1}, "--spread-ms must be between 0 and 60000"),
        ("bench_live", {"interval": -1}, "--interval >= 0"),
    ],
)
def test_client_benchmarks_refuse_bad_sizes_before_any_request(command, options, message):
    with pytest.raises(CommandError, match=message):
        run(command, url="http://127.0.0.1:9", **options)


@pytest.mark.django_db
def test_the_api_token_is_the_users_own_and_stays_the_same(demo):
    key = api_token("researcher")
    assert Token.objects.get(key=key).user == demo["researcher"]
    assert api_token("researcher") == key


@pytest.mark.django_db
def test_no_token_for_an_unknown_or_inactive_user(demo):
    with pytest.raises(CommandError, match="no active user 'nobody'"):
        api_token("nobody")
    demo["researcher"].is_active = False
    demo["researcher"].save()
    with pytest.raises(CommandError, match="no active user 'researcher'"):
        api_token("researcher")


LATENCY = {"p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "max_ms": 4.0}


def test_bench_api_report_lists_the_submissions_then_each_endpoint():
    result = {
        "submit": {"ok": 10, "seconds": 1.0, "clients": 2, "per_second": 10.0, "errors": {},
                   **LATENCY},
        "lists": {"pending_jobs": 40, "endpoints": {
            "jobs/": {"statuses": {"200": 2}, **LATENCY},
            "nodes/": {"statuses": {"200": 2}, **LATENCY},
        }},
    }  # fmt: skip
    lines = bench_api.report(result)
    assert lines[0].startswith("submissions: 10 in 1.0 s with 2 clients = 10.0/s; p50 1.0 ms")
    assert lines[0].endswith("errors 0")
    assert lines[1] == "lists at 40 pending jobs:"
    assert [line.split()[1] for line in lines[2:]] == ["jobs/", "nodes/"]
    del result["lists"]
    assert len(bench_api.report(result)) == 1


def test_bench_burst_report_names_the_burst_and_the_next_cycle():
    result = {
        "jobs": 60, "clients": 4, "allowed_s": 30.0,
        "submit": {"seconds": 2.5, "per_second": 24.0, "statuses": {"201": 60}, **LATENCY},
        "admitted": {"stored": 60, "submitted_events": 60},
        "next_cycle": {"cycle_ms": 12.0, "started": 32, "waiting_with_reason": 28,
                       "waiting_without_reason": 0},
    }  # fmt: skip
    first, cycle = bench_burst.report(result)
    assert first.startswith("60 submissions from 4 clients in 2.5 s (24.0/s; allowed 30 s)")
    assert "stored 60 with 60 'submitted' events" in first
    assert cycle == "next cycle: 12.0 ms; 32 started, 28 waiting with a reason, 0 without"


def test_bench_burst_problems_name_what_went_wrong():
    result = {
        "jobs": 3, "allowed_s": 1.0,
        "submit": {"errors": {"HTTP 400: bad": 3}, "seconds": 2.0},
        "admitted": {"stored": 0, "submitted_events": 0},
        "next_cycle": {"waiting_without_reason": 2},
    }  # fmt: skip
    problems = bench_burst.Command._problems(result)
    assert problems == [
        "errors {'HTTP 400: bad': 3}",
        "took 2.0 s, more than 1.0 s",
        "0 stored, 0 submitted events",
        "2 jobs wait without a reason",
    ]


def test_bench_live_report_adds_retries_and_errors_only_when_there_are_some():
    result = {
        "viewers": 10, "cycles": 3, "delivered": 30, "expected": 30, "lost": 0,
        "cycle_ms_p50": 5.0, "cycle_ms_max": 9.0, "job_changes_per_cycle_max": 4,
        "setup_retries": 0, "setup_errors": [], "viewer_errors": [], **LATENCY,
    }  # fmt: skip
    (line,) = bench_live.report(result)
    assert line.startswith("10 viewers x 3 cycles: 30/30 cycle.completed delivered (lost 0)")
    result.update(setup_retries=2, setup_errors=["TimeoutError: x"], viewer_errors=["closed"])
    _, retries, errors = bench_live.report(result)
    assert retries.startswith("2 connections retried") and errors == "viewer errors: ['closed']"


@pytest.mark.django_db
def test_bench_usage_times_the_report_and_rolls_back(demo):
    from scheduling.models import JobRun

    users = type(demo["admin"]).objects.count()
    result = json.loads(run("bench_usage", runs=3000, repeat=1, json=True))
    assert result["runs"] == 3000 and len(result["months"]) == 3
    month = next(iter(result["months"].values()))
    assert month["median_ms"] > 0 and month["runs_in_month"] > 0 and month["people"] > 5
    assert not JobRun.objects.exists() and type(demo["admin"]).objects.count() == users


@pytest.mark.parametrize("options", [{"runs": 0}, {"repeat": 0}, {"runs": 10_000_001}])
def test_bench_usage_refuses_sizes_out_of_range(options):
    with pytest.raises(CommandError, match="--runs 1..10000000"):
        run("bench_usage", **{"runs": 10, "repeat": 1, **options})
