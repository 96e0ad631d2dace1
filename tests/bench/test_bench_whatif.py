"""``manage.py bench_whatif``: a small run prints its figures and leaves the database as it was."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command, get_commands

from scheduling import whatif
from scheduling.models import Job, Node


def run(**options) -> str:
    out = io.StringIO()
    call_command("bench_whatif", stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def test_it_belongs_to_the_bench_app():
    assert get_commands()["bench_whatif"] == "bench"


@pytest.mark.django_db
def test_a_small_run_times_cold_and_warm_what_ifs_and_rolls_back(demo):
    nodes, jobs = Node.objects.count(), Job.objects.count()
    result = json.loads(run(gpus=160, pending=20, running=10, runs=2, json=True))
    assert (result["gpus"], result["nodes"], result["runs"]) == (160, 20, 2)
    for kind in ("cold", "warm"):
        row = result[kind]
        assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["max_ms"] and row["cpu_median_ms"] > 0
    assert result["cold"]["snapshot_median_ms"] > 0 and result["warm"]["plan_median_ms"] > 0
    assert len(result["answers"]) == 2 and all(result["answers"].values())
    assert (Node.objects.count(), Job.objects.count()) == (nodes, jobs)
    assert whatif.CACHE_SECONDS == 5.0, "the command puts the cache's lifetime back"


@pytest.mark.django_db
def test_the_human_output_has_one_line_per_figure(demo):
    lines = run(gpus=80, pending=5, running=3, runs=1).splitlines()
    assert lines[0].startswith("what-if on 80 GPUs (10 nodes)")
    assert lines[1].startswith("snapshot rebuilt: p50 ")
    assert lines[2].startswith("snapshot cached:  p50 ")


@pytest.mark.parametrize("options", [{"gpus": 4}, {"pending": 100_001}, {"runs": 0}])
def test_sizes_out_of_range_are_refused(options):
    with pytest.raises(CommandError, match="--gpus 8..100000"):
        run(**{"gpus": 64, "pending": 5, "running": 3, "runs": 1, **options})
