"""NEVER_FITS is exact (#15): one rule (``engine.feasibility``) for the submit service and the
planner, true exactly when not even the empty, healthy cluster could run the job.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import Code, Snapshot, plan
from scheduling.engine import feasibility as fz
from scheduling.engine.policy import inference_ok
from scheduling.simcore.cluster import build_demo_cluster

from .helpers import HOUR, NOW, node, pjob, rack, rjob, run, snap
from .strategies import snapshots


def ask_of(job) -> fz.Ask:
    return fz.Ask(job.gpus, job.gpus_per_node, job.gpu_memory_gb, job.rdma, inference_ok(job),
                  job.gpu_model, job.pool)  # fmt: skip


def empty_and_healthy(s: Snapshot, job) -> Snapshot:
    nodes = tuple(
        dataclasses.replace(n, free_gpus=tuple(range(n.gpus_total)), state="ready",
                            exclusive=False)
        for n in s.nodes
    )  # fmt: skip
    return dataclasses.replace(s, nodes=nodes, running=(), pending=(job,),
                               lines=(), queues=())  # fmt: skip


@settings(deadline=None, max_examples=300)
@given(snapshots(), st.data())
def test_the_rule_is_what_an_empty_healthy_cluster_can_run(s: Snapshot, data) -> None:
    if not s.pending:
        return
    job = data.draw(st.sampled_from(s.pending))
    refusal = fz.check(fz.ClusterShape.of_nodes(s.nodes), ask_of(job))
    alone = plan(empty_and_healthy(s, job), NOW)
    assert (refusal is None) == (len(alone.starts) == 1), refusal
    got = plan(s, NOW).verdicts.get(job.id)
    assert (got is not None and got.code == Code.NEVER_FITS) == (refusal is not None)


DEMO = fz.ClusterShape.of_nodes(build_demo_cluster())  # 1,250 nodes: racks of 32, blocks of 8


@pytest.mark.parametrize(
    "ask, constraint, field, words",
    [
        (fz.Ask(8, gpu_memory_gb=141), "gpu_memory", "gpu_memory_gb",
         "it asks for 141 GB per GPU but the largest GPUs have 80 GB"),
        (fz.Ask(16, gpus_per_node=16), "gpus_per_node", "gpus_per_node",
         "it asks for 16 GPUs on one node but the largest node has 8"),
        (fz.Ask(2112, rdma=True), "block_size", "gpus",
         "it needs 264 nodes (RDMA) with 8 GPUs each inside one network block (a job never "
         "spans blocks) but the largest block has 256 such nodes"),
        (fz.Ask(8 * 1100, rdma=True), "node_count", "gpus",
         "it needs 1,100 nodes (RDMA) with 8 GPUs each but the cluster has 1,058 such nodes"),
        (fz.Ask(512, gpu_memory_gb=48, rdma=True, gpu_model="L40S"), "combination",
         "gpu_memory_gb", "no node has GPUs of 48 GB or more, L40S GPUs and RDMA together"),
        (fz.Ask(8, gpu_model="B200"), "gpu_model", "gpu_model", "no node has B200 GPUs"),
    ],
)  # fmt: skip
def test_each_rule_is_named(ask, constraint, field, words):
    refusal = fz.check(DEMO, ask)
    assert refusal is not None
    assert (refusal.constraint, refusal.field, refusal.why) == (constraint, field, words)
    assert refusal.details_dict()["constraint"] == constraint
    assert refusal.message == f"This job could never run on this cluster, even empty: {words}."


def test_the_live_demos_1024_gpu_job_fits_the_demo_cluster():
    """128 whole RDMA nodes: no rack has them (32), but a block does (the gang spans racks
    of one block), so it may wait, never NEVER_FITS; and it is not said to need one rack."""
    fit = fz.fit(DEMO, fz.Ask(1024, rdma=True))
    assert fit.fits and fit.max_rack == 32 and fit.max_block >= 128
    assert fz.check(DEMO, fz.Ask(1024, rdma=True)) is None
    nodes = [node(f"r{r}-n{i:02d}", rack=f"r{r}", block="b0") for r in range(5) for i in range(32)]
    running = [rjob(900 + i, {n.name: range(8)}, tier="core") for i, n in enumerate(nodes[::4])]
    p = run(snap(nodes, [pjob(1, 1024, tier="core", rdma=True)], running))
    v = p.verdicts[1]
    assert v.code in (Code.TOPOLOGY, Code.INSUFFICIENT_GPUS)
    assert "across the fewest racks of one block (no rack has 128 such nodes: at most 32)" in (
        v.message
    )


def test_inference_nodes_it_may_not_share_are_named():
    shape = fz.ClusterShape.of_nodes(rack("i", 4, "r0", inference=True) + rack("t", 2, "r1"))
    refusal = fz.check(shape, fz.Ask(24, inference_ok=False))
    assert refusal is not None and refusal.constraint == "node_count"
    assert fz.check(shape, fz.Ask(24, inference_ok=True)) is None
    only = fz.ClusterShape.of_nodes(rack("i", 4, "r0", inference=True, gpu_memory_gb=80)
                                    + rack("t", 2, "r1", gpu_memory_gb=40))  # fmt: skip
    refusal = fz.check(only, fz.Ask(8, gpu_memory_gb=80, inference_ok=False))
    assert refusal is not None and refusal.constraint == "inference"
    assert "serve online inference, which it may not share" in refusal.why


def test_a_waiting_job_reads_never_fits_once_nodes_are_removed_and_loses_its_estimate():
    nodes = rack("a", 4, "r0") + rack("b", 3, "r1", block="b1")
    running = [rjob(9, {"a00": range(8)}, tier="core", predicted_end=NOW + HOUR)]
    job = pjob(1, 32, tier="core")
    before = run(snap(nodes, [job], running))
    assert before.verdicts[1].code == Code.TOPOLOGY  # 48 GPUs free, 3 whole nodes per block
    assert before.verdicts[1].estimated_start == NOW + HOUR
    assert [r.job_id for r in before.reservations] == [1]
    # Two nodes of block b0 leave the cluster: no block has 4 nodes any more.
    after = run(snap([n for n in nodes if n.name not in ("a02", "a03")], [job], running))
    v = after.verdicts[1]
    assert v.code == Code.NEVER_FITS and v.estimated_start is None
    assert v.details["no_estimate_reason"] == "it can never run as asked"
    assert after.reservations == ()
    assert (
        "it needs 4 nodes with 8 GPUs each inside one network block (a job never spans "
        "blocks) but the largest block has 3 such nodes" in v.message
    )


def test_a_shape_is_a_value():
    a = fz.ClusterShape.of_nodes(rack("a", 3, "r0") + rack("b", 2, "r1"))
    b = fz.ClusterShape.of_nodes(list(reversed(rack("a", 3, "r0") + rack("b", 2, "r1"))))
    assert a == b and hash(a) == hash(b)
    assert (a.nodes, a.largest_node, a.total_gpus) == (5, 8, 40)
    assert fz.ClusterShape(()).largest_node == 0
    assert fz.check(fz.ClusterShape(()), fz.Ask(1)).constraint == "no_nodes"
    assert fz.check(a, fz.Ask(0)).constraint == "gpus"
