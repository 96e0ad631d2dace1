"""The replay's two entry points: ``python -m replay`` and ``manage.py replay``."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from replay import workload
from replay.cli import scenario_slug
from tests.no_django import run_without_django

REPO = Path(__file__).resolve().parents[2]
CONTRACT = (
    "jobs",
    "avg_queue_s",
    "median_queue_s",
    "p95_queue_s",
    "avg_jct_s",
    "utilization",
    "backlog_utilization",
)
MORE = ("fragmentation", "preemptions", "eviction_ratio", "jobs_demoted")


def assert_contract(obj: dict) -> None:
    assert {"overall", "per_queue"} <= set(obj)
    for entry in [obj["overall"], *obj["per_queue"].values()]:
        for key in CONTRACT + MORE:
            assert key in entry, key
    assert "sim_days_per_wall_s" in obj["overall"]


def test_python_m_prints_exactly_one_json_object_without_django():
    out = run_without_django("replay", "itp", "--window", "0:1h", "--policy", "backfill", "--json")
    obj = json.loads(out)  # one object and nothing else
    assert_contract(obj)
    assert obj["trace"] == "itp" and obj["policy"] == "backfill"
    assert obj["per_queue"] and obj["overall"]["jobs"] == sum(
        q["jobs"] for q in obj["per_queue"].values()
    )
    # per tier, urgent first: who pays for a policy (#19)
    tiers = list(obj["per_tier"])
    assert tiers == [t for t in ("urgent", "core", "finetune", "experiment") if t in tiers]
    assert obj["overall"]["jobs"] == sum(t["jobs"] for t in obj["per_tier"].values())


def test_the_package_and_its_trace_readers_never_import_django():
    paths = sorted((REPO / "replay").rglob("*.py"))
    assert REPO / "replay" / "traces" / "readers.py" in paths
    for path in paths:
        text = path.read_text()
        assert not re.search(r"^\s*(from|import)\s+django", text, re.M), path


def test_manage_py_replay_json(tmp_path):
    out = io.StringIO()
    call_command(
        "replay", "philly", window="2017-10-02:2017-10-03", policy="fifo", json=True, stdout=out
    )
    obj = json.loads(out.getvalue())
    assert_contract(obj)
    assert obj["layout"] == "isolated" and len(obj["per_queue"]) == 11
    assert obj["overall"]["preemptions"] == 0
    # fifo does not borrow: no eviction window is kept, so no peak is claimed
    assert obj["overall"]["peak_window_eviction_ratio"] is None
    assert obj["overall"]["queues_over_alert_line"] == []
    assert obj["command"] == (
        "python manage.py replay philly --policy fifo --window 2017-10-02:2017-10-03"
    )


def test_out_dir_gets_markdown_and_a_self_contained_html_comparing_policies(tmp_path):
    for policy in ("fifo", "backfill"):
        call_command(
            "replay",
            "itp",
            window="0:2h",
            policy=policy,
            pool_gpus=128,
            out=str(tmp_path),
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    slug = "itp-shared128-0_2h-seed0-cycle60"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{slug}--backfill.json",
        f"{slug}--fifo.json",
        f"{slug}.html",
        f"{slug}.md",
    ]
    md = (tmp_path / f"{slug}.md").read_text()
    assert "## Per queue: fifo" in md and "## Per queue: backfill" in md
    assert "--pool-gpus 128" in md
    # the window peak is a whole-run figure: a column of the policies' table only (neither
    # policy borrows: "-"), not of the per-queue tables
    header = next(line for line in md.splitlines() if line.startswith("| policy |"))
    assert header.count("highest 72 h eviction ratio of a queue") == 1
    assert md.count("highest 72 h eviction ratio of a queue") == 1
    html = (tmp_path / f"{slug}.html").read_text()
    assert html.count("Plotly.newPlot") == 5  # utilization, delays, 3 per-queue bar charts
    # No external script: plotly.js itself is inline (its source merely mentions a
    # cdn.plot.ly URL for geo maps, which these figures never fetch).
    assert not re.search(r"<script[^>]+src=", html)
    assert "cdn.plot.ly/plotly" not in html
    assert len(html) > 1_000_000  # plotly.js is inline
    assert '"name":"fifo"' in html and '"name":"backfill"' in html


def test_human_output(tmp_path):
    out = io.StringIO()
    call_command("replay", "itp", window="0:1h", policy="priority", stdout=out)
    text = out.getvalue()
    assert "policy priority" in text and "overall" in text and "cluster07" in text


def test_human_output_says_what_the_jobs_waited_for():
    out = io.StringIO()
    call_command("replay", "itp", window="0:6h", pool_gpus=128, policy="full", stdout=out)
    text = out.getvalue()
    head, _, table = text.partition("queueing delay by what the jobs waited for")
    assert table, text
    assert "highest 72 h eviction ratio of a queue at a plan (3 evictions" in head
    assert "over the 15% alert line at some point: " in head
    section = table.split("\n\n")[0].splitlines()[1:]  # up to the next blank line
    rows = [line.split() for line in section]
    assert rows and all(r[-2] == "s" and r[-1].endswith("%") for r in rows)
    assert "INSUFFICIENT_GPUS" in {r[0] for r in rows}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nosuchtrace",), "unknown trace"),
        (("itp", "--pool-gpus", "12"), "multiple of 8"),
        (("philly", "--window", "2017-10-03:2017-10-01"), "END must be after START"),
        (("itp", "--window", "100d:101d"), "no jobs"),
        (("itp", "--borrow", "cooldown=5"), "--borrow takes NAME=VALUE"),
        (("itp", "--borrow", "borrow_forecast=maybe"), "takes true or false"),
        (("itp", "--cycle-s", "1e309"), "--cycle-s must be > 0"),
        (("itp", "--cycle-s", "nan"), "--cycle-s must be > 0"),
        (("itp", "--replan-s", "nan"), "--replan-s must be >= 0"),
        (("itp", "--replan-s", "inf"), "--replan-s must be >= 0"),
        ((str(Path(__file__).parent),), "Is a directory"),  # a folder given as the trace
    ],
)
def test_bad_arguments_are_command_errors(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("replay", *args, stdout=io.StringIO())


def test_windows_parse_dates_datetimes_and_durations():
    assert workload.parse_seconds("90") == 90.0
    assert workload.parse_seconds("1.5h") == 5400.0
    assert workload.seconds_window("0:7d") == (0.0, 7 * 86400.0)
    assert workload.seconds_window(":2h") == (None, 7200.0)
    s, e = workload.philly_window("2017-10-02T06:30:00:2017-10-02T18:00")
    assert (s.hour, s.minute, e.hour) == (6, 30, 18)
    s, e = workload.philly_window(None)
    assert (s.date().isoformat(), e.date().isoformat()) == ("2017-10-01", "2017-12-01")


def test_scenario_slug_names_the_layout():
    base = {"trace": "philly", "seed": 0, "cycle_s": 60.0, "window": "2017-10-01:2017-12-01"}
    assert (
        scenario_slug({**base, "layout": "isolated", "pool_gpus": None})
        == "philly-isolated-2017-10-01_2017-12-01-seed0-cycle60"
    )
    assert scenario_slug({**base, "layout": "shared", "pool_gpus": 2816}).startswith(
        "philly-shared2816-"
    )


def test_borrow_options_set_the_engines_borrowing_rules_and_are_reproducible():
    """#19: ``--borrow NAME=VALUE`` sets a borrowing rule of the run's policy, is recorded in
    the JSON and written back into the command line that reproduces the run."""
    from replay.cli import build_parser, command_line, config_from
    from replay.replay import Replay
    from replay.workload import build_layout, load_workload

    args = ["itp", "--window", "0:1h", "--borrow", "borrow_cooldown_s=0"]
    args += ["--borrow", "borrow_forecast_all=true"]
    config = config_from(vars(build_parser().parse_args(args)))
    assert config.borrow == (("borrow_cooldown_s", 0.0), ("borrow_forecast_all", True))
    line = command_line(config)
    assert "--borrow borrow_cooldown_s=0 --borrow borrow_forecast_all=true" in line
    w = load_workload("itp", "0:1h", 0)
    policy = Replay(w, build_layout(w, None), config).policy
    assert (policy.borrow_cooldown_s, policy.borrow_forecast_all) == (0.0, True)
    assert policy.borrow_queue_cooldown_s == 1800.0  # the engine's default, untouched


def test_true_runtimes_plans_with_each_jobs_true_runtime_in_the_policys_own_order():
    """``--true-runtimes`` (a bound: what perfect prediction buys a policy) feeds the engine
    each job's true remaining runtime but keeps the policy's order (submit time as the order
    key), unlike ``oracle-sjf``, whose key is the runtime; it is written back into the
    command line that reproduces the run."""
    from replay.cli import build_parser, command_line, config_from
    from replay.replay import Replay
    from replay.workload import build_layout, load_workload

    w = load_workload("itp", "0:1h", 0)
    args = ["itp", "--window", "0:1h", "--policy", "full", "--true-runtimes"]
    config = config_from(vars(build_parser().parse_args(args)))
    assert config.true_runtimes and "--true-runtimes" in command_line(config)
    r = Replay(w, build_layout(w, None), config)
    learnt = Replay(w, build_layout(w, None), config_from({"trace": "itp", "policy": "full"}))
    sjf = Replay(w, build_layout(w, None), config_from({"trace": "itp", "policy": "oracle-sjf"}))
    seen = [(r._pending_view(j), learnt._pending_view(j), sjf._pending_view(j), j) for j in r.jobs]
    assert any(b.predicted_runtime_s != j.duration for _, b, _, j in seen)  # learnt differs
    for true, _, by_runtime, j in seen:
        assert true.predicted_runtime_s == by_runtime.predicted_runtime_s == j.duration
        assert true.submitted_at == j.submit and by_runtime.submitted_at == j.duration
