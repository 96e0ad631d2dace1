"""A verdict's code is stable while the job's situation is (#15), and follows API.md's order.

A steady cluster (nothing submitted, nothing finishes) planned 100 times must give every
waiting job the same code every time, from the first plan on: the codes speak of what the
plan leaves (the GPUs left free once its starts are placed, the quota left once they are
counted), which is exactly what the next plan sees. Before #15 a job that work ahead
out-ran read PRIORITY in one plan and INSUFFICIENT_GPUS or QUOTA_EXCEEDED in the next, and
a preemptor read QUOTA_EXCEEDED while its victims were still checkpointing for it.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

from scheduling.engine import Code, LineView, PolicyConfig, QueueView, Tier
from scheduling.engine import types as et
from scheduling.simcore.cluster import build_demo_cluster

from .helpers import HOUR, NOW, node, pjob, rjob, run, snap, standard_queues
from .sim import Stepper

FOREVER = 1e9  # a duration nothing reaches in 100 cycles


def demo_nodes(nodes: int, seed: int = 0) -> list[et.NodeView]:
    """The demo's mixed layout (models, memory, RDMA, inference), small; a few nodes out."""
    rng = random.Random(seed)
    out = [
        et.NodeView(
            name=n.name,
            rack=n.rack,
            block=n.block,
            gpu_model=n.gpu_model,
            gpu_memory_gb=n.gpu_memory_gb,
            gpus_total=n.gpus_total,
            free_gpus=tuple(range(n.gpus_total)),
            rdma=n.rdma,
            inference=n.inference,
        )  # fmt: skip
        for n in build_demo_cluster(nodes=nodes, nodes_per_rack=16, racks_per_block=4)
    ]
    for i in rng.sample(range(len(out)), len(out) // 25):
        out[i] = dataclasses.replace(out[i], state=rng.choice(["cordoned", "unhealthy", "down"]))
    return out


def steady(seed: int) -> Stepper:
    """Three lines (one tight), queues that do not preempt, and a mixed backlog."""
    rng = random.Random(seed)
    nodes = demo_nodes(192, seed)
    total = sum(n.gpus_total for n in nodes)
    lines = [LineView("llm", total // 2), LineView("search", total // 5), LineView("mm", None)]
    queues = [
        QueueView(f"{ln.name}-{t.label}", ln.name, t, preempts_tiers=frozenset())
        for ln in lines
        for t in Tier
    ]
    st = Stepper(nodes, lines, queues, PolicyConfig(), now=1_796_000_000.0)
    sizes = [1, 2, 4, 8, 8, 16, 32, 64, 128, 256, 512]
    for i in range(1, 700):
        line = rng.choice(lines).name
        tier = rng.choice(list(Tier))
        gpus = rng.choice(sizes)
        job = et.PendingJob(
            id=i, queue=f"{line}-{tier.label}", line=line, tier=tier, gpus=gpus,
            gpu_memory_gb=rng.choice([None, None, None, 80, 48, 96]), rdma=gpus > 8,
            exclusive_node=rng.random() < 0.1, submitted_at=st.now - rng.random() * HOUR,
            predicted_runtime_s=rng.choice([None, 1800.0, 7200.0]),
            preemption_count=rng.choice([0, 0, 0, 0, 4]),
        )  # fmt: skip
        st.submit(job, duration=FOREVER)
    return st


def test_a_steady_cluster_keeps_every_waiting_jobs_code_for_100_plans():
    for seed in (0, 1):
        st = steady(seed)
        codes: dict[int, list[str]] = {}
        for cycle in range(100):
            p = st.step(60.0 if cycle else 0.0)
            if cycle:
                assert not p.starts and not p.preemptions, "steady after the first plan"
            for job_id, v in p.verdicts.items():
                codes.setdefault(job_id, []).append(v.code)
        changed = {j: c for j, c in codes.items() if len(set(c)) > 1}
        assert changed == {}, {j: sorted(Counter(c)) for j, c in list(changed.items())[:5]}
        seen = Counter(c[0] for c in codes.values())
        # Not vacuous: the backlog reads most codes, each of them steadily.
        for code in (Code.NEVER_FITS, Code.QUOTA_EXCEEDED, Code.INSUFFICIENT_GPUS,
                     Code.DEMOTED):  # fmt: skip
            assert seen[code] >= 3, (seed, seen)
        assert len(seen) >= 5, (seed, seen)
        assert all(len(c) == 100 for c in codes.values()), "every waiting job, every plan"


def test_the_1024_gpu_job_of_the_live_demo_reads_one_code():
    """#15's example: a 1,024-GPU job (128 whole RDMA nodes) on a busy, fragmented cluster
    of the demo's layout, its line near its quota, while work behind it starts. It read
    TOPOLOGY, then INSUFFICIENT_GPUS or QUOTA_EXCEEDED; now one code, every plan."""
    layout = build_demo_cluster(nodes=640, nodes_per_rack=32, racks_per_block=8)
    nodes = [
        et.NodeView(name=n.name, rack=n.rack, block=n.block, gpu_model=n.gpu_model,
                    gpu_memory_gb=n.gpu_memory_gb, gpus_total=n.gpus_total,
                    free_gpus=tuple(range(n.gpus_total)), rdma=n.rdma, inference=n.inference)
        for n in layout
    ]  # fmt: skip
    lines = [LineView("llm", 2048), LineView("search", None)]
    queues = standard_queues("llm") + standard_queues("search")
    st = Stepper(nodes, lines, queues, PolicyConfig(), now=1_796_000_000.0)
    for i, n in enumerate(nodes[::2]):  # every other node busy: free GPUs, scattered
        st.place(pjob(10_000 + i, 8, tier="core", line="search", queue="search-core"),
                 {n.name: range(8)}, duration=FOREVER, started_at=st.now - HOUR)  # fmt: skip
    st.submit(pjob(1, 1024, tier="core", rdma=True, submitted_at=st.now - 7200), duration=HOUR)
    for i in range(2, 160):
        st.submit(pjob(i, 8, tier="core", submitted_at=st.now - 3600 + i), duration=FOREVER)
    seen = [st.step(60.0 if c else 0.0).verdicts[1].code for c in range(100)]
    assert len(set(seen)) == 1, Counter(seen)


def test_a_preemptor_keeps_the_quota_room_it_preempted_for():
    """The urgent job preempts the experiment to make quota room; the core job behind it
    may not take the rest of that room meanwhile (before #15 it did, and the urgent job
    read QUOTA_EXCEEDED while its victim checkpointed for it, a preemption in vain).
    With the quota swap off: on, the experiment becomes the borrowed part instead and
    nothing is preempted (test_quota_swap.py)."""
    lines = [LineView("llm", 24)]
    nodes = [node("a"), node("b"), node("c"), node("d")]
    st = Stepper(nodes, lines, standard_queues("llm"), PolicyConfig(swap_quota=False), now=NOW)
    st.place(pjob(101, 8), {"a": range(8)}, duration=FOREVER, started_at=NOW - HOUR)
    st.place(pjob(102, 8, tier="core"), {"b": range(8)}, duration=FOREVER, started_at=NOW - HOUR)
    st.submit(pjob(1, 16, tier="urgent", submitted_at=NOW - 60), duration=HOUR)
    st.submit(pjob(2, 8, tier="core", submitted_at=NOW - 30), duration=FOREVER)
    codes = []
    while not st.is_running(1):
        p = st.step(60.0 if codes else 0.0)
        codes.append(p.verdicts.get(1, None) and p.verdicts[1].code)
        assert p.verdicts[2].code == Code.QUOTA_EXCEEDED, "the room is spoken for"
        assert len(codes) < 20
    assert codes[:-1] == [Code.PREEMPTING] * (len(codes) - 1) and codes[-1] is None
    assert st.preempted == [(NOW, 101, 1)]


# -- precedence: the first code of API.md's order whose condition holds ---------------------


def test_never_fits_comes_before_quota():
    p = run(snap([node("a")], [pjob(1, 16, gpus_per_node=16, tier="core")],
                 lines=[LineView("llm", 0)]))  # fmt: skip
    assert p.verdicts[1].code == Code.NEVER_FITS


def test_quota_comes_before_unavailable_nodes():
    nodes = [node("a", state="cordoned"), node("b")]
    p = run(snap(nodes, [pjob(1, 16, tier="core")], lines=[LineView("llm", 8)]))
    assert p.verdicts[1].code == Code.QUOTA_EXCEEDED


def test_unavailable_nodes_come_before_capacity():
    running = [rjob(9, {"b": range(8)}, tier="core")]
    nodes = [node("a", state="cordoned"), node("b"), node("c")]
    p = run(snap(nodes, [pjob(1, 24, tier="core")], running))
    assert p.verdicts[1].code == Code.NODES_UNAVAILABLE


def test_quota_used_by_jobs_behind_comes_before_capacity():
    """A blocked job whose quota room went to a job behind it (a short one, backfilled)
    reads QUOTA_EXCEEDED now, as it will next cycle, not INSUFFICIENT_GPUS now and
    QUOTA_EXCEEDED next."""
    lines = [LineView("llm", 16)]
    running = [rjob(9, {"a": range(4)}, tier="core", line="other", predicted_end=NOW + 10 * HOUR)]
    pending = [pjob(1, 16, tier="core", submitted_at=0),
               pjob(2, 8, tier="core", submitted_at=1, predicted_runtime_s=HOUR)]  # fmt: skip
    p = run(snap([node("a"), node("b")], pending, running, lines=lines))
    assert [x.job_id for x in p.starts] == [2]
    v = p.verdicts[1]
    assert v.code == Code.QUOTA_EXCEEDED and v.details["held_gpus"] == 8


def test_first_code_is_the_api_order():
    assert et.PRECEDENCE == et.VERDICT_CODES
    assert et.first_code([Code.TOPOLOGY, Code.QUOTA_EXCEEDED, Code.DEMOTED]) == (
        Code.QUOTA_EXCEEDED
    )
    assert et.first_code([Code.INSUFFICIENT_GPUS, "LAUNCH_RETRY"]) == Code.INSUFFICIENT_GPUS
    assert et.first_code([]) is None
    assert [et.precedence(c) for c in et.PRECEDENCE] == list(range(8))
