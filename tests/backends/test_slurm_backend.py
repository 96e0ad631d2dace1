"""The Slurm backend: its state mapping and topology on fabricated Slurm records, then the
portal's loop driving the real four-node Slurm (``SCHEDULING_BACKEND=slurm``).

The loop scenarios run ``scheduling.cycle.run_cycle`` exactly as Celery beat does,
with the portal's nodes discovered from Slurm (the seeded simulator nodes are
removed first). Slurm runs in real time: waits are polled and bounded.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import call_command

from scheduling.backends.base import (
    FAILED,
    RUNNING,
    STOPPED,
    STOPPING,
    SUCCEEDED,
    LaunchRequest,
    PermanentBackendError,
    TransientBackendError,
)
from scheduling.backends.slurm import (
    DEMO_JOB_SCRIPT,
    RunComment,
    SlurmBackend,
    _View,
    load_topology,
    node_topology,
)
from scheduling.backends.slurm_cli import SlurmCLI, SlurmJob, SlurmNode, SlurmPermanentError
from scheduling.engine.types import Slot
from tests.backends.test_contract_slurm import script_ready, slurm_backend
from tests.testbeds.slurm import SlurmTestbed, wait_until

NOW = 1_800_000_000.0


# =======================================================================================
# Pure: the --comment bookkeeping, topology, and the state mapping
# =======================================================================================
def test_run_comment_round_trips_and_starts_with_the_portal_job_id():
    c = RunComment(job_id=42, progress_s=600.0, every_s=3600.0)
    assert c.render() == "42;progress=600;every=3600"
    assert RunComment.parse(c.render()) == c
    stopped = RunComment.parse("42;progress=600;every=3600;stop=1800000030.5;kill=1800000040")
    assert (stopped.stop_deadline, stopped.killed_at) == (1800000030.5, 1800000040.0)
    assert stopped.stop_requested and not c.stop_requested
    assert RunComment.parse(None) == RunComment()
    assert RunComment.parse("someone's note; progress=x").job_id is None


def snode(name="gpu1", features=("rack1", "rdma"), **kw) -> SlurmNode:
    values = dict(state="idle", flags=frozenset(), reason=None, features=features,
                  gpus_total=8, gpus_used=0)  # fmt: skip
    values.update(kw)
    return SlurmNode(name=name, **values)


def test_topology_from_node_features_with_defaults():
    t = node_topology(snode(features=("rack7", "block2", "rdma", "h100", "80gb")))
    assert (t.rack, t.block, t.rdma, t.gpu_model, t.gpu_memory_gb) == (
        "rack7", "block2", True, "H100", 80,
    )  # fmt: skip
    bare = node_topology(snode(features=()), default_gpu_model="A100", default_gpu_memory_gb=40)
    assert (bare.rack, bare.block, bare.rdma, bare.gpu_model, bare.gpu_memory_gb) == (
        "default", "default", False, "A100", 40,
    )  # fmt: skip


def test_topology_file_wins_over_features(tmp_path: Path):
    path = tmp_path / "topology.json"
    path.write_text(json.dumps({
        "*": {"gpu_model": "H100", "gpu_memory_gb": 80},
        "gpu1": {"rack": "r01", "block": "b0", "rdma": False},
    }))  # fmt: skip
    table = load_topology(path)
    t = node_topology(snode(features=("rack1", "rdma")), table)
    assert (t.rack, t.block, t.rdma, t.gpu_model, t.gpu_memory_gb) == (
        "r01", "b0", False, "H100", 80,
    )  # fmt: skip
    other = node_topology(snode("gpu2", features=("rack1", "rdma")), table)
    assert (other.rack, other.rdma, other.gpu_model) == ("rack1", True, "H100")
    path.write_text(json.dumps({"gpu1": {"racks": "typo"}}))
    with pytest.raises(PermanentBackendError, match="racks|keys"):
        load_topology(path)


def observed_node(n: SlurmNode, free: tuple[int, ...] = (0, 1, 2), topology=None):
    backend = SlurmBackend(cli=SlurmCLI(env={}), grace_s=60, clock=lambda: NOW)
    backend.topology = topology or {}
    view = _View(now=NOW, nodes={n.name: n}, free={n.name: list(free)}, runs={}, predicted={})
    return backend._observed_node(n, view)


def test_an_observed_node_takes_its_topology_as_is_and_its_gpu_count_from_slurm():
    table = {"gpu1": {"rack": "r01", "block": "b3", "rdma": False, "gpu_model": "L40S",
                      "gpu_memory_gb": 48}}  # fmt: skip
    n = snode(features=("rack1", "rdma", "h100"), gpus_total=4, raw_state="idle")
    o = observed_node(n, topology=table)
    assert (o.name, o.rack, o.block, o.rdma, o.gpu_model, o.gpu_memory_gb, o.gpus_total) == (
        "gpu1", "r01", "b3", False, "L40S", 48, 4,
    )  # fmt: skip
    assert asdict(node_topology(n, table)).items() <= asdict(o).items()
    assert (o.health, o.health_detail, o.cordoned, o.inference) == ("ok", "", False, False)
    assert o.free_gpus == (0, 1, 2) and o.residual_gpus == ()


# health: the words every backend reports (base.HEALTH_OK and base.HEALTH_DOWN)
@pytest.mark.parametrize(
    "state, flags, reason, health, detail, free",
    [
        ("idle", {"drain"}, "portal: isolated", "ok", "", (0, 1, 2)),
        ("down", set(), "Not responding", "down",
         "Slurm: node down (down): Not responding", ()),
        ("down", {"drain"}, "portal: isolated", "down", "Slurm: node down (down+drain)", ()),
        ("idle", {"not_responding"}, None, "ok",
         "Slurm: slurmd not responding (idle+not_responding)", ()),
        ("unknown", set(), None, "down", "Slurm: node unknown (unknown)", ()),
    ],
)  # fmt: skip
def test_an_observed_node_is_down_only_on_slurms_verdict(state, flags, reason, health, detail,
                                                         free):  # fmt: skip
    raw = "+".join([state, *sorted(flags)])
    n = snode(state=state, flags=frozenset(flags), reason=reason, raw_state=raw)
    o = observed_node(n)
    assert (o.health, o.health_detail, o.free_gpus) == (health, detail, free)
    assert o.cordoned == ("drain" in flags)


def sjob(state: str, comment: str | None = "7;progress=600;every=60", **kw) -> SlurmJob:
    values = dict(
        job_id=100, name="portal-7-2", state=state, reason=None, nodes=("gpu1",),
        gpus_per_node=2, gpu_indices={"gpu1": (0, 1)}, comment=comment,
        start_time=datetime.fromtimestamp(NOW - 150, tz=UTC), required_nodes=("gpu1",),
    )  # fmt: skip
    values.update(kw)
    if state not in ("PENDING", "RUNNING", "COMPLETING") and "end_time" not in kw:
        values["end_time"] = datetime.fromtimestamp(NOW - 10, tz=UTC)
    return SlurmJob(**values)


def observed(j: SlurmJob, predicted=None, limits=None):
    backend = SlurmBackend(cli=SlurmCLI(env={}), grace_s=60, clock=lambda: NOW)
    view = _View(now=NOW, nodes={}, free={}, runs={j.name: [j]}, predicted=predicted or {},
                 limits=limits or {})  # fmt: skip
    return backend._observed_job(backend._ref_of(j), j, view)


def test_state_mapping_running_with_progress_from_elapsed_time_and_checkpoint_estimate():
    o = observed(sjob("RUNNING"))
    assert (o.state, o.job_id, o.ref) == (RUNNING, 7, "portal-7-2")
    assert o.placement == (Slot("gpu1", (0, 1)),)
    assert o.progress_s == 600 + 150, "start progress plus elapsed run time"
    assert o.last_checkpoint_at == NOW - 150 + 120, "two 60 s checkpoint intervals have passed"


def test_state_mapping_a_pinned_pending_run_is_starting_on_the_gpus_slurm_will_give_it():
    pending = sjob("PENDING", nodes=(), gpu_indices={}, start_time=None)
    o = observed(pending, predicted={100: (Slot("gpu1", (2, 3)),)})
    assert (o.state, o.placement, o.progress_s) == (RUNNING, (Slot("gpu1", (2, 3)),), 600)


def test_state_mapping_stop_request_then_deadline():
    asked = "7;progress=600;every=60;stop=" + str(NOW + 30)
    assert observed(sjob("RUNNING", comment=asked)).state == STOPPING
    late = "7;progress=600;every=60;stop=" + str(NOW - 1)
    assert observed(sjob("RUNNING", comment=late)).state == RUNNING, "past the deadline: kill it"


class RefusingCLI(SlurmCLI):
    """Slurm that still lists the run but refuses to signal it (seen in the whole suite:
    the run, signalled a moment ago, is exiting: "Invalid job id specified")."""

    def __init__(self, job: SlurmJob) -> None:
        super().__init__(env={})
        self.job = job
        self.signals = 0

    def signal(self, job_id: int, sig: str | int, *, batch_only: bool = False) -> None:
        self.signals += 1
        raise SlurmPermanentError("scancel: error: Kill job error on job id 100: Invalid job id")

    def get_job(self, job_id: int) -> SlurmJob | None:
        return self.job


def refusing_backend(j: SlurmJob) -> tuple[SlurmBackend, RefusingCLI]:
    cli = RefusingCLI(j)
    backend = SlurmBackend(cli=cli, grace_s=60, clock=lambda: NOW)
    view = _View(now=NOW, nodes={}, free={}, runs={j.name: [j]}, predicted={})
    backend._with_fresh_jobs = lambda: view  # type: ignore[method-assign]
    return backend, cli


def test_asking_again_to_stop_a_run_already_asked_is_quiet_when_slurm_refuses_the_signal():
    asked = sjob("RUNNING", comment="7;progress=600;every=60;stop=" + str(NOW + 30))
    backend, cli = refusing_backend(asked)
    backend.checkpoint_and_stop("portal-7-2", 60)  # no error: it was asked already
    assert cli.signals == 1
    first = sjob("RUNNING")  # never asked: the refusal is an error for the loop to retry
    backend, _ = refusing_backend(first)
    backend._mark = lambda view, j, c: None  # type: ignore[method-assign]
    with pytest.raises(PermanentBackendError):
        backend.checkpoint_and_stop("portal-7-2", 60)


def test_state_mapping_of_finished_runs():
    done = observed(sjob("COMPLETED"))
    assert (done.state, done.progress_s) == (SUCCEEDED, 600 + 140)
    ckpt = observed(sjob("COMPLETED", comment="7;progress=600;every=60;stop=" + str(NOW)))
    assert (ckpt.state, ckpt.end_reason, ckpt.progress_s) == (STOPPED, "checkpoint", 740)
    assert ckpt.last_checkpoint_at == NOW - 10, "the stop's checkpoint is at the end time"
    killed = observed(sjob("CANCELLED", comment="7;progress=600;every=60;kill=" + str(NOW)))
    assert (killed.state, killed.end_reason, killed.progress_s) == (STOPPED, "killed", 720)
    foreign_cancel = observed(sjob("CANCELLED"))
    assert foreign_cancel.state == FAILED and "outside the portal" in foreign_cancel.end_reason
    no_trap = observed(sjob("FAILED", exit_code=138, comment="7;progress=0;stop=" + str(NOW)))
    assert no_trap.state == STOPPED and "without a checkpoint" in no_trap.end_reason
    crashed = observed(sjob("FAILED", exit_code=3))
    assert crashed.state == FAILED and "code 3" in crashed.end_reason
    node_fail = observed(sjob("NODE_FAIL", comment="7;progress=0;stop=" + str(NOW)))
    assert node_fail.state == FAILED and "node failure on gpu1" in node_fail.end_reason
    requeued = observed(sjob("PENDING", restart_count=1, nodes=(), gpu_indices={}))
    assert requeued.state == FAILED and "requeued by Slurm" in requeued.end_reason


def test_exiting_0_on_slurms_time_limit_warning_is_a_stop_not_a_success():
    # ran 140 s of a 160 s limit; the warning (USR1) came 60 s before the limit
    warned = observed(sjob("COMPLETED"), limits={100: 160.0})
    assert warned.state == STOPPED and "time limit" in warned.end_reason
    assert warned.progress_s == 740 and warned.last_checkpoint_at == NOW - 10
    assert observed(sjob("COMPLETED"), limits={100: 3600.0}).state == SUCCEEDED


def test_foreign_work_is_reported_only_while_it_holds_gpus():
    running = observed(sjob("RUNNING", name="someone-else", comment=None))
    assert (running.ref, running.job_id, running.state) == ("someone-else#100", None, RUNNING)
    assert observed(sjob("PENDING", name="someone-else", comment=None)) is None
    assert observed(sjob("COMPLETED", name="someone-else", comment=None)) is None


def test_the_demo_job_script_honours_the_contract():
    assert "trap checkpoint USR1" in DEMO_JOB_SCRIPT
    first = DEMO_JOB_SCRIPT.splitlines().index("trap checkpoint USR1")
    body = [ln for ln in DEMO_JOB_SCRIPT.splitlines()[:first] if ln and not ln.startswith("#")]
    assert body[0] == "checkpoint() {", "the trap is set before anything slow runs"
    assert "exit 0" in DEMO_JOB_SCRIPT


# =======================================================================================
# The backend on the real test bed: what the contract does not cover
# =======================================================================================
def request(job_id: int, placement, attempt: int = 1, **kw) -> LaunchRequest:
    values = dict(ref=f"portal-{job_id}-{attempt}", job_id=job_id, name=f"t{job_id}",
                  placement=tuple(placement), progress_s=0.0, checkpoint_interval_s=3600.0,
                  checkpoint_path="")  # fmt: skip
    values.update(kw)
    return LaunchRequest(**values)


def slurm_run(cli: SlurmCLI, name: str) -> SlurmJob | None:
    found = [j for j in cli.list_jobs() if j.name == name]
    return found[-1] if found else None


def wait_run(cli: SlurmCLI, name: str, pred, timeout: float = 30, what: str = "") -> SlurmJob:
    return wait_until(
        lambda: (j := slurm_run(cli, name)) is not None and pred(j) and j,
        timeout,
        what or f"{name} in Slurm",
    )


@pytest.mark.slurm
def test_launch_submits_a_pinned_batch_job_with_the_portal_contract(
    slurm: SlurmCLI, slurm_cluster: SlurmTestbed, tmp_path: Path
):
    tmp_path.chmod(0o755)
    backend = slurm_backend(slurm_cluster, tmp_path, grace_s=45)
    ckpt = tmp_path / "ckpt"
    backend.launch(request(9005, [Slot("gpu3", (0, 1, 2))], progress_s=900,
                           checkpoint_interval_s=600, checkpoint_path=str(ckpt)))  # fmt: skip
    j = wait_run(slurm, "portal-9005-1", lambda j: j.state == "RUNNING")
    assert (j.nodes, j.required_nodes, j.gpus_per_node) == (("gpu3",), ("gpu3",), 3)
    assert j.gpu_indices == {"gpu3": (0, 1, 2)}
    assert j.comment == "9005;progress=900;every=600" and not j.requeue
    script_ready(tmp_path, "portal-9005-1")
    log = next(tmp_path.glob("portal-9005-1-*.out")).read_text()
    assert "on gpu3 GPUs 0,1,2 from 900s" in log
    backend.checkpoint_and_stop("portal-9005-1", 45)
    j = wait_run(slurm, "portal-9005-1", lambda j: j.is_finished, what="exit after USR1")
    assert (j.state, j.exit_code) == ("COMPLETED", 0), "the trap checkpointed and exited 0"
    assert (ckpt / "checkpoint-portal-9005-1").exists()
    assert "checkpoint: portal-9005-1" in next(tmp_path.glob("portal-9005-1-*.out")).read_text()


@pytest.mark.slurm
def test_a_gpu_choice_slurm_would_not_make_is_refused_not_run_elsewhere(
    slurm: SlurmCLI, slurm_cluster: SlurmTestbed, tmp_path: Path
):
    backend = slurm_backend(slurm_cluster, tmp_path)
    before = {j.job_id for j in slurm.list_jobs()}
    with pytest.raises(TransientBackendError, match="lowest free"):
        backend.launch(request(9006, [Slot("gpu2", (4, 5))]))
    with pytest.raises(PermanentBackendError, match="same number"):
        gang = [Slot("gpu1", tuple(range(8))), Slot("gpu2", (0, 1, 2, 3))]
        backend.launch(request(9006, gang))
    assert {j.job_id for j in slurm.list_jobs()} == before, "nothing was submitted"


@pytest.mark.slurm
def test_portal_runs_cannot_be_requeued_by_slurm(
    slurm: SlurmCLI, slurm_cluster: SlurmTestbed, tmp_path: Path
):
    backend = slurm_backend(slurm_cluster, tmp_path)
    backend.launch(request(9007, [Slot("gpu4", (0, 1))]))
    run = wait_run(slurm, "portal-9007-1", lambda j: j.state == "RUNNING")
    with pytest.raises(SlurmPermanentError, match="disabled"):
        slurm.requeue(run.job_id)  # --no-requeue: where a run goes next is the portal's call


@pytest.mark.slurm
def test_a_run_slurm_requeued_anyway_reads_failed_and_the_next_attempt_cancels_it(
    slurm: SlurmCLI, slurm_cluster: SlurmTestbed, tmp_path: Path
):
    # A run submitted with --requeue (an older portal, or a site that forces it) and
    # requeued by an operator or a node failure.
    backend = slurm_backend(slurm_cluster, tmp_path)
    first = slurm.submit("portal-9008-1", ["gpu4"], 2, 1, DEMO_JOB_SCRIPT,
                         "9008;progress=0;every=3600", requeue=True)  # fmt: skip
    wait_run(slurm, "portal-9008-1", lambda j: j.state == "RUNNING")
    slurm.requeue(first)
    wait_run(slurm, "portal-9008-1", lambda j: j.restart_count == 1, what="the requeue")
    o = next(j for j in backend.observe().jobs if j.ref == "portal-9008-1")
    assert o.state == FAILED and "requeued by Slurm" in o.end_reason
    backend.launch(request(9008, [Slot("gpu4", (0, 1))], attempt=2))
    old = wait_run(slurm, "portal-9008-1", lambda j: j.is_finished, what="attempt 1 cancelled")
    assert old.state == "CANCELLED"
    wait_run(slurm, "portal-9008-2", lambda j: j.state == "RUNNING")


# =======================================================================================
# The portal's loop on Slurm
# =======================================================================================
@dataclass
class Portal:
    users: dict
    cli: SlurmCLI
    testbed: SlurmTestbed
    out: Path

    def cycle(self, kind: str = "cycle"):
        from scheduling.cycle import run_cycle

        record = run_cycle(kind, wait_s=30)
        assert record is not None and not record.violations, record and record.violations
        return record

    def submit(self, user: str = "researcher", **fields):
        from scheduling.services import JobRequest, submit_job

        values = dict(name="job", queue="llm-core", gpus=8)
        values.update(fields)
        return submit_job(self.users[user], JobRequest(**values))

    def run(self, name: str) -> SlurmJob | None:
        return slurm_run(self.cli, name)

    def wait_run(self, name: str, pred, timeout: float = 30, what: str = "") -> SlurmJob:
        return wait_run(self.cli, name, pred, timeout, what)

    def ready(self, *jobs) -> None:
        for job in jobs:
            job.refresh_from_db()
            self.wait_run(job.backend_ref, lambda j: j.state == "RUNNING")
            script_ready(self.out, job.backend_ref)

    def log(self, ref: str) -> str:
        return "".join(p.read_text() for p in self.out.glob(f"{ref}-*.out"))


def placement_of(job) -> dict[str, tuple[int, ...]]:
    rows = job.allocations.order_by("node__name", "gpu_index").values_list(
        "node__name", "gpu_index"
    )
    out: dict[str, list[int]] = {}
    for node, gpu in rows:
        out.setdefault(node, []).append(gpu)
    return {n: tuple(g) for n, g in out.items()}


@pytest.fixture
def portal(db, slurm: SlurmCLI, slurm_cluster: SlurmTestbed, settings, tmp_path, monkeypatch):
    """The portal on the Slurm test bed: demo lines, queues and users; nodes from Slurm."""
    from django.contrib.auth import get_user_model

    from quotas.models import BusinessLine, Queue
    from scheduling.models import Node

    tmp_path.chmod(0o755)
    settings.SCHEDULING_BACKEND = "slurm"
    settings.SLURM_CONF = str(slurm_cluster.conf)
    settings.SLURM_JOB_OUTPUT = str(tmp_path / "%x-%j.out")
    settings.SLURM_WORKDIR = str(tmp_path)
    settings.PREEMPTION_GRACE_SECONDS = 30.0
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-123")
    call_command(
        "seed_demo", nodes=4, nodes_per_rack=2, uniform=True, no_workload=True, stdout=None
    )
    Node.objects.all().delete()  # the cluster is Slurm's, discovered by the loop
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)
    p = Portal(
        users={u.username: u for u in get_user_model().objects.all()},
        cli=slurm,
        testbed=slurm_cluster,
        out=tmp_path,
    )
    sweep = p.cycle("sweep")
    assert sorted(Node.objects.values_list("name", flat=True)) == slurm_cluster.nodes
    assert sum("discovered" in d for d in sweep.drift) == 4
    return p


@pytest.mark.slurm
def test_discovered_nodes_carry_racks_and_rdma_from_slurm_features(portal: Portal):
    from scheduling.models import Node

    nodes = {n.name: n for n in Node.objects.all()}
    assert {n: (v.rack, v.rdma, v.gpus_total) for n, v in nodes.items()} == {
        "gpu1": ("rack1", True, 8), "gpu2": ("rack1", True, 8),
        "gpu3": ("rack2", True, 8), "gpu4": ("rack2", True, 8),
    }  # fmt: skip


@pytest.mark.slurm
def test_a_submitted_job_runs_on_slurm_after_one_cycle_and_cancelling_frees_it(
    portal: Portal,
):
    from scheduling.services import cancel_job

    job = portal.submit(name="train", gpus=4)
    assert portal.cycle().starts == 1
    job.refresh_from_db()
    assert job.state == "running" and job.backend_ref == f"portal-{job.pk}-1"
    run = portal.wait_run(job.backend_ref, lambda j: j.state == "RUNNING")
    (node,) = run.nodes
    assert run.required_nodes == (node,) and run.gpus_per_node == 4
    assert run.comment.startswith(f"{job.pk};")
    assert placement_of(job) == dict(run.gpu_indices), "the portal's GPUs are Slurm's GPUs"
    portal.cycle()
    job.refresh_from_db()
    assert job.state == "running" and job.progress_seconds >= 0

    cancel_job(portal.users["researcher"], job.pk)
    portal.cycle()
    portal.wait_run(job.backend_ref, lambda j: j.is_finished, what="the cancelled run")
    portal.cycle()
    assert not job.allocations.exists()


@pytest.mark.slurm
def test_a_16_gpu_gang_runs_as_one_slurm_job_on_two_nodes_of_a_rack(portal: Portal):
    from scheduling.models import Node

    job = portal.submit(name="gang", gpus=16)
    portal.cycle()
    job.refresh_from_db()
    assert job.state == "running"
    run = portal.wait_run(job.backend_ref, lambda j: j.state == "RUNNING")
    assert run.node_count == 2 and run.gpus_per_node == 8 and run.total_gpus == 16
    racks = set(Node.objects.filter(name__in=run.nodes).values_list("rack", flat=True))
    assert len(racks) == 1, "a gang stays in one rack"
    assert placement_of(job) == {n: tuple(range(8)) for n in run.nodes}


@pytest.mark.slurm
def test_urgent_work_preempts_an_experiment_gracefully_through_usr1(portal: Portal):
    from scheduling.models import Job

    experiments = [portal.submit(name=f"exp{i}", queue="llm-experiment") for i in range(4)]
    assert portal.cycle().starts == 4
    portal.ready(*experiments)
    urgent = portal.submit("lead", name="hotfix", queue="llm-urgent")
    record = portal.cycle()
    assert record.preemptions == 1
    (victim,) = Job.objects.filter(state="preempting")
    victim_node = next(iter(placement_of(victim)))
    ended = portal.wait_run(victim.backend_ref, lambda j: j.is_finished, what="victim to stop")
    assert (ended.state, ended.exit_code) == ("COMPLETED", 0)
    assert "checkpoint: " + victim.backend_ref in portal.log(victim.backend_ref)

    portal.cycle()
    victim.refresh_from_db()
    urgent.refresh_from_db()
    assert victim.state == "pending" and victim.preemption_count == 1
    kinds = list(victim.events.values_list("kind", flat=True))
    assert "preempted" in kinds and "requeued" in kinds
    assert urgent.state == "running" and list(placement_of(urgent)) == [victim_node]
    portal.wait_run(urgent.backend_ref, lambda j: j.state == "RUNNING")


@pytest.mark.slurm
def test_draining_a_node_drains_it_in_slurm_moves_its_job_and_resume_undoes_it(
    portal: Portal,
):
    from scheduling.models import Node
    from scheduling.nodes.services import drain_node, uncordon_node

    job = portal.submit(name="mover", gpus=8)
    portal.cycle()
    portal.ready(job)
    (node,) = placement_of(job)
    first_ref = job.backend_ref
    drain_node(portal.users["oncall"], node, "disk failing")
    portal.cycle()
    slurm_node = portal.cli.get_node(node)
    assert slurm_node.drain and "disk failing" in (slurm_node.reason or "")
    job.refresh_from_db()
    assert job.state == "preempting" and job.stop_reason == "drain"
    portal.wait_run(first_ref, lambda j: j.is_finished, what="the run to checkpoint and end")

    portal.cycle()
    job.refresh_from_db()
    assert job.state == "running" and job.attempt == 2 and job.preemption_count == 0
    (new_node,) = placement_of(job)
    assert new_node != node
    assert portal.wait_run(job.backend_ref, lambda j: j.state == "RUNNING").nodes == (new_node,)

    uncordon_node(portal.users["oncall"], node, "disk replaced")
    portal.cycle()
    assert not portal.cli.get_node(node).drain
    assert Node.objects.get(name=node).state == "ready"


@pytest.mark.slurm
def test_a_killed_slurmd_isolates_its_node_and_the_job_is_retried_elsewhere(portal: Portal):
    from monitoring.models import Alert
    from scheduling.models import Node

    job = portal.submit(name="survivor", gpus=8)
    portal.cycle()
    portal.ready(job)
    (node,) = placement_of(job)
    first_ref = job.backend_ref
    portal.testbed.kill_slurmd(node)
    t0 = time.monotonic()

    def moved() -> bool:
        portal.cycle()
        job.refresh_from_db()
        return job.state == "running" and job.attempt == 2

    wait_until(moved, portal.testbed.slurmd_timeout * 4 + 20, "the job to restart elsewhere", 1)
    print(f"killed slurmd -> job running elsewhere in {time.monotonic() - t0:.1f} s")

    def isolated_now() -> bool:  # Slurm may requeue the job before it marks the node down
        portal.cycle()
        return Node.objects.get(name=node).state == "unhealthy"

    wait_until(isolated_now, portal.testbed.slurmd_timeout * 4 + 20, "the node's isolation", 1)
    isolated = Node.objects.get(name=node)
    assert isolated.state == "unhealthy" and isolated.health == "down"
    assert "isolated automatically" in isolated.state_reason
    assert Alert.objects.filter(kind="node_unhealthy", subject=node).exists()
    assert job.retry_count == 1
    assert node not in placement_of(job)
    assert portal.run(first_ref).state == "NODE_FAIL"
    assert portal.wait_run(job.backend_ref, lambda j: j.state == "RUNNING").nodes != (node,)
    assert portal.cli.get_node(node).drain, "the portal drained it in Slurm too"


@pytest.mark.slurm
def test_work_started_outside_the_portal_is_drift_and_keeps_its_gpus(portal: Portal):
    from scheduling.models import Allocation, Job, Node

    foreign = portal.cli.submit("someone-elses-sim", ["gpu1"], 8, 1, "sleep 600\n", None)
    wait_until(lambda: portal.cli.get_job(foreign).state == "RUNNING", 20, "the foreign job")
    portal.cli.drain("gpu4", "hand-drained by the operators")
    jobs = [portal.submit(name=f"j{i}", gpus=8) for i in range(4)]
    record = portal.cycle()
    assert f"run someone-elses-sim#{foreign} was started outside the portal" in record.drift
    assert "node gpu4 cordoned outside the portal" in record.drift
    assert Node.objects.get(name="gpu4").state == "cordoned"
    used = set(Allocation.objects.values_list("node__name", flat=True))
    assert used == {"gpu2", "gpu3"}, "gpu1 is busy with foreign work, gpu4 drained"
    assert Job.objects.filter(pk__in=[j.pk for j in jobs], state="running").count() == 2
    assert portal.cli.get_job(foreign).state == "RUNNING", "the portal leaves it alone"
    again = portal.cycle()
    assert again.starts == 0 and not again.errors


@pytest.mark.slurm
def test_a_run_at_its_time_limit_checkpoints_through_usr1_and_the_job_fails(portal: Portal):
    """A one-minute limit on the real Slurm (``scheduling.time_limits``): after a minute of
    wall time the loop asks the run to checkpoint and stop (USR1 to the batch script, as a
    preemption), the script checkpoints and exits 0, and the job fails on its limit, with
    no retry, its checkpoint's progress kept."""
    import time

    from scheduling.models import JobRun

    job = portal.submit(name="bounded", queue="llm-experiment", time_limit_minutes=1,
                        checkpoint_path="nfs://ckpt/bounded", max_retries=3)  # fmt: skip
    portal.cycle()
    portal.ready(job)
    job.refresh_from_db()
    assert job.state == "running"
    deadline = time.monotonic() + 150
    while job.state == "running" and time.monotonic() < deadline:
        time.sleep(3)
        portal.cycle()
        job.refresh_from_db()
    assert job.state == "preempting", "asked to stop at its limit"
    assert job.events.last().message.startswith("asked to checkpoint and stop: it reached its")
    ended = portal.wait_run(job.backend_ref, lambda j: j.is_finished, what="the run to stop")
    assert (ended.state, ended.exit_code) == ("COMPLETED", 0)
    assert "checkpoint: " + job.backend_ref in portal.log(job.backend_ref)
    portal.cycle()
    job.refresh_from_db()
    assert job.state == "failed" and job.retry_count == 0
    assert job.failure_reason.startswith("time limit reached (Slurm's TIMEOUT): the run lasted 1")
    assert "of the 1 min a run may last, and stopped after its checkpoint" in job.failure_reason
    assert list(JobRun.objects.filter(job=job).values_list("outcome", flat=True)) == ["failed"]
    portal.cycle()
    job.refresh_from_db()
    assert job.state == "failed" and job.attempt == 1, "never launched again"
