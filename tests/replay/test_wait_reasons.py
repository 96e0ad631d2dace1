"""Queue delay by reason (``replay.wait_reasons``): what the waiting jobs waited for."""

from __future__ import annotations

import pytest

from replay import load_workload
from replay.report import render_markdown, wait_rows
from replay.wait_reasons import (
    AWAITING_CYCLE,
    NO_IDLE_ROOM,
    WaitLedger,
    reason_of,
    unseen_reason,
    why_not_borrowing,
)
from scheduling.engine import Code, PolicyConfig, Verdict

from .test_replay import replay, two_tenants, write_itp


def test_the_ledger_charges_each_interval_to_the_reason_held_over_it():
    w = WaitLedger()
    w.arrive(1, 10.0)
    w.hold(1, 60.0, Code.QUOTA_EXCEEDED)  # 10..60 awaiting the first plan
    w.hold(1, 120.0, Code.QUOTA_EXCEEDED)  # the same reason at the next plan
    w.hold(1, 300.0, Code.PRIORITY)
    w.started(1, 400.0)
    w.hold(1, 500.0, Code.TOPOLOGY)  # requeued after its first start: no longer counted
    w.arrive(2, 0.0)
    w.started(2, 0.0)  # started at once: no wait
    w.arrive(3, 0.0)
    w.hold(3, 60.0, Code.INSUFFICIENT_GPUS)
    w.drop(3)  # rejected: never a queueing delay
    assert w.charges == {
        1: {AWAITING_CYCLE: 50.0, Code.QUOTA_EXCEEDED: 240.0, Code.PRIORITY: 100.0},
        2: {},
    }
    assert w.per_job([1, 2]) == {
        Code.QUOTA_EXCEEDED: 120.0,
        Code.PRIORITY: 50.0,
        AWAITING_CYCLE: 25.0,
    }
    assert w.per_job([]) == {}


def test_an_over_quota_wait_says_why_the_job_did_not_borrow():
    def verdict(code: str, **details) -> Verdict:
        return Verdict(code, "", details, "")

    full, backfill = PolicyConfig.preset("full"), PolicyConfig.preset("backfill")
    assert why_not_borrowing(True, False, backfill) is None  # the policy never borrows
    assert why_not_borrowing(False, False, full) == "not_preemptible"
    assert why_not_borrowing(True, True, full) == "demoted"
    assert why_not_borrowing(True, False, full) == NO_IDLE_ROOM
    assert reason_of(verdict(Code.TOPOLOGY), NO_IDLE_ROOM) == "TOPOLOGY"
    assert reason_of(verdict(Code.QUOTA_EXCEEDED), None) == "QUOTA_EXCEEDED"
    assert reason_of(verdict(Code.QUOTA_EXCEEDED), NO_IDLE_ROOM) == "QUOTA_EXCEEDED/no_idle_room"
    refused = verdict(Code.QUOTA_EXCEEDED, borrow_refused="eviction_cap")
    assert reason_of(refused, NO_IDLE_ROOM) == "QUOTA_EXCEEDED/eviction_cap"
    assert unseen_reason(True, True, "not_preemptible") == "QUOTA_EXCEEDED/not_preemptible"
    assert unseen_reason(True, True, None) == Code.QUOTA_EXCEEDED
    assert unseen_reason(False, True, None) == Code.INSUFFICIENT_GPUS
    assert unseen_reason(False, False, None) == Code.PRIORITY


