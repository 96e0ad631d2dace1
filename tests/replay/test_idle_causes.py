"""Idle capacity by cause (#19): every idle GPU-second while jobs wait has one cause."""

from __future__ import annotations

import pytest

from replay import load_workload
from replay.idle import CAUSES, idle_claims
from scheduling.engine import Code, Plan
from scheduling.engine.types import Reservation, Verdict

from .test_replay import replay, two_tenants


def verdict(code: str, position: int) -> Verdict:
    return Verdict(code, "", {}, "", None, position)


def test_claims_follow_nodes_first_then_waiting_jobs_in_order():
    decided = Plan(
        starts=(),
        preemptions=(),
        reservations=(Reservation(1, ("n1",), 500.0), Reservation(2, ("n2",), 90.0)),
        verdicts={
            1: verdict(Code.INSUFFICIENT_GPUS, 1),
            2: verdict(Code.PREEMPTING, 2),
            3: verdict(Code.TOPOLOGY, 3),
            4: verdict(Code.QUOTA_EXCEEDED, 4),
            5: verdict(Code.QUOTA_EXCEEDED, 5),
            6: verdict(Code.NEVER_FITS, 6),
        },
        now=0.0,
    )
    free = {"down": 8, "n1": 3, "n2": 5, "a": 4, "b": 7}
    gpus = {1: 16, 2: 8, 3: 6, 4: 2, 5: 1, 6: 64}
    got = idle_claims(free, ["down"], decided, gpus, demoted=[5])
    assert got == {
        "unavailable": 8,
        "reservation": 3,
        "checkpointing": 5,
        "topology": 6,
        "quota": 2,
        "demoted": 1,  # over quota while demoted: it may not borrow
        "beyond_demand": 2,
    }
    assert sum(got.values()) == sum(free.values())
    assert set(got) <= set(CAUSES)


def test_a_job_claims_no_more_than_what_is_idle():
    decided = Plan(
        (), (), (), {1: verdict(Code.TOPOLOGY, 1), 2: verdict(Code.QUOTA_EXCEEDED, 2)}, 0.0
    )
    assert idle_claims({"a": 3, "b": 2}, [], decided, {1: 16, 2: 1}, []) == {"topology": 5}


def test_quota_and_cycle_causes_in_a_tiny_replay(tmp_path):
    # Tenants A and B, one 8-GPU node of quota each, in a 16-GPU pool. Without
    # borrowing a8 waits for A's node (10020) while B's node is idle: over quota.
    w = two_tenants(tmp_path)
    r, result = replay(w, "backfill", pool_gpus=16)
    by_cause = result["overall"]["idle_gpu_s_by_cause"]
    idle_s = sum(p.frag.idle_s for p in r.pools.values())
    assert sum(by_cause.values()) == pytest.approx(idle_s, abs=2)
    # a8 waits 10..10020: B's node is idle except while b11 runs (3000..4000); from
    # 10000 to 10020 A's node is idle too, freed since the last plan.
    assert by_cause["quota"] + by_cause["awaiting_cycle"] == pytest.approx(
        8 * (10020 - 10 - 1000) + 8 * 20, abs=2
    )
    assert by_cause["quota"] >= 8 * (10000 - 10 - 1000 - 3 * 60)
    assert by_cause["awaiting_cycle"] >= 8 * 20
    assert set(by_cause) <= {"quota", "awaiting_cycle"}


def test_every_idle_gpu_second_has_a_cause_on_a_philly_day():
    w = load_workload("philly", "2017-10-02:2017-10-03")
    for policy in ("fifo", "full"):
        r, result = replay(w, policy, pool_gpus=128, check=False)
        by_cause = result["overall"]["idle_gpu_s_by_cause"]
        idle_s = sum(p.frag.idle_s for p in r.pools.values())
        assert idle_s > 0
        assert sum(by_cause.values()) == pytest.approx(idle_s, rel=1e-6, abs=len(by_cause))
        assert set(by_cause) <= set(CAUSES)
