"""The simulator core at its edges: faults that are refused or change nothing, calls that are
no-ops, the inference curve's bounds, errors' codes, and the compact rows state is saved in."""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.simcore import (
    FAULT_KINDS,
    ClusterObservation,
    NodeObservation,
    PermanentError,
    SimConfig,
    SimError,
    SimEvent,
    SimNode,
    Simulator,
    TransientError,
    build_demo_cluster,
)
from scheduling.simcore.inference import inference_load, node_key

from .helpers import QUIET, kinds, quiet_sim

ALL = tuple(range(8))


def refused(call) -> PermanentError:
    with pytest.raises(PermanentError) as info:
        call()
    return info.value


# -- errors -----------------------------------------------------------------------------------


def test_errors_carry_a_code_a_message_and_whether_to_retry():
    permanent = PermanentError("gpu_busy", "n GPU 3 is held by job j")
    transient = TransientError("backend_unavailable", "launch: outage")
    assert str(permanent) == "gpu_busy: n GPU 3 is held by job j"
    assert (permanent.code, permanent.message, permanent.permanent) == (
        "gpu_busy", "n GPU 3 is held by job j", True,
    )  # fmt: skip
    assert transient.permanent is False and isinstance(transient, SimError)
    assert not isinstance(transient, PermanentError)


# -- faults -----------------------------------------------------------------------------------


def test_an_unknown_node_is_reported_before_an_unknown_kind():
    sim = quiet_sim()
    assert refused(lambda: sim.inject_fault("meteor", "nowhere")).code == "unknown_node"
    error = refused(lambda: sim.inject_fault("meteor", "r000-n00"))
    assert error.code == "invalid_fault" and "'meteor'" in error.message
    assert all(kind in error.message for kind in FAULT_KINDS)


def test_residual_processes_cannot_take_gpus_a_job_holds_or_that_do_not_exist():
    sim = quiet_sim()
    sim.launch("j", [("r000-n00", (0, 1))], 3600)
    for gpus in ((1,), (8,), (-1,), (2, 9)):
        error = refused(lambda gpus=gpus: sim.inject_fault("residual_process", "r000-n00", gpus))
        assert error.code == "invalid_fault" and "not idle GPU indices" in error.message
    assert sim.observe().node("r000-n00").residual_gpus == ()


def test_residual_processes_on_a_full_node_are_refused_and_duplicates_collapse():
    sim = quiet_sim()
    sim.launch("j", [("r000-n00", ALL)], 3600)
    assert (
        "no idle GPU" in refused(lambda: sim.inject_fault("residual_process", "r000-n00")).message
    )
    sim.inject_fault("residual_process", "r000-n01", [3, 3, 1], stale_job_id="old")
    events = sim.advance(0)
    assert [(e.kind, e.gpus) for e in events if e.node == "r000-n01"] == [
        ("node.fault", (1, 3)),
        ("residual.left", (1, 3)),
    ]
    assert sim.observe().node("r000-n01").residual_gpus == ((1, "old"), (3, "old"))


def test_residual_processes_by_default_take_every_gpu_nobody_holds():
    sim = quiet_sim()
    sim.launch("j", [("r000-n00", (0, 5))], 3600)
    sim.inject_fault("residual_process", "r000-n00", [1])
    sim.inject_fault("residual_process", "r000-n00", stale_job_id="s")
    node = sim.observe().node("r000-n00")
    assert [g for g, _ in node.residual_gpus] == [1, 2, 3, 4, 6, 7]
    assert node.free_gpus == () and node.allocated_gpus == (0, 5)


def test_faults_are_not_backend_calls_and_ignore_injected_outages():
    sim = quiet_sim()
    sim.inject_api_errors(5)
    sim.inject_fault("gpu_failure", "r000-n00")
    assert sim.observe().node("r000-n00").health == "gpu_failure"
    with pytest.raises(TransientError):
        sim.repair("r000-n00")


def test_a_fault_on_an_idle_node_fails_nothing_but_is_still_told():
    sim = quiet_sim()
    sim.inject_fault("node_down", "r000-n01")
    (event,) = sim.advance(0)
    assert (event.kind, event.node, event.reason, event.jobs) == (
        "node.fault", "r000-n01", "node_down", (),
    )  # fmt: skip


def test_a_milder_fault_after_a_worse_one_keeps_the_worse_health():
    sim = quiet_sim()
    sim.inject_fault("gpu_failure", "r000-n00")
    sim.inject_fault("rdma_degraded", "r000-n00")
    assert sim.observe().node("r000-n00").health == "gpu_failure"


