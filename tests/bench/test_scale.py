"""The benchmark cluster as rows: what the engine benchmark builds, loaded and rolled back."""

from __future__ import annotations

import pytest
from django.db import connections

from bench.engine import build_snapshot
from bench.scale import LoopRunning, run_db_bench, scale_dataset
from quotas.models import BusinessLine, Queue
from scheduling.cluster_lock import CLUSTER_LOCK_KEY
from scheduling.models import Allocation, ClusterSettings, Job, Node, SimulatorState

pytestmark = pytest.mark.django_db

SIZE = (128, 20, 10)


def counts() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (Node, Job, Queue, BusinessLine, Allocation))


def test_the_rows_are_the_engine_benchmarks_cluster(demo):
    snap = build_snapshot(*SIZE, seed=0)
    with scale_dataset(*SIZE) as load_s:
        assert load_s >= 0
        assert Node.objects.count() == len(snap.nodes)
        assert set(Node.objects.values_list("name", flat=True)) == {n.name for n in snap.nodes}
        assert Job.objects.filter(state="pending").count() == len(snap.pending)
        assert Job.objects.filter(state="running").count() == len(snap.running)
        held = sum(len(s.gpus) for j in snap.running for s in j.placement)
        assert Allocation.objects.count() == held
        assert Queue.objects.count() == len(snap.queues)
        assert BusinessLine.objects.count() == len(snap.lines)
        assert SimulatorState.objects.count() == 1
        assert not ClusterSettings.load().workload_enabled, "no demo arrivals while timing"
        cordoned = {n.name for n in snap.nodes if n.state == "draining"}
        assert set(Node.objects.filter(name__in=cordoned).values_list("state", flat=True)) <= {
            "cordoned"
        }


def test_everything_is_rolled_back_afterwards(demo):
    before = counts()
    with scale_dataset(*SIZE):
        assert counts() != before
    assert counts() == before


def test_an_error_in_the_block_propagates_after_the_rollback(demo):
    before = counts()
    with pytest.raises(ZeroDivisionError), scale_dataset(*SIZE):
        1 / 0  # noqa: B018
    assert counts() == before


def test_the_benchmark_refuses_to_run_beside_a_running_loop(demo):
    other = connections.create_connection("default")  # another process's loop, holding the lock
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [CLUSTER_LOCK_KEY])
        try:
            with pytest.raises(LoopRunning, match="stop the portal first"), scale_dataset(*SIZE):
                pass
        finally:  # explicitly: a pooled connection keeps its session (and lock) when closed
            cursor.execute("SELECT pg_advisory_unlock(%s)", [CLUSTER_LOCK_KEY])
    other.close()


def test_run_db_bench_times_each_cycle(demo):
    result = run_db_bench(*SIZE, runs=3, seed=1)
    assert result["runs"] == 3 and result["seed"] == 1
    assert result["first_ms"] > 0 and result["median_ms"] <= result["p95_ms"]
    assert result["starts_first"] >= 0 and result["errors"] == 0 and result["violations"] == 0


def test_dependents_are_an_array_waiting_for_a_whole_array(demo):
    """``--dependents N``: N pending jobs are an array every task of which waits for an
    array of N others; the loop holds them (``DEPENDENCY``) while the others run, and
    cancels them all once a task of the first is cancelled (``cascade``)."""
    result = run_db_bench(*SIZE, runs=2, seed=1, dependents=5)
    assert result["dependents"] == 5 and result["errors"] == 0 and result["violations"] == 0
    assert result["pending_by_reason_last"].get("DEPENDENCY") == 5
    # then a task of the first is cancelled: the next cycle cancels the whole second array
    cascade = result["cascade"]
    assert cascade["cancelled"] == 5 and cascade["cycle_ms"] >= cascade["dependencies_ms"] > 0
    assert cascade["cancel_array_tasks"] == 4 and cascade["cancel_array_ms"] > 0, "all but one"
    assert Job.objects.filter(array__isnull=False).count() == 0, "rolled back"
    with pytest.raises(ValueError, match="needs 40 pending jobs"):
        run_db_bench(*SIZE, runs=1, seed=1, dependents=20)
