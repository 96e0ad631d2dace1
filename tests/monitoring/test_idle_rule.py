"""The one idle-by-cause rule (``monitoring.idle``, #19) on real engine plans, and its
integration over an interval between two plans (pure: no database)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import replay.idle
from monitoring import idle
from scheduling.engine import (
    Code,
    LineView,
    NodeView,
    PendingJob,
    PolicyConfig,
    QueueView,
    RunningJob,
    Slot,
    Snapshot,
    plan,
)


def snapshot(*, node_states: dict[str, str] | None = None, pending=None) -> Snapshot:
    """Four 8-GPU nodes, each half used by one 16-GPU job predicted to end at 3,600 s."""
    states = node_states or {}
    nodes = tuple(
        NodeView(name=f"n{i}", rack="r1", block="b1", gpu_model="H100", gpu_memory_gb=80,
                 gpus_total=8, free_gpus=(4, 5, 6, 7), state=states.get(f"n{i}", "ready"))
        for i in range(4)
    )  # fmt: skip
    running = (
        RunningJob(1, "q", "L", "core", 16, tuple(Slot(f"n{i}", (0, 1, 2, 3)) for i in range(4)),
                   started_at=0.0, predicted_end=3600.0),
    )  # fmt: skip
    pending = pending or (
        # two whole nodes: blocked until the running job ends, so it holds a reservation
        PendingJob(2, "q", "L", "core", 16, gpus_per_node=8, predicted_runtime_s=600),
        # small and long: backfilled on a node the reservation does not hold
        PendingJob(3, "q", "L", "core", 2, submitted_at=1.0, predicted_runtime_s=7200),
    )
    return Snapshot(nodes, (LineView("L", None),), (QueueView("q", "L", "core"),), running,
                    pending, PolicyConfig.preset("backfill"))  # fmt: skip


def test_a_real_plan_gives_every_idle_gpu_one_cause():
    snap = snapshot()
    decided = plan(snap, 10.0)
    assert [s.job_id for s in decided.starts] == [3]
    (reservation,) = decided.reservations
    got = idle.plan_idle(snap, decided)
    assert got.free_before == 16 and got.free_after == 14 and got.waiting
    # the reservation's two nodes hold 8 idle GPUs; the blocked job claims nothing more
    # (it holds a reservation), so the other 6 are more than the waiting jobs ask for
    assert got.claims == {"reservation": 8, "beyond_demand": 6}
    assert len(reservation.nodes) == 2
    assert sum(got.claims.values()) == got.free_after


def test_gpus_on_nodes_out_of_service_are_unavailable_and_the_only_unhealthy_cause():
    snap = snapshot(node_states={"n3": "draining", "n2": "unhealthy"})
    got = idle.plan_idle(snap, plan(snap, 10.0))
    assert got.claims["unavailable"] == 8
    assert sum(got.claims.values()) == got.free_after
    assert {"unavailable"} == idle.NOT_HEALTHY
    assert set(idle.CAUSE_LABELS) == set(idle.CAUSES)


def test_a_start_the_backend_could_not_launch_leaves_its_gpus_idle_as_other():
    snap = snapshot()
    decided = plan(snap, 10.0)
    got = idle.plan_idle(snap, decided, not_launched=[3])
    assert got.free_after == 16
    assert got.claims == {"reservation": 8, "other": 2, "beyond_demand": 6}


def test_nothing_is_claimed_while_no_job_waits():
    snap = snapshot(pending=(PendingJob(3, "q", "L", "core", 2, predicted_runtime_s=60),))
    got = idle.plan_idle(snap, plan(snap, 10.0))
    assert got == idle.PlanIdle(free_before=16, free_after=14, waiting=False, claims={})
    assert idle.interval_gpu_seconds(got, 16, 300.0) == {}


def test_an_interval_holds_the_previous_claims_and_half_of_what_was_freed():
    before = idle.PlanIdle(free_before=20, free_after=10, waiting=True,
                           claims={"quota": 4, "beyond_demand": 6})  # fmt: skip
    # 8 more GPUs were free when the next plan came, 300 s later
    got = idle.interval_gpu_seconds(before, 18, 300.0)
    assert got == {"quota": 1200.0, "beyond_demand": 1800.0, "awaiting_cycle": 8 * 150.0}
    # fewer free at the end (a node went away): proportionally fewer
    assert idle.interval_gpu_seconds(before, 5, 100.0) == {"quota": 200.0, "beyond_demand": 300.0}
    # jobs waited on a full cluster: only what was freed counts
    full = replace(before, free_after=0, claims={})
    assert idle.interval_gpu_seconds(full, 8, 60.0) == {"awaiting_cycle": 240.0}
    assert idle.interval_gpu_seconds(before, 18, 0.0) == {}
    assert idle.interval_gpu_seconds(None, 18, 60.0) == {}


def test_totals_always_name_every_cause():
    total = idle.add({"quota": 1.5}, {"quota": 2.0, "topology": 1.0})
    assert list(total) == list(idle.CAUSES)
    assert total["quota"] == pytest.approx(3.5) and total["topology"] == 1.0
    assert sum(total.values()) == pytest.approx(4.5)


def test_the_replay_uses_the_same_rule():
    assert replay.idle.idle_claims is idle.idle_claims
    assert replay.idle.claim_rest is idle.claim_rest
    assert replay.idle.CAUSES is idle.CAUSES


def test_a_job_over_quota_that_may_borrow_lacks_gpus_it_fits_not_permission():
    """The line is at its quota (16, all held); idle GPUs sit 4 to a node. A preemptible
    gang of whole nodes may borrow but fits nowhere ("none fits it now"): topology; a
    non-preemptible job may not borrow: quota; a preemptible job larger than the idle
    GPUs left: insufficient."""
    base = snapshot()
    pending = (
        PendingJob(2, "q", "L", "core", 8, gpus_per_node=8, preemptible=True),
        PendingJob(3, "q", "L", "core", 4, preemptible=False, submitted_at=1.0),
        PendingJob(4, "q", "L", "core", 32, gpus_per_node=8, preemptible=True,
                   submitted_at=2.0),
    )  # fmt: skip
    snap = replace(base, lines=(LineView("L", 16),), pending=pending,
                   policy=PolicyConfig.preset("full"))  # fmt: skip
    decided = plan(snap, 10.0)
    assert not decided.starts and not decided.reservations
    assert {v.code for v in decided.verdicts.values()} == {Code.QUOTA_EXCEEDED}
    assert "none fits it now" in decided.verdicts[2].message
    got = idle.plan_idle(snap, decided)
    assert got.claims == {"topology": 8, "quota": 4, "insufficient": 4}
    # without borrowing every one of them lacks permission
    strict = replace(snap, policy=PolicyConfig.preset("backfill"))
    assert idle.plan_idle(strict, plan(strict, 10.0)).claims == {"quota": 16}
    assert idle.may_borrow(True, False, snap.policy)
    assert not idle.may_borrow(True, True, snap.policy)
    assert not idle.may_borrow(False, False, snap.policy)
    assert not idle.may_borrow(True, False, strict.policy)
