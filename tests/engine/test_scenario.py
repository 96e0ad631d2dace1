"""A working day on a small cluster, in virtual time (issue 3's scenario).

Cluster ("main" pool): racks r0..r4 of 8 nodes x 8 GPUs, each rack its own
network block, plus a two-node "sandbox" pool. At 08:00 every node of r0..r3
runs a 5-GPU non-preemptible core job (3 GPUs free each), except r3-07 which is
empty; r2's jobs end at 10:00, the others run all day. Rack r4 is full of
8-GPU experiments: five of the search line (whose experiment queue has a 20 %
guarantee: 8 of the line's 40 GPUs) and three of llm.
"""

from __future__ import annotations

from scheduling.engine import Code, LineView, PolicyConfig, QueueView, Tier

from .helpers import node, pjob
from .sim import Stepper

H = 3600.0
M = 60.0
T0 = 8 * H  # 08:00 of day 0 (virtual epoch)


def at(hh: int, mm: int = 0) -> float:
    return hh * H + mm * M


def build() -> Stepper:
    nodes = []
    for r in range(5):
        for i in range(8):
            nodes.append(node(f"r{r}-{i:02d}", rack=f"r{r}", block=f"blk{r}", pool="main"))
    nodes += [node(f"s{i}", rack="sb", block="sb", pool="sandbox") for i in range(2)]
    lines = [
        LineView("llm", 200),
        LineView("search", 40),
        LineView("platform", None),
        LineView("sandbox", None),
    ]
    queues = [
        QueueView("llm-urgent", "llm", Tier.URGENT),
        QueueView("llm-core", "llm", Tier.CORE),
        QueueView("llm-experiment", "llm", Tier.EXPERIMENT),
        QueueView("search-experiment", "search", Tier.EXPERIMENT, guarantee_gpus=8),
        QueueView("platform-core", "platform", Tier.CORE),
        QueueView("sandbox-urgent", "sandbox", Tier.URGENT),
        QueueView("sandbox-experiment", "sandbox", Tier.EXPERIMENT),
    ]
    st = Stepper(nodes, lines, queues, PolicyConfig(), now=T0)
    jid = 1000
    for r in range(4):
        for i in range(8):
            if (r, i) == (3, 7):
                continue
            jid += 1
            ends = at(10) if r == 2 else at(23)
            st.place(
                pjob(jid, 5, tier="core", line="platform", pool="main", preemptible=False),
                {f"r{r}-{i:02d}": range(5)},
                duration=ends - at(7),
                started_at=at(7),
            )
    for i in range(8):
        line = "search" if i < 5 else "llm"
        st.place(
            pjob(2000 + i, 8, tier="experiment", line=line, pool="main"),
            {f"r4-{i:02d}": range(8)},
            duration=20 * H,
            started_at=at(7),
            ckpt_interval=2 * H,
        )
    return st


