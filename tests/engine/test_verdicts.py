"""Every pending reason code, with its numbers, remedy and estimated start (V1)."""

from __future__ import annotations

import pytest

from scheduling.engine import VERDICT_CODES, Code, LineView, PolicyConfig, explain

from .helpers import HOUR, NOW, node, pjob, rack, rjob, run, snap, started


def test_never_fits_when_asking_more_gpu_memory_than_exists():
    plan = run(snap([node("a", gpu_memory_gb=40)], [pjob(1, 1, gpu_memory_gb=80)]))
    v = plan.verdicts[1]
    assert v.code == Code.NEVER_FITS
    assert "80 GB per GPU" in v.message and "40 GB" in v.message
    assert v.details["max_gpu_memory_gb"] == 40
    assert v.remedy


@pytest.mark.parametrize(
    "job, phrase",
    [
        (pjob(1, 64), "it needs 8 nodes with 8 GPUs each but the cluster has 2 such nodes"),
        (pjob(1, 4, gpus_per_node=16), None),
        (pjob(1, 4, rdma=True), "RDMA"),
        (pjob(1, 4, gpu_model="B200"), "B200"),
        (pjob(1, 4, pool="vc9"), "pool vc9"),
    ],
)
def test_never_fits_table(job, phrase):
    nodes = [node("a", rdma=False), node("b", rdma=False)]
    plan = run(snap(nodes, [job]))
    if job.gpus_per_node == 16:
        assert 1 in started(plan)  # 4 <= 16 per node: fits on one node
        return
    v = plan.verdicts[1]
    assert v.code == Code.NEVER_FITS
    assert phrase in v.message


def test_quota_exceeded_says_how_much_and_what_would_help():
    lines = [LineView("llm", 512)]
    running = [rjob(i, {f"n{i}": range(8)}, tier="core") for i in range(60)]
    nodes = [node(f"n{i}", rack=f"r{i // 32}") for i in range(80)]
    plan = run(snap(nodes, [pjob(99, 64, tier="core")], running, lines=lines))
    v = plan.verdicts[99]
    assert v.code == Code.QUOTA_EXCEEDED
    assert "llm holds 480 of its 512 GPU quota; this job needs 64" in v.message
    assert v.details["short_gpus"] == 32
    assert "32 GPUs of line llm are released" in v.remedy


def test_nodes_unavailable_when_only_out_of_service_nodes_would_do():
    nodes = [node("a", state="cordoned"), node("b", state="unhealthy"), node("c")]
    plan = run(snap(nodes, [pjob(1, 24)]))
    v = plan.verdicts[1]
    assert v.code == Code.NODES_UNAVAILABLE
    assert v.details["unavailable_nodes"] == 2 and v.details["healthy_matching_nodes"] == 1


def test_work_ahead_that_took_the_gpus_leaves_a_capacity_verdict():
    pending = [pjob(1, 8, tier="core"), pjob(2, 8, tier="core"), pjob(3, 8)]
    plan = run(snap([node("a")], pending))
    v = plan.verdicts[3]
    assert v.code == Code.INSUFFICIENT_GPUS and v.details["free_gpus"] == 0
    assert v.position == 2 and plan.verdicts[2].position == 1


def test_priority_counts_the_work_ahead_that_reserved_its_gpus():
    # Job 1 (16 GPUs) waits for b and reserves a and b; job 2 would fit on a, which is
    # free, but runs too long to backfill before job 1's reservation.
    running = [rjob(9, {"b": range(8)}, tier="core", predicted_end=NOW + HOUR)]
    pending = [pjob(1, 16, tier="core"), pjob(2, 8, predicted_runtime_s=2 * HOUR)]
    plan = run(snap([node("a"), node("b")], pending, running))
    v = plan.verdicts[2]
    assert v.code == Code.PRIORITY
    assert v.details["reservations_ahead"] == 1
    assert v.details["ahead_jobs"] == 1 and v.details["ahead_gpus"] == 16
    assert "reserved for higher-priority work" in v.message


def test_preempting_reads_while_victims_checkpoint():
    running = [rjob(1, {"a": range(8)})]
    plan = run(snap([node("a")], [pjob(9, 8, tier="urgent")], running))
    v = plan.verdicts[9]
    assert v.code == Code.PREEMPTING
    assert v.details["victims"] == 1 and v.details["victim_gpus"] == 8
    assert v.estimated_start == NOW + 300


def test_topology_says_where_the_free_gpus_are():
    # 70+ GPUs free, but no rack has 8 whole free nodes.
    nodes = [node(f"n{i:02d}", rack=f"r{i // 5}", block=f"b{i // 10}") for i in range(20)]
    running = [rjob(100 + i, {f"n{i:02d}": range(7)}, tier="core") for i in range(0, 20, 2)]
    # 10 nodes have 1 free GPU, 10 are whole: 90 free; racks of 5 alternate, so
    # the best rack has 3 whole nodes and each block 5.
    plan = run(snap(nodes, [pjob(1, 64, tier="core", rdma=True)], running))
    v = plan.verdicts[1]
    assert v.code == Code.TOPOLOGY
    assert v.details["free_gpus"] == 90
    assert v.details["best_rack_nodes"] == 3 and v.details["best_block_nodes"] == 5
    # No rack has 8 nodes: it does not say "in one rack".
    assert "needs 8 whole RDMA nodes across the fewest racks of one block" in v.message
    assert "(no rack has 8 such nodes: at most 5)" in v.message
    assert "90 such GPUs are left free this cycle but scattered" in v.message
    assert "Free GPUs by rack" in v.message