def test_rdma_degraded_spares_single_node_jobs_yet_refuses_new_launches():
    sim = quiet_sim()
    sim.launch("solo", [("r000-n00", (0, 1))], 3600)
    sim.launch("pair", [("r000-n00", (2, 3)), ("r000-n01", (0, 1))], 3600)
    sim.inject_fault("rdma_degraded", "r000-n00")
    events = sim.advance(0)
    fault = next(e for e in events if e.kind == "node.fault")
    assert fault.jobs == ("pair",)
    assert {j.job_id: j.state for j in sim.observe().jobs} == {"solo": "running", "pair": "failed"}
    assert sim.observe().node("r000-n01").allocated_gpus == (), "the pair's other node is freed"
    assert refused(lambda: sim.launch("new", [("r000-n00", (4,))], 60)).code == "node_unhealthy"


def test_repair_heals_the_node_and_clears_stale_processes_but_keeps_it_cordoned():
    sim = quiet_sim()
    sim.cordon("r000-n00")
    sim.inject_fault("residual_process", "r000-n00", [2])
    sim.inject_fault("gpu_failure", "r000-n00")
    sim.advance(0)
    sim.repair("r000-n00")
    node = sim.observe().node("r000-n00")
    assert (node.health, node.residual_gpus, node.cordoned) == ("ok", (), True)
    assert kinds(sim.advance(0)) == ["node.repaired"]
    assert refused(lambda: sim.launch("j", [("r000-n00", (0,))], 60)).code == "node_cordoned"


def test_random_faults_with_only_residual_weight_leave_stale_processes_and_never_break_health():
    sim = Simulator(
        build_demo_cluster(nodes=4, nodes_per_rack=4, uniform=True), seed=3,
        config=replace(QUIET, node_fault_rate_per_node_hour=2.0,
                       fault_kind_weights=(("residual_process", 1.0),)),
    )  # fmt: skip
    events = sim.advance(4 * 3600)
    faults = [e for e in events if e.kind == "node.fault"]
    assert faults and all(e.reason == "residual_process" for e in faults)
    assert all(n.health == "ok" for n in sim.observe().nodes)


def test_random_faults_with_no_weight_change_nothing():
    sim = Simulator(
        build_demo_cluster(nodes=4, nodes_per_rack=4, uniform=True), seed=3,
        config=replace(QUIET, node_fault_rate_per_node_hour=5.0, fault_kind_weights=()),
    )  # fmt: skip
    assert sim.advance(24 * 3600) == []
    assert all(n.health == "ok" for n in sim.observe().nodes)


def test_rdma_faults_are_never_drawn_for_nodes_without_rdma():
    nodes = [replace(n, rdma=False) for n in build_demo_cluster(nodes=4, uniform=True)]
    sim = Simulator(nodes, seed=1, config=replace(
        QUIET, node_fault_rate_per_node_hour=3.0, fault_kind_weights=(("rdma_degraded", 1.0),),
    ))  # fmt: skip
    assert [e for e in sim.advance(24 * 3600) if e.kind == "node.fault"] == []


# -- calls that change nothing ----------------------------------------------------------------


def test_cordon_and_uncordon_tell_only_a_change():
    sim = quiet_sim()
    sim.cordon("r000-n00")
    sim.cordon("r000-n00")
    sim.uncordon("r000-n01")
    sim.uncordon("r000-n00")
    sim.uncordon("r000-n00")
    assert kinds(sim.advance(0)) == ["node.cordoned", "node.uncordoned"]


def test_cleaning_a_node_without_stale_processes_frees_nothing_and_says_nothing():
    sim = quiet_sim()
    assert sim.clean_residual("r000-n00") == 0 and sim.advance(0) == []
    sim.inject_fault("residual_process", "r000-n00", [4, 6])
    sim.advance(0)
    assert sim.clean_residual("r000-n00") == 2
    (event,) = sim.advance(0)
    assert (event.kind, event.gpus) == ("residual.cleaned", (4, 6))


def test_killing_an_ended_job_is_a_no_op():
    sim = quiet_sim()
    sim.launch("j", [("r000-n00", (0,))], 60)
    sim.advance(60)
    sim.kill("j")
    assert sim.advance(0) == [] and sim.observe().job("j").end_reason == "completed"


def test_a_drain_with_a_bad_grace_changes_nothing_not_even_the_cordon():
    sim = quiet_sim()
    sim.launch("j", [("r000-n00", (0,))], 3600)
    for grace in (-1.0, math.inf, math.nan):
        assert refused(lambda grace=grace: sim.drain("r000-n00", grace)).code == "invalid_argument"
    assert not sim.observe().node("r000-n00").cordoned
    assert sim.observe().job("j").state == "running"