def test_waiting_for_capacity_in_a_tiny_fifo_replay(tmp_path):
    # One 8-GPU node: a holds it 0..1000; b (8 GPUs, arrives at 5) and c (4, at 6) wait
    # for the cycle at 60, then for GPUs: b starts at 1020, c after b at 1140.
    path = write_itp(tmp_path, [("a", 0, 1000, 8), ("b", 5, 100, 8), ("c", 6, 100, 4)])
    r, result = replay(load_workload(str(path), window="0:1d"), "fifo")
    by_key = {j.key: r.waits.charges[j.idx] for j in r.jobs}
    assert by_key == {
        "a": {},
        "b": {AWAITING_CYCLE: 55.0, Code.INSUFFICIENT_GPUS: 960.0},
        "c": {AWAITING_CYCLE: 54.0, Code.INSUFFICIENT_GPUS: 1080.0},
    }
    o = result["overall"]
    assert o["avg_queue_s"] == pytest.approx((1015 + 1134) / 3, abs=0.1)
    assert o["max_queue_s"] == 1134.0  # c's wait, the longest
    longest = o["longest_waits"]
    assert [(w["job"], w["gpus"], w["wait_s"]) for w in longest] == [
        ("c", 4, 1134.0), ("b", 8, 1015.0), ("a", 8, 0.0)
    ]  # fmt: skip
    assert longest[0]["wait_by_reason_s"] == {Code.INSUFFICIENT_GPUS: 1080.0, AWAITING_CYCLE: 54.0}
    assert longest[0]["duration_s"] == 100.0
    assert o["p99_queue_s"] == pytest.approx(1015 + (1134 - 1015) * 0.98, abs=0.1)
    assert o["wait_by_reason_s"] == {Code.INSUFFICIENT_GPUS: 680.0, AWAITING_CYCLE: 36.3}


def test_waiting_for_quota_then_borrowing_instead(tmp_path):
    # Two tenants with one 8-GPU node of quota each (the borrowing test of test_replay):
    # without borrowing a8 waits for its own tenant's node while B's is idle; under
    # ``full`` it borrows at the first cycle and b11 waits for its checkpoint instead.
    w = two_tenants(tmp_path)
    r, result = replay(w, "backfill", pool_gpus=16)
    assert {j.key: r.waits.charges[j.idx] for j in r.jobs}["a8"] == {
        AWAITING_CYCLE: 50.0,
        Code.QUOTA_EXCEEDED: 9960.0,
    }
    assert result["per_tier"]["experiment"]["wait_by_reason_s"] == {
        Code.QUOTA_EXCEEDED: 4980.0,
        AWAITING_CYCLE: 25.0,
    }
    assert (
        result["per_queue"]["A"]["wait_by_reason_s"]
        == result["per_tier"]["experiment"]["wait_by_reason_s"]
    )
    r, result = replay(w, "full", pool_gpus=16)
    assert {j.key: r.waits.charges[j.idx] for j in r.jobs} == {
        "a7": {},
        "a8": {AWAITING_CYCLE: 50.0},
        "b11": {Code.PREEMPTING: 60.0},
    }
    assert result["per_tier"]["core"]["wait_by_reason_s"] == {Code.PREEMPTING: 60.0}


def test_the_reasons_add_up_to_the_queueing_delay_on_a_contended_trace_slice():
    # 310 ITP jobs asking ~2x what 128 GPUs give, every policy that plans differently
    w = load_workload("itp", "0:6h")
    for policy in ("fifo", "backfill", "full"):
        _, result = replay(w, policy, pool_gpus=128)
        groups = [result["overall"], *result["per_queue"].values(), *result["per_tier"].values()]
        for st in groups:
            if not st["finished"]:
                continue
            got = st["wait_by_reason_s"]
            # each reason is rounded to 0.1 s per job
            assert sum(got.values()) == pytest.approx(st["avg_queue_s"], abs=0.05 * len(got) + 0.05)
        reasons = result["overall"]["wait_by_reason_s"]
        assert reasons and all(v > 0 for v in reasons.values())
        why = ("cooldown", "queue_cooldown", "eviction_cap", "lenders_return",
               "not_preemptible", "demoted", NO_IDLE_ROOM)  # fmt: skip
        codes = {c for c in vars(Code).values() if isinstance(c, str) and c.isupper()}
        allowed = {AWAITING_CYCLE, *codes, *(f"{Code.QUOTA_EXCEEDED}/{w}" for w in why)}
        assert set(reasons) <= allowed, reasons
        header, rows = wait_rows([result])
        assert header[:2] == ["policy", "queueing delay"] and rows[0][0] == policy
        assert "## What the jobs waited for" in render_markdown([result])
