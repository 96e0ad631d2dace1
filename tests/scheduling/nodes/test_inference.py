"""GPUs serving online inference (#19): read from the plan's snapshot, kept on the shared
nodes after every applied plan, and counted as in use by the one utilization of healthy
GPUs (every surface) and left out of a node's free GPUs."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from scheduling.backend_factory import open_simulator
from scheduling.cycle import run_cycle
from scheduling.engine.types import NodeView, RunningJob, Slot, Snapshot, Tier
from scheduling.models import Allocation, Node
from scheduling.nodes import selectors
from scheduling.nodes.inference import inference_held
from scheduling.selectors import build_cluster_summary
from tests.scheduling.nodes.test_selectors import run


def node(name: str, free: tuple[int, ...], inference: bool = True) -> NodeView:
    return NodeView(name=name, rack="r0", block="b0", gpu_model="L40S", gpu_memory_gb=48,
                    gpus_total=8, free_gpus=free, inference=inference)  # fmt: skip


def job(job_id: int, *slots: Slot) -> RunningJob:
    gpus = sum(len(s.gpus) for s in slots)
    return RunningJob(id=job_id, queue="q", line="l", tier=Tier.EXPERIMENT, gpus=gpus,
                      placement=slots)  # fmt: skip


def test_what_a_shared_node_holds_beyond_jobs_free_and_residual_is_inference():
    snap = Snapshot(
        nodes=(node("inf", (5, 6, 7)), node("plain", (7,), inference=False),
               node("busy", ()), node("odd", tuple(range(8)))),
        lines=(), queues=(),
        running=(job(1, Slot("inf", (0, 1)), Slot("plain", tuple(range(7)))),
                 job(2, Slot("busy", tuple(range(8))))),
        pending=(),
    )  # fmt: skip
    held = inference_held(snap, {"inf": 1, "odd": 3})
    # inf: 8 - 3 free - 2 of job 1 - 1 residual; plain serves no inference: not listed;
    # busy: all its GPUs are a job's; odd: more residual than held is clamped to 0
    assert held == {"inf": 2, "busy": 0, "odd": 0}


@pytest.fixture
def shared_cluster(db):
    """The demo's mixed layout at 64 nodes (some shared with online inference), no work."""
    call_command("seed_demo", nodes=64, nodes_per_rack=8, seed=3, no_workload=True,
                 stdout=None)  # fmt: skip
    assert Node.objects.filter(inference=True).exists()


@pytest.mark.django_db
def test_a_cycle_keeps_each_shared_nodes_inference_gpus_as_the_backend_has_them(shared_cluster):
    run_cycle()
    truth = {
        n.name: len(n.inference_gpus) for n in open_simulator(advance=False).sim.observe().nodes
    }
    stored = dict(Node.objects.values_list("name", "inference_gpus"))
    assert stored == truth
    assert sum(truth.values()) > 0, "the traffic curve holds GPUs at the demo's start"


@pytest.mark.django_db
def test_utilization_counts_gpus_in_use_by_jobs_or_inference_and_free_gpus_leave_them_out(
    shared_cluster,
):
    run_cycle()
    plain = Node.objects.filter(inference=False).order_by("name").first()
    shared = Node.objects.filter(inference=True, inference_gpus__gt=0).order_by("name").first()
    Node.objects.filter(pk=shared.pk).update(inference_gpus=3, residual_gpus=1)
    Node.objects.filter(inference=True).exclude(pk=shared.pk).update(inference_gpus=0)
    owner = get_user_model().objects.get(username="researcher")
    run({"researcher": owner}, "a", {plain.name: [0, 1, 2, 3], shared.name: [0, 1]})
    healthy = sum(Node.objects.filter(state="ready", health="ok").values_list("gpus_total",
                                                                            flat=True))  # fmt: skip
    s = build_cluster_summary()
    assert (s.gpus_allocated_healthy, s.gpus_inference_healthy, s.gpus_healthy) == (6, 3, healthy)
    assert s.utilization == round((6 + 3) / healthy, 4)
    assert s.utilization > round(6 / healthy, 4)
    # the shared node: 8 - 2 allocated - 1 residual - 3 inference; no longer "8 free"
    free = sorted(selectors.list_usable_free_gpus())
    assert free.count(8) == len(free) - 2 and 4 in free and 2 in free
    # an unhealthy shared node's inference is not in the healthy figure
    Node.objects.filter(pk=shared.pk).update(health="gpu_failure")
    assert build_cluster_summary().gpus_inference_healthy == 0
    assert Allocation.objects.count() == 6


@pytest.mark.django_db
def test_a_cycle_learns_each_shared_nodes_inference_by_hour_and_the_engine_sees_the_rise(
    shared_cluster,
):
    """#19: what inference held is learned into the node's hourly profile at cluster time,
    and the next snapshot tells the engine how much more it wanted in the hours ahead."""
    from scheduling.cycle.context import production_policy
    from scheduling.engine.inference_forecast import HOUR_S, hourly_peaks
    from scheduling.prediction import RuntimePredictor
    from scheduling.snapshot import build_snapshot

    cycle = run_cycle()
    now = open_simulator(advance=False).sim.now
    hour = int((now % 86400) // HOUR_S)
    shared = Node.objects.filter(inference=True, inference_gpus__gt=0).order_by("name").first()
    assert shared.inference_profile["today"][hour] == shared.inference_gpus
    assert cycle is not None
    # the next hour, inference was seen to want 3 GPUs more than it holds now
    later = (hour + 1) % 24
    profile = dict(shared.inference_profile, today=list(shared.inference_profile["today"]))
    profile["today"][later] = shared.inference_gpus + 3
    Node.objects.filter(pk=shared.pk).update(inference_profile=profile)
    assert hourly_peaks(profile)[later] == shared.inference_gpus + 3
    backend = open_simulator(advance=False)
    snap = build_snapshot(backend.observe(), production_policy(),
                          RuntimePredictor.from_history()).snapshot  # fmt: skip
    view = next(n for n in snap.nodes if n.name == shared.name)
    assert view.inference_rise[later] == 3 and view.inference_rise[hour] == 0
    plain = next(n for n in snap.nodes if not n.inference)
    assert plain.inference_rise == () and not plain.inference_day_learned
    # learnt since this cycle only: not every hour seen, so no shared node is filled first
    assert shared.inference_profile["since"] == pytest.approx(now)
    assert not view.inference_day_learned
    # learning since a day ago: the whole day is known
    Node.objects.filter(pk=shared.pk).update(inference_profile=dict(profile, since=now - 86400))
    snap = build_snapshot(backend.observe(), production_policy(),
                          RuntimePredictor.from_history()).snapshot  # fmt: skip
    assert next(n for n in snap.nodes if n.name == shared.name).inference_day_learned