def test_a_working_day():
    st = build()

    # 08:00 -- a 4-GPU LoRA experiment starts at once; the 64-GPU core
    # fine-tune waits with TOPOLOGY although 70+ GPUs are free, scattered.
    lora = pjob(
        1, 4, tier="experiment", pool="main", model_name="lora-7b", predicted_runtime_s=10 * H
    )
    other = pjob(2, 4, tier="experiment", pool="main", predicted_runtime_s=10 * H)
    ft64 = pjob(3, 64, tier="core", pool="main", rdma=True, predicted_runtime_s=4 * H)
    st.submit(lora, duration=10 * H, ckpt_interval=30 * M)
    st.submit(other, duration=10 * H, ckpt_interval=2 * H)
    st.submit(ft64, duration=4 * H)
    x = pjob(50, 8, tier="experiment", line="sandbox", pool="sandbox")
    y = pjob(51, 8, tier="experiment", line="sandbox", pool="sandbox")
    st.submit(x, duration=30 * H, ckpt_interval=10 * M)
    st.submit(y, duration=30 * H, ckpt_interval=30 * H)
    plan = st.step()
    assert st.is_running(1) and st.running[1].placement[0].node == "r3-07"
    v = plan.verdicts[3]
    assert v.code == Code.TOPOLOGY
    assert v.details["free_gpus"] >= 70
    # r3-07, the only whole node, went to the LoRA job this cycle: none is left whole.
    assert v.details["best_rack_nodes"] == 0
    assert "needs 8 whole RDMA nodes in one rack" in v.message
    assert v.estimated_start == at(10)  # r2's jobs are predicted to end then
    assert st.is_running(50) and st.is_running(51)

    # ... and keeps waiting until a rack frees up at 10:00.
    for p in st.run_until(at(9, 55)):
        assert p.verdicts[3].code == Code.TOPOLOGY
    st.step(5 * M)
    assert st.now == at(10) and st.is_running(3)
    assert {s.node[:2] for s in st.running[3].placement} == {"r2"}

    # 11:00 -- an urgent job preempts an experiment gracefully (the one with
    # the freshest checkpoint), and starts after the checkpoint, at 11:05.
    st.run_until(at(11) - 300)
    urgent = pjob(4, 4, tier="urgent", pool="main", predicted_runtime_s=3 * H)
    st.submit(urgent, duration=3 * H)
    plan = st.step(5 * M)
    assert [(p.victim_id, p.for_job_id, p.mode) for p in plan.preemptions] == [(1, 4, "graceful")]
    assert plan.verdicts[4].code == Code.PREEMPTING
    assert plan.verdicts[4].estimated_start == at(11, 5)
    assert st.running[1].state == "preempting"
    plan = st.step(5 * M)
    assert st.is_running(4) and st.running[4].placement[0].node == "r3-07"
    assert st.pending[1].preemption_count == 1  # back in the queue, progress kept
    assert st.truth[1].done == 3 * H + 5 * M

    # 13:00 -- a burst of eight 8-GPU urgent jobs. The search experiment
    # queue keeps its 8-GPU guarantee; every other experiment on r4 goes.
    st.run_until(at(13) - 300)
    burst = [
        pjob(100 + i, 8, tier="urgent", pool="main", predicted_runtime_s=8 * H) for i in range(8)
    ]
    for b in burst:
        st.submit(b, duration=8 * H)
    plan = st.step(5 * M)
    victims = {p.victim_id for p in plan.preemptions}
    search_exps, llm_exps = set(range(2000, 2005)), set(range(2005, 2008))
    assert llm_exps <= victims and len(victims & search_exps) == 4 and len(victims) == 7
    assert st.active_gpus("search-experiment") == 8
    waiting = [b.id for b in burst if plan.verdicts[b.id].code != Code.PREEMPTING]
    assert len(waiting) == 1
    for p in st.run_until(at(13, 55)):
        assert st.active_gpus("search-experiment") >= 8
        assert p.preemptions == ()
    assert sum(st.is_running(b.id) for b in burst) == 7
    assert plan.verdicts[waiting[0]].code in (Code.TOPOLOGY, Code.INSUFFICIENT_GPUS)

    # 14:10.. -- in the sandbox, X is always the cheapest victim; after its
    # fourth preemption it is demoted and never chosen again.
    for k in range(4):
        st.run_until(at(14 + k, 10) - 300)
        u = pjob(
            60 + k, 8, tier="urgent", line="sandbox", pool="sandbox", predicted_runtime_s=20 * M
        )
        st.submit(u, duration=20 * M)
        plan = st.step(5 * M)
        assert [(p.victim_id, p.for_job_id) for p in plan.preemptions] == [(50, 60 + k)]
        plan = st.step(5 * M)  # X stops at its deadline, u starts
        assert st.is_running(60 + k)
        assert st.pending[50].preemption_count == k + 1
        v = plan.verdicts[50]
        if k < 3:
            assert v.code != Code.DEMOTED
        else:
            assert v.code == Code.DEMOTED
            assert "Preempted 4 times" in v.message
        st.run_until(st.now + 30 * M)  # u finishes, X runs again
        assert st.is_running(50)

    st.run_until(at(18, 10) - 300)
    st.submit(pjob(70, 8, tier="urgent", line="sandbox", pool="sandbox"), duration=H)
    st.submit(pjob(71, 8, tier="urgent", line="sandbox", pool="sandbox"), duration=H)
    plan = st.step(5 * M)
    assert [(p.victim_id, p.for_job_id) for p in plan.preemptions] == [(51, 70)]
    assert plan.verdicts[71].code == Code.INSUFFICIENT_GPUS
    st.run_until(at(19))
    assert st.is_running(50)  # the demoted job kept running
    assert all(v != 50 for t, v, _ in st.preempted if t > at(17, 30))
    assert st.is_running(70) and not st.is_running(71)