def test_a_drain_asks_only_running_jobs_and_an_empty_drain_just_cordons():
    sim = quiet_sim()
    sim.launch("a", [("r000-n00", (0,))], 3600)
    sim.launch("b", [("r000-n00", (1,))], 3600)
    sim.request_checkpoint_stop("a", grace_s=600)
    assert sim.drain("r000-n00", 600) == ["b"]
    assert sim.drain("r000-n01", 600) == []
    assert sim.observe().node("r000-n01").cordoned


def test_advance_to_the_past_is_a_no_op_and_bad_durations_are_refused():
    sim = quiet_sim()
    sim.advance(100)
    assert sim.advance_to(50) == [] and sim.now == 100
    for bad in (math.inf, math.nan, -0.5):
        with pytest.raises(ValueError, match="finite number >= 0"):
            sim.advance(bad)
    assert sim.now == 100


def test_events_at_exactly_the_new_time_are_included_once():
    sim = quiet_sim()
    sim.launch("j", [("r000-n00", (0,))], 100)
    assert kinds(sim.advance(99.999)) == ["job.launched"]
    assert kinds(sim.advance(0.001)) == ["job.succeeded"]
    assert sim.advance(0) == []


def test_a_job_resumed_past_its_duration_succeeds_at_once_with_its_progress():
    sim = quiet_sim()
    sim.launch("j", [("r000-n00", (0,))], 100, progress_s=250)
    events = sim.advance(0)
    assert kinds(events) == ["job.launched", "job.succeeded"]
    assert events[-1].progress_s == 250
    assert sim.observe().job("j").progress_s == 250