def test_insufficient_gpus_counts_the_shortfall():
    running = [rjob(1, {"a": range(6)}, tier="core")]
    plan = run(snap([node("a")], [pjob(2, 4, tier="core")], running))
    v = plan.verdicts[2]
    assert v.code == Code.INSUFFICIENT_GPUS
    assert v.details["free_gpus"] == 2 and v.details["short_gpus"] == 2
    assert "2 more matching GPUs" in v.remedy


def test_demoted_says_so_and_keeps_the_underlying_reason():
    running = [rjob(1, {"a": range(8)}, tier="core")]
    plan = run(snap([node("a")], [pjob(2, 8, preemption_count=4)], running))
    v = plan.verdicts[2]
    assert v.code == Code.DEMOTED
    assert "Preempted 4 times" in v.message
    assert v.details["underlying_code"] == Code.INSUFFICIENT_GPUS
    assert "priority" in v.remedy


def test_estimated_start_comes_from_the_reservation():
    running = [rjob(1, {"a": range(8)}, tier="core", predicted_end=NOW + 2 * HOUR)]
    plan = run(snap([node("a")], [pjob(2, 8, tier="core")], running))
    assert plan.verdicts[2].estimated_start == NOW + 2 * HOUR


def test_every_code_is_produced_somewhere_in_this_file():
    # The tests above cover the eight API codes, as API.md spells and orders them
    # (its precedence order); keep it that way.
    assert " ".join(VERDICT_CODES) == (
        "NEVER_FITS QUOTA_EXCEEDED NODES_UNAVAILABLE PRIORITY "
        "PREEMPTING TOPOLOGY INSUFFICIENT_GPUS DEMOTED"
    )


def test_verdict_serialises_as_the_api_pending_reason():
    plan = run(snap([node("a", gpu_memory_gb=40)], [pjob(1, 1, gpu_memory_gb=80)]))
    reason = plan.verdicts[1].as_reason()
    assert set(reason) >= {"code", "message", "details"}
    assert all(isinstance(v, (int, float, str)) for v in reason["details"].values())


def test_verdict_details_are_numbers_and_strings_only():
    nodes = rack("a", 3, "r0") + [node("c", state="down")]
    running = [rjob(1, {"a00": range(8)}, tier="core")]
    pending = [
        pjob(2, 64),
        pjob(3, 8, tier="core"),
        pjob(4, 8),
        pjob(5, 32),
        pjob(6, 8, preemption_count=5),
        pjob(7, 8, tier="urgent"),
    ]
    plan = run(snap(nodes, pending, running, lines=[LineView("llm", 40)], policy=PolicyConfig()))
    for v in plan.verdicts.values():
        for value in v.details.values():
            assert isinstance(value, (int, float, str)), (v.code, value)


def test_a_demoted_job_blocked_by_quota_still_says_it_is_demoted():
    running = [rjob(1, {"a": range(8)}, tier="core")]
    plan = run(
        snap(
            [node("a"), node("b")],
            [pjob(2, 8, preemption_count=4, preemptible=False)],
            running,
            lines=[LineView("llm", 8)],
        )
    )
    v = plan.verdicts[2]
    assert v.code == Code.QUOTA_EXCEEDED
    assert v.details["demoted"] == 1 and "demoted" in v.message


def test_quota_verdict_predicts_when_the_line_frees_enough():
    lines = [LineView("llm", 16)]
    running = [
        rjob(1, {"a": range(8)}, tier="core", predicted_end=NOW + 3 * HOUR),
        rjob(2, {"b": range(8)}, tier="core", predicted_end=NOW + 1 * HOUR),
    ]
    nodes = [node("a"), node("b"), node("c"), node("d")]
    plan = run(
        snap(nodes, [pjob(3, 8, tier="core"), pjob(4, 16, tier="core")], running, lines=lines)
    )
    assert plan.verdicts[3].details["quota_room_at"] == explain.iso(NOW + 1 * HOUR)
    # job 4 needs the line's whole 16 after job 3's turn: job 3 takes 8 at +1 h and gives
    # them back after its runtime (unknown: the default 12 h), so job 4 starts at +13 h (it
    # read +3 h before session 33, when job 3 would hold half of the room, and no estimate
    # before session 36, when job 3 held it for ever)
    assert plan.verdicts[4].estimated_start == NOW + 13 * HOUR
    assert plan.verdicts[4].details["waiting_ahead_gpus"] == 8
    assert "no_estimate_reason" not in plan.verdicts[4].details
    assert "predicted by" in plan.verdicts[3].remedy
    # The room is the estimated start, said the same way in the remedy.
    assert plan.verdicts[3].estimated_start == NOW + 1 * HOUR
    assert f"predicted by {explain.when(NOW + HOUR)}" in plan.verdicts[3].remedy
