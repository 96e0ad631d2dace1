"""Every job blocked for capacity gets an estimated start, not only the reserved ones
(``scheduling.engine.line_estimate``, session 34)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from scheduling.engine import PolicyConfig, Snapshot, explain, plan
from scheduling.engine.line_estimate import ESTIMATE_BASIS, LINE, _turns

from .helpers import HOUR, NOW, node, pjob, rjob, run, snap
from .strategies import snapshots


def test_the_line_takes_the_gpus_in_order_and_gives_them_back_at_its_end():
    releases = [(10.0, 8), (20.0, 8)]
    line = [(8, None, 100.0), (8, None, 100.0), (8, None, 100.0), (4, None, 5.0)]
    # the third waits for the first one's end; the fourth, for the third's
    assert _turns(0.0, 0, releases, line) == [10.0, 20.0, 110.0, 120.0]


def test_a_reserved_job_keeps_its_start_and_the_line_keeps_its_order():
    assert _turns(0.0, 8, [], [(8, 50.0, 10.0), (8, None, 10.0)]) == [50.0, 60.0]
    # a job that never gets enough holds up the rest: none of them has a turn
    assert _turns(0.0, 0, [(10.0, 4)], [(8, None, 1.0), (1, None, 1.0)]) == [None, None]


def test_jobs_beyond_the_reservations_wait_their_turn_in_the_line():
    # three busy 8-GPU nodes free at +1 h; eight 4-GPU jobs of 2 h; one reservation
    nodes = [node(f"n{i}") for i in range(3)]
    running = [rjob(i, {f"n{i}": range(8)}, tier="core") for i in range(3)]
    pending = [pjob(10 + i, 4, tier="core", predicted_runtime_s=2 * HOUR) for i in range(8)]
    plan = run(snap(nodes, pending, running, policy=PolicyConfig(max_reservations=1)))
    assert [r.job_id for r in plan.reservations] == [10]
    got = {j: plan.verdicts[j].estimated_start for j in range(10, 18)}
    # job 10: its reservation; the next five share the 24 GPUs freed at +1 h with it;
    # the last two, once the first two have run their 2 h
    assert got == {j: NOW + HOUR for j in range(10, 16)} | {16: NOW + 3 * HOUR, 17: NOW + 3 * HOUR}
    for j in range(11, 18):
        details = plan.verdicts[j].details
        assert plan.verdicts[j].code == "INSUFFICIENT_GPUS"
        assert details[ESTIMATE_BASIS] == LINE and explain.NO_ESTIMATE not in details
    assert ESTIMATE_BASIS not in plan.verdicts[10].details


def test_no_job_is_estimated_before_a_node_has_room_for_it():
    # two full nodes: 2 GPUs of each free at +1 h, the other 6 at +5 h. The count has 4
    # GPUs for a 4-GPU job at +1 h, but on two nodes: it fits on one only at +5 h
    nodes = [node("n0"), node("n1")]
    running = []
    for i, n in enumerate(("n0", "n1")):
        running.append(rjob(i, {n: range(2)}, tier="core", predicted_end=NOW + HOUR))
        running.append(rjob(10 + i, {n: range(2, 8)}, tier="core", predicted_end=NOW + 5 * HOUR))
    pending = [pjob(20, 4, tier="core")]
    plan = run(snap(nodes, pending, running, policy=PolicyConfig(max_reservations=0)))
    assert plan.verdicts[20].estimated_start == NOW + 5 * HOUR


def test_whole_nodes_and_scattered_gpus_keep_no_estimate_without_a_reservation():
    # The line counts GPUs: on the Philly replay its estimates for jobs of whole nodes and
    # for jobs blocked by where the GPUs are (TOPOLOGY) were hours early, so they get none
    nodes = [node(f"n{i}", free=range(4, 8)) for i in range(3)]
    running = [rjob(i, {f"n{i}": range(4)}, tier="core") for i in range(3)]
    pending = [
        pjob(10, 8, tier="core", gpus_per_node=8),  # reserves
        pjob(11, 16, tier="core", gpus_per_node=8),  # two whole nodes
        pjob(12, 6, tier="core"),  # 12 GPUs free, but 4 on each node: TOPOLOGY
    ]
    plan = run(snap(nodes, pending, running, policy=PolicyConfig(max_reservations=1)))
    assert [r.job_id for r in plan.reservations] == [10]
    assert plan.verdicts[12].code == "TOPOLOGY"
    no_res = explain.NO_RESERVATION.format(n=1)
    for j in (11, 12):
        v = plan.verdicts[j]
        assert v.estimated_start is None and v.details[explain.NO_ESTIMATE] == no_res


def test_behind_a_reservation_on_the_only_node_the_job_waits_for_the_reserved_run():
    # one node, reserved for job 10 from +1 h; job 10 then runs its default 12 h
    nodes = [node("n0")]
    running = [rjob(0, {"n0": range(8)}, tier="core")]
    pending = [pjob(10, 4, tier="core"), pjob(11, 6, tier="core")]
    policy = PolicyConfig(max_reservations=1)
    plan = run(snap(nodes, pending, running, policy=policy))
    v = plan.verdicts[11]
    assert v.estimated_start == NOW + HOUR + policy.default_runtime_s
    assert v.details[ESTIMATE_BASIS] == LINE


@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(max_pending=20))
def test_the_line_s_estimates_keep_their_rules_on_random_clusters(s: Snapshot) -> None:
    p = plan(s, NOW)
    max_gpus = max((n.gpus_total for n in s.nodes), default=0)
    pending = {j.id: j for j in s.pending}
    reserved = {r.job_id for r in p.reservations}
    for jid, v in p.verdicts.items():
        if v.details.get(ESTIMATE_BASIS) != LINE:
            continue
        job = pending[jid]
        assert jid not in reserved and v.code in {"INSUFFICIENT_GPUS", "PRIORITY"}
        assert job.gpus < max_gpus and not job.exclusive_node
        assert v.estimated_start is not None and v.estimated_start > NOW
        assert explain.NO_ESTIMATE not in v.details
    assert plan(s, NOW) == p  # pure: the same snapshot gives the same estimates
