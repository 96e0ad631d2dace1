"""Node isolation racing the scheduling cycle (V5): a cordon committed while a cycle runs
is never undone by the cycle, and no job lands on a node once its cordon has committed.

Real PostgreSQL, real threads, the real simulator: the cycle is held at one of its own
backend calls while on-call acts (as ``test_cancel_races_cycle`` holds a cycle-like
transaction), then let go."""

from __future__ import annotations

import threading

import pytest

from core.models import AuditRecord
from scheduling.backends.simulator import SimulatorBackend
from scheduling.models import Node
from scheduling.nodes.services import cordon_node, uncordon_node
from scheduling.sim_services import run_cycle_now
from tests.concurrency.threads import in_thread

pytestmark = pytest.mark.django_db(transaction=True)


def hold_at(monkeypatch, method: str) -> tuple[threading.Event, threading.Event]:
    """Hold the cycle inside the simulator's ``method`` until ``go`` is set."""
    reached, go = threading.Event(), threading.Event()
    real = getattr(SimulatorBackend, method)

    def held(self, *args, **kwargs):
        reached.set()
        assert go.wait(30), "the test never let the cycle go"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SimulatorBackend, method, held)
    return reached, go


def test_a_cordon_committed_while_the_cycle_uncordons_the_node_is_not_undone(demo, monkeypatch):
    """On-call uncordons a node, then cordons it again while the cycle is telling the
    backend about the uncordon: the cycle wrote back the state it had read (ready), so the
    cordon, answered and audited, was gone and jobs could land on the node."""
    oncall, admin = demo["oncall"], demo["admin"]
    node = Node.objects.order_by("name").first().name
    cordon_node(oncall, node, "flaky fan")
    run_cycle_now(admin)
    uncordon_node(oncall, node, "fan replaced")
    reached, go = hold_at(monkeypatch, "uncordon")
    errors: list[str] = []
    cycle = in_thread(errors, lambda: run_cycle_now(admin))
    assert reached.wait(30), errors
    recordon = in_thread(errors, lambda: cordon_node(oncall, node, "fan failed again"))
    recordon.join(2)  # commits at once, or waits for the cycle (as it may)
    go.set()
    cycle.join(60)
    recordon.join(60)
    assert errors == []
    assert AuditRecord.objects.filter(action="node.cordon", reason="fan failed again").exists()
    state = Node.objects.values_list("state", "state_reason").get(name=node)
    assert state == ("cordoned", "fan failed again"), "the cycle undid the cordon"


def test_no_job_lands_on_a_node_cordoned_after_the_snapshot(demo, monkeypatch):
    """The cycle plans on its snapshot; a cordon that commits after the snapshot but before
    the launch used to be ignored: the job started on the node on-call had just isolated
    ("nothing new lands"), after the cordon was answered and audited."""
    from scheduling import engine
    from scheduling.models import Allocation, Job
    from scheduling.services import JobRequest, submit_job

    oncall, admin = demo["oncall"], demo["admin"]
    job = submit_job(demo["researcher"], JobRequest(name="lands", queue="llm-experiment", gpus=8))
    planned: dict[str, set[str]] = {}
    reached, go = threading.Event(), threading.Event()
    real_plan = engine.plan

    def held_plan(snapshot, now):
        plan = real_plan(snapshot, now)
        planned["nodes"] = {s.node for st in plan.starts if st.job_id == job.pk
                            for s in st.placement}  # fmt: skip
        reached.set()
        assert go.wait(30), "the test never let the cycle go"
        return plan

    monkeypatch.setattr(engine, "plan", held_plan)
    errors: list[str] = []
    cycle = in_thread(errors, lambda: run_cycle_now(admin))
    assert reached.wait(30), errors
    [node] = planned["nodes"]
    cordoner = in_thread(errors, lambda: cordon_node(oncall, node, "ECC errors"))
    cordoner.join(30)  # the cordon commits before the cycle goes on
    assert not cordoner.is_alive() and errors == []
    go.set()
    cycle.join(60)
    assert errors == []
    assert Node.objects.get(name=node).state == "cordoned"
    on_it = Allocation.objects.filter(job=job, node__name=node)
    assert not on_it.exists(), "the job started on a node cordoned before it was launched"
    monkeypatch.setattr(engine, "plan", real_plan)
    run_cycle_now(admin)  # the next cycle places it elsewhere
    assert Job.objects.get(pk=job.pk).state == "running"
    assert not Allocation.objects.filter(job=job, node__name=node).exists()