def test_duplicate_node_names_and_bad_layouts_are_refused():
    node = SimNode("n", "r", "b", "H100", 80)
    with pytest.raises(ValueError, match="duplicate node name 'n'"):
        Simulator([node, replace(node)])
    for kw in ({"nodes": 0}, {"nodes_per_rack": 0}, {"racks_per_block": 0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            build_demo_cluster(**kw)


def test_a_cluster_smaller_than_a_rack_is_one_rack_in_block_zero():
    nodes = build_demo_cluster(nodes=3, nodes_per_rack=32, uniform=True)
    assert [(n.name, n.rack, n.block) for n in nodes] == [
        ("r000-n00", "r000", "b0"), ("r000-n01", "r000", "b0"), ("r000-n02", "r000", "b0"),
    ]  # fmt: skip


def test_set_rates_from_zero_starts_failures_and_back_to_zero_stops_them():
    sim = quiet_sim()
    for i, name in enumerate(sim.nodes):
        sim.launch(f"j{i}", [(name, ALL)], 1000 * 3600)
    sim.set_rates(job_failure_rate_per_gpu_hour=1.0)
    assert sim.config.job_failure_rate_per_gpu_hour == 1.0
    failed = [e for e in sim.advance(3600) if e.kind == "job.failed"]
    assert failed and all(e.reason == "random" for e in failed)
    survivors = [f"j{i}" for i in range(4) if sim.observe().job(f"j{i}").state == "running"]
    sim.set_rates(job_failure_rate_per_gpu_hour=0.0)
    assert "job.failed" not in kinds(sim.advance(100 * 3600))
    assert all(sim.observe().job(j).state == "running" for j in survivors)


# -- observation ------------------------------------------------------------------------------


def test_observation_lookups_by_name_and_id_and_unknown_ones_are_key_errors():
    sim = quiet_sim()
    sim.launch("j", [("r000-n00", (0, 1))], 3600)
    obs = sim.observe()
    assert obs.node("r000-n00").jobs == ("j",) and obs.job("j").gpus == 2
    assert obs.now == sim.now and isinstance(obs, ClusterObservation)
    with pytest.raises(KeyError):
        obs.node("nope")
    with pytest.raises(KeyError):
        obs.job("nope")


def test_observing_changes_nothing():
    a, b = quiet_sim(seed=4), quiet_sim(seed=4)
    for sim in (a, b):
        sim.launch("j", [("r000-n00", ALL)], 7200, checkpoint_interval_s=600)
    for _ in range(5):
        a.observe()
    assert a.advance(7200) == b.advance(7200)


@pytest.mark.parametrize(
    "wanted,held,shortfall", [(0, (), 0), (3, (5, 6, 7), 0), (5, (6, 7), 3), (2, (0, 1, 2), 0)]
)
def test_the_inference_shortfall_is_what_it_wants_beyond_what_it_holds(wanted, held, shortfall):
    node = NodeObservation(
        name="n", rack="r", block="b", gpu_model="L40S", gpu_memory_gb=48, gpus_total=8,
        rdma=False, inference=True, health="ok", cordoned=False, free_gpus=(), allocated_gpus=(),
        residual_gpus=(), inference_gpus=held, inference_wanted=wanted, inference_load=0.5, jobs=(),
    )  # fmt: skip
    assert node.inference_shortfall == shortfall


# -- the inference curve ----------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0, 30 * 86400), st.integers(0, 2**63), st.integers(0, 2**32),
    st.floats(0, 1), st.floats(0, 1), st.floats(0, 24), st.floats(0, 0.5),
)  # fmt: skip
def test_the_inference_load_is_always_a_fraction(t, seed, key, trough, peak, hour, noise):
    load = inference_load(
        t, seed=seed, key=key, trough=trough, peak=peak, peak_hour=hour, noise=noise
    )
    assert 0.0 <= load <= 1.0


def test_without_noise_the_load_peaks_at_the_peak_hour_give_or_take_an_hour():
    kw = {"seed": 0, "key": 1, "trough": 0.1, "peak": 0.9, "peak_hour": 14.0, "noise": 0.0}
    loads = {h: inference_load(h * 3600.0, **kw) for h in range(24)}
    best = max(loads, key=loads.get)
    assert 13 <= best <= 15
    assert min(loads.values()) >= 0.1 - 1e-9 and max(loads.values()) <= 0.9 + 1e-9
    assert inference_load(86400.0 + 5000, **kw) == pytest.approx(inference_load(5000, **kw))


def test_a_flat_curve_is_the_same_load_all_day():
    kw = {"seed": 9, "key": 2, "trough": 0.4, "peak": 0.4, "peak_hour": 3.0, "noise": 0.0}
    assert {round(inference_load(t, **kw), 12) for t in range(0, 86400, 3600)} == {0.4}


def test_node_keys_are_stable_across_processes():
    assert node_key("r000-n00") == zlib.crc32(b"r000-n00")
    assert node_key("r000-n00") != node_key("r000-n01")


def test_nodes_off_the_inference_pool_want_nothing_at_any_hour():
    sim = quiet_sim()
    assert {sim.inference_gpus_wanted("r000-n00", h * 3600.0) for h in range(24)} == {0}
    assert sim.inference_load("r000-n00") == 0.0


# -- saved rows -------------------------------------------------------------------------------


EVENTS = [
    SimEvent(1.0, "job.launched", job_id="j", gpus=(("n1", (0, 1)), ("n2", (3,)))),
    SimEvent(2.0, "job.failed", job_id="j", node="n1", reason="gpu_failure", progress_s=60.0),
    SimEvent(3.0, "residual.left", job_id="j", node="n1", gpus=(2, 5)),
    SimEvent(4.0, "node.fault", node="n1", reason="node_down", jobs=("a", "b")),
    SimEvent(5.0, "inference.pressure", node="n3", gpus_needed=2, jobs=("c",)),
    SimEvent(6.0, "node.repaired", node="n1"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.kind)
def test_every_event_kind_round_trips_through_its_row(event):
    row = event.to_row()
    assert SimEvent.from_row(row) == event
    assert len(row) == 9 and row[:2] == [event.at, event.kind]


def test_a_launch_row_lists_gpus_per_node_and_other_rows_a_flat_list():
    assert EVENTS[0].to_row()[6] == [["n1", [0, 1]], ["n2", [3]]]
    assert EVENTS[2].to_row()[6] == [2, 5]


def test_a_node_round_trips_with_its_stale_processes_in_gpu_order():
    node = SimNode("n", "r1", "b0", "A100", 40, gpus_total=4, rdma=False, inference=True,
                   health="rdma_degraded", residual={3: "x", 1: "y"}, cordoned=True)  # fmt: skip
    row = node.to_row()
    assert row[9] == [[1, "y"], [3, "x"]]
    assert SimNode.from_row(row) == node
    assert SimNode.from_row([*row[:9], [["2", "z"]], False]).residual == {2: "z"}


def test_a_node_row_lists_the_fields_in_their_declared_order_so_from_row_reads_them_back():
    node = SimNode("n", "r1", "b0", "L40S", 48, gpus_total=2, rdma=False, inference=True,
                   health="down", residual={0: "j"}, cordoned=True)  # fmt: skip
    names = [f.name for f in dataclasses.fields(SimNode)]
    row = json.loads(json.dumps(node.to_row()))  # as persisted
    assert len(row) == len(names)
    for name, value in zip(names, row, strict=True):
        if name != "residual":
            assert value == getattr(node, name), name
    assert SimNode.from_row(row) == node


def test_the_config_round_trips_with_its_fault_weights_as_pairs():
    config = SimConfig(fault_kind_weights=(("gpu_failure", 1.0), ("node_down", 0.5)))
    data = config.to_dict()
    assert data["fault_kind_weights"] == [["gpu_failure", 1.0], ["node_down", 0.5]]
    assert SimConfig.from_dict(data) == config
    assert SimConfig.from_dict(SimConfig().to_dict()) == SimConfig()
