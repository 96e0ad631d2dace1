"""Whatever the sequence of calls, no GPU is ever counted twice and restores are exact."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.simcore import SimConfig, SimError, Simulator, build_demo_cluster
from scheduling.simcore.observation import ACTIVE_STATES

CONFIG = SimConfig(
    job_failure_rate_per_gpu_hour=0.05,
    node_fault_rate_per_node_hour=0.02,
    residual_probability=0.3,
    inference_tick_s=60,
)

launch = st.tuples(
    st.just("launch"),
    st.integers(0, 39),  # first node
    st.integers(0, 2),  # extra nodes
    st.integers(1, 8),  # GPUs per node
    st.floats(1, 20_000),  # true duration
    st.integers(0, 2),  # thousands of seconds of progress to resume from
)
job_ref = st.integers(1, 12)
# Half of the calls are launches, so that most examples have work to disturb.
op = launch | st.one_of(
    st.tuples(st.just("stop"), job_ref, st.floats(0, 300)),
    st.tuples(st.just("kill"), job_ref),
    st.tuples(
        st.just("fault"),
        st.sampled_from(["residual_process", "gpu_failure", "rdma_degraded", "node_down"]),
        st.integers(0, 39),
    ),
    st.tuples(st.just("clean"), st.integers(0, 39)),
    st.tuples(st.just("repair"), st.integers(0, 39)),
    st.tuples(st.just("advance"), st.floats(0, 4000)),
    st.tuples(st.just("advance"), st.floats(0, 100)),
)


def _apply(sim: Simulator, names: list[str], action: tuple, seq: list[int]) -> None:
    kind = action[0]
    try:
        if kind == "launch":
            _, first, extra_nodes, per_node, duration, progress = action
            obs = sim.observe()
            placement = []
            for name in names[first : first + 1 + extra_nodes]:
                free = obs.node(name).free_gpus
                placement.append((name, free[:per_node] or (0,)))
            seq[0] += 1
            sim.launch(f"j{seq[0]}", placement, duration, progress_s=progress * 1000)
        elif kind == "stop":
            sim.request_checkpoint_stop(f"j{action[1]}", action[2])
        elif kind == "kill":
            sim.kill(f"j{action[1]}")
        elif kind == "fault":
            sim.inject_fault(action[1], names[action[2]])
        elif kind == "clean":
            sim.clean_residual(names[action[1]])
        elif kind == "repair":
            sim.repair(names[action[1]])
        else:
            sim.advance(action[1])
    except SimError:
        pass  # refused calls must leave no trace; the invariants below check it


def _check_invariants(sim: Simulator) -> None:
    obs = sim.observe()
    held: dict[tuple[str, int], str] = {}
    for job in obs.jobs:
        if job.state in ACTIVE_STATES:
            for name, gpus in job.placement:
                for g in gpus:
                    assert (name, g) not in held, f"GPU {name}/{g} held by two jobs"
                    held[(name, g)] = job.job_id
        assert 0 <= job.checkpoint_progress_s <= job.progress_s, job
    for node in obs.nodes:
        allocated = set(node.allocated_gpus)
        residual = {g for g, _ in node.residual_gpus}
        inference = set(node.inference_gpus)
        free = set(node.free_gpus)
        parts = [allocated, residual, inference, free]
        assert sum(len(p) for p in parts) == node.gpus_total, node
        assert set().union(*parts) == set(range(node.gpus_total)), node
        assert allocated == {g for (n, g) in held if n == node.name}
        if node.health in ("gpu_failure", "down"):
            assert not allocated, f"jobs still running on {node.health} node {node.name}"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=10, max_size=60), st.integers(0, 2**16))
def test_no_gpu_is_ever_counted_twice(actions, seed):
    sim = Simulator(
        build_demo_cluster(nodes=40, nodes_per_rack=8, seed=seed), seed=seed, config=CONFIG
    )
    names = list(sim.nodes)
    seq = [0]
    for action in actions:
        _apply(sim, names, action, seq)
        _check_invariants(sim)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=25), st.lists(op, min_size=1, max_size=25))
def test_restoring_at_any_point_gives_the_same_future(before, after):
    sim = Simulator(build_demo_cluster(nodes=40, nodes_per_rack=8), seed=4, config=CONFIG)
    names = list(sim.nodes)
    seq = [0]
    for action in before:
        _apply(sim, names, action, seq)
    restored = Simulator.from_dict(json.loads(json.dumps(sim.to_dict())))
    seq_restored = list(seq)
    for action in after:
        _apply(sim, names, action, seq)
        _apply(restored, names, action, seq_restored)
    assert sim.advance(3600) == restored.advance(3600)
    assert sim.to_dict() == restored.to_dict()