def test_a_cordon_does_not_wait_for_the_cycle_that_freed_its_node(demo, monkeypatch):
    """A run that succeeded made the cycle write its model into its nodes' recent models
    (node-group affinity) while it settled ended runs, before it planned: the update held
    those node rows for the rest of the cycle, so a cordon of a node a job had just left
    waited for the whole cycle (up to seconds at 10,000 GPUs; docs/benchmarks.md,
    "Session 40"). The models are written last now, and the plan still sees them."""
    from scheduling import engine
    from scheduling.models import Allocation, Job
    from scheduling.services import JobRequest, submit_job
    from scheduling.sim_services import advance_clock

    oncall, admin = demo["oncall"], demo["admin"]
    request = JobRequest(name="done", queue="llm-core", gpus=8, model_name="llama-70b",
                         sim_duration_minutes=5)  # fmt: skip
    job = submit_job(demo["researcher"], request)
    run_cycle_now(admin)
    node = Allocation.objects.filter(job=job).values_list("node__name", flat=True).first()
    advance_clock(admin, 600)
    planned: dict[str, tuple[str, ...]] = {}
    reached, go = threading.Event(), threading.Event()
    real_plan = engine.plan

    def held_plan(snapshot, now):
        planned.update({n.name: n.recent_models for n in snapshot.nodes})
        reached.set()
        assert go.wait(30), "the test never let the cycle go"
        return real_plan(snapshot, now)

    monkeypatch.setattr(engine, "plan", held_plan)
    errors: list[str] = []
    cycle = in_thread(errors, lambda: run_cycle_now(admin))
    try:
        assert reached.wait(30), errors
        cordoner = in_thread(errors, lambda: cordon_node(oncall, node, "ECC errors"))
        cordoner.join(10)
        assert not cordoner.is_alive(), "the cordon waited for the cycle"
    finally:
        go.set()
        cycle.join(60)
    assert errors == []
    assert Job.objects.get(pk=job.pk).state == "succeeded"
    assert planned[node][:1] == ("llama-70b",), "the plan did not see the model that ran there"
    assert Node.objects.get(name=node).recent_models[:1] == ["llama-70b"]
    assert Node.objects.get(name=node).state == "cordoned"


def test_a_start_skipped_for_a_cordon_says_so_in_its_pending_reason(demo, monkeypatch):
    """A planned start skipped because its node was cordoned after the snapshot kept the
    job's pending reason of the cycle before (here: its line's quota was full) for a whole
    cycle, though its turn had come: its owner read a reason that was no longer true. It
    now reads that a node it was to start on was taken out of service (NODES_UNAVAILABLE,
    naming the node), until the next cycle places it elsewhere."""
    from scheduling import engine
    from scheduling.models import Job
    from scheduling.services import JobRequest, cancel_job, submit_job

    oncall, admin, me = demo["oncall"], demo["admin"], demo["researcher"]
    blocker = submit_job(me, JobRequest(name="blocker", queue="llm-core", gpus=8))
    run_cycle_now(admin)
    job = submit_job(me, JobRequest(name="waits", queue="llm-core", gpus=8))
    run_cycle_now(admin)
    before = Job.objects.get(pk=job.pk)
    assert (before.state, before.pending_code) == ("pending", "QUOTA_EXCEEDED")
    cancel_job(me, blocker.pk)
    planned: dict[str, set[str]] = {}
    reached, go = threading.Event(), threading.Event()
    real_plan = engine.plan

    def held_plan(snapshot, now):
        plan = real_plan(snapshot, now)
        nodes = {s.node for st in plan.starts if st.job_id == job.pk for s in st.placement}
        if nodes:  # the cycle that starts it: held after planning
            planned["nodes"] = nodes
            reached.set()
            assert go.wait(30), "the test never let the cycle go"
        return plan

    monkeypatch.setattr(engine, "plan", held_plan)
    errors: list[str] = []
    try:
        for _ in range(3):  # the blocker's GPUs are freed within a cycle or two
            cycle = in_thread(errors, lambda: run_cycle_now(admin))
            while cycle.is_alive() and not reached.wait(0.1):
                pass
            if reached.is_set():
                break
        assert reached.is_set(), errors
        [node] = planned["nodes"]
        cordoner = in_thread(errors, lambda: cordon_node(oncall, node, "ECC errors"))
        cordoner.join(30)
    finally:
        go.set()
        cycle.join(60)
    assert errors == []
    after = Job.objects.get(pk=job.pk)
    assert after.state == "pending", "it started on the node cordoned before its launch"
    assert after.pending_code == "NODES_UNAVAILABLE", after.pending_message
    assert node in after.pending_message and "cordoned" in after.pending_message
    assert after.pending_details["unavailable_nodes"] == 1
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(me)
    shown = client.get(f"/api/v1/jobs/{job.pk}/").json()["pending_reason"]
    assert (shown["code"], shown["message"]) == ("NODES_UNAVAILABLE", after.pending_message)
