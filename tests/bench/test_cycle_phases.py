"""``bench_cycle --with-db`` reports where a cycle's time goes (#16): every phase, and
``plan()`` alone on the very snapshot the cycle planned on, as a ratio."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.db import connection

from bench.scale import run_db_bench, scale_dataset
from scheduling.cycle.phases import PHASES

pytestmark = pytest.mark.django_db

SIZE = (256, 40, 20)


def test_the_db_bench_times_every_phase_and_the_plan_alone(demo):
    result = run_db_bench(*SIZE, runs=3, seed=0)
    wall, cpu = result["phases_median_ms"], result["phases_cpu_median_ms"]
    assert list(wall) == list(PHASES) and list(cpu) == list(PHASES)
    assert wall["snapshot"] > 0 and wall["plan"] > 0 and wall["observe"] > 0
    assert sum(wall.values()) <= result["median_ms"] * 1.5
    assert result["plan_alone_median_ms"] > 0
    assert result["plan_check_alone_median_ms"] >= result["plan_alone_median_ms"]
    # the ratios are rounded to 2 decimals: within half a step of the ratio of the medians
    # (a relative tolerance failed on a ratio of 0.247 written 0.25)
    assert result["cycle_over_plan_alone"] == pytest.approx(
        result["median_ms"] / result["plan_alone_median_ms"], rel=0.01, abs=0.005
    )
    assert result["plan_in_cycle_over_alone"] == pytest.approx(
        wall["plan"] / result["plan_alone_median_ms"], rel=0.01, abs=0.005
    )
    assert result["cpu_median_ms"] > 0 and result["errors"] == 0 and result["violations"] == 0


def test_the_loaded_rows_have_planner_statistics(demo):
    with scale_dataset(*SIZE), connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE relname = 'scheduling_allocation'"
        )  # without them PostgreSQL chose nested loops that took seconds
        (tuples,) = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM scheduling_allocation")
        assert tuples == cursor.fetchone()[0] > 0


def test_the_command_prints_the_phases_as_a_table(demo):
    out = io.StringIO()
    call_command("bench_cycle", gpus=256, pending=40, running=20, runs=2, with_db=True,
                 stdout=out)  # fmt: skip
    lines = out.getvalue().splitlines()
    head = lines.index("phases (median of the steady cycles): wall ms / CPU ms")
    assert any(line.strip().startswith("cycle_over_plan_alone:") for line in lines[:head])
    phases = [line.split(":")[0].strip() for line in lines[head + 1 :]]
    assert "snapshot" in phases and "plan" in phases and set(phases) <= set(PHASES)
    as_json = io.StringIO()
    call_command("bench_cycle", gpus=256, pending=40, running=20, runs=1, with_db=True,
                 json=True, stdout=as_json)  # fmt: skip
    assert set(json.loads(as_json.getvalue())["phases_median_ms"]) == set(PHASES)
