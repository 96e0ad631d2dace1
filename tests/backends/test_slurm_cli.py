"""The Slurm CLI client: parsers on captured 22.05 output, then the real four-node testbed.

Run: ``.venv/bin/pytest -p no:django -p no:cacheprovider tests/backends/test_slurm_cli.py -q``
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduling.backends.slurm_cli import (
    SlurmCLI,
    SlurmJob,
    SlurmPermanentError,
    SlurmTransientError,
    classify_error,
    expand_hostlist,
    parse_gres,
    parse_gres_detail,
    parse_index_list,
    parse_jobs,
    parse_nodes,
    parse_sbatch_parsable,
)
from tests.testbeds.slurm import SlurmTestbed, wait_until

DATA = Path(__file__).parent / "data"


def load(name: str) -> str:
    return (DATA / name).read_text()


# =======================================================================================
# Pure parsers on output captured from the real 22.05 testbed (tests/backends/data/)
# =======================================================================================
def test_expand_hostlist():
    assert expand_hostlist("gpu[3-4]") == ["gpu3", "gpu4"]
    assert expand_hostlist("gpu[1-2,4],login") == ["gpu1", "gpu2", "gpu4", "login"]
    assert expand_hostlist("n[08-10]") == ["n08", "n09", "n10"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist(["gpu1", "gpu[2-3]"]) == ["gpu1", "gpu2", "gpu3"]
    assert expand_hostlist("") == [] and expand_hostlist(None) == []


def test_parse_index_list():
    assert parse_index_list("0-1,4") == (0, 1, 4)
    assert parse_index_list("N/A") == ()
    assert parse_index_list("") == ()


def test_parse_gres_variants():
    (e,) = parse_gres("gpu:8(IDX:0-7)")
    assert (e.name, e.type, e.count, e.indices) == ("gpu", None, 8, tuple(range(8)))
    (e,) = parse_gres("gpu:a100:2(IDX:0,3)")
    assert (e.name, e.type, e.count, e.indices) == ("gpu", "a100", 2, (0, 3))
    (e,) = parse_gres("gpu(CNT:2)(IDX:1-2)")  # --gpus style detail
    assert (e.count, e.indices) == (2, (1, 2))
    (e,) = parse_gres("gpu:a100:8(S:0-1)")
    assert (e.type, e.count, e.indices) == ("a100", 8, None)
    (e,) = parse_gres("gres:gpu:2")  # 22.05 tres_per_node
    assert (e.name, e.count) == ("gpu", 2)
    gpu, mps = parse_gres("gpu:4(IDX:0-3),mps:200(IDX:0-1)")
    assert (gpu.name, gpu.count, mps.name, mps.count) == ("gpu", 4, "mps", 200)
    assert parse_gres("(null)") == [] and parse_gres("") == [] and parse_gres(None) == []
    (e,) = parse_gres("gpu:a100:0(IDX:N/A)")
    assert (e.count, e.indices) == (0, ())


def test_parse_gres_detail_maps_nodes_in_order():
    assert parse_gres_detail(["gpu:2(IDX:0-1)", "gpu:1(IDX:5)"], ["gpu3", "gpu4"]) == {
        "gpu3": (0, 1),
        "gpu4": (5,),
    }
    assert parse_gres_detail([], ["gpu1"]) == {}


def test_parse_sbatch_parsable():
    assert parse_sbatch_parsable("42\n") == 42
    assert parse_sbatch_parsable("42;cluster\n") == 42
    with pytest.raises(SlurmPermanentError):
        parse_sbatch_parsable("")


def test_parse_jobs_captured_running_pending_held():
    jobs = {j.job_id: j for j in parse_jobs(load("squeue-22.05-mixed.json"))}
    two = jobs[1]
    assert (two.name, two.state, two.reason) == ("two", "RUNNING", None)
    assert two.nodes == ("gpu2",) and two.gpus_per_node == 2
    assert two.gpu_indices == {"gpu2": (0, 1)}
    assert two.comment == "portal:job=1" and two.requeue and two.restart_count == 0
    assert two.start_time == datetime.fromtimestamp(1795945719, tz=UTC)
    assert two.is_running and two.is_active and not two.is_finished

    gang = jobs[2]
    assert gang.nodes == ("gpu3", "gpu4") and gang.node_count == 2
    assert gang.gpu_indices == {"gpu3": tuple(range(8)), "gpu4": tuple(range(8))}
    assert gang.gpus_per_node == 8 and gang.total_gpus == 16 and gang.comment is None

    pend = jobs[3]
    assert (pend.state, pend.reason, pend.nodes) == ("PENDING", "Resources", ())
    assert pend.start_time is None  # 22.05 puts an estimate there; not a start
    assert pend.required_nodes == ("gpu3",) and pend.gpus_per_node == 8

    held = jobs[4]
    assert held.held and held.reason == "JobHeldUser"
    assert jobs[5].reason == "ReqNodeNotAvail" and not jobs[5].held


def test_parse_jobs_captured_after_requeue_and_finish():
    jobs = {j.job_id: j for j in parse_jobs(load("squeue-22.05-requeued.json"))}
    requeued = jobs[1]  # its node's slurmd was killed
    assert requeued.state == "PENDING" and requeued.restart_count == 1
    assert requeued.nodes == () and requeued.start_time is None
    cancelled = jobs[3]
    assert cancelled.state == "CANCELLED" and cancelled.is_finished
    assert cancelled.start_time is None  # never ran
    assert cancelled.end_time is not None
    done = jobs[10]
    assert done.state == "COMPLETED" and done.nodes == ("gpu1",) and done.exit_code == 0
    assert jobs[7].state == "FAILED" and jobs[7].exit_code == 1


def test_parse_nodes_captured_drain_and_down():
    nodes = {n.name: n for n in parse_nodes(load("sinfo-22.05-drain.json"))}
    gpu1 = nodes["gpu1"]
    assert gpu1.state == "idle" and gpu1.drain and gpu1.drained
    assert gpu1.reason == "maintenance test" and not gpu1.schedulable
    assert gpu1.features == ("rack1", "rdma") and gpu1.rack == "rack1" and gpu1.rdma
    assert (gpu1.gpus_total, gpu1.gpus_used) == (8, 0)
    gpu2 = nodes["gpu2"]
    assert gpu2.state == "mixed" and gpu2.flags == frozenset() and gpu2.reason is None
    assert (gpu2.gpus_used, gpu2.gpus_free) == (2, 6) and gpu2.schedulable
    assert nodes["gpu3"].gpus_free == 0 and not nodes["gpu3"].schedulable
    assert nodes["gpu3"].rack == "rack2"

    down = {n.name: n for n in parse_nodes(load("sinfo-22.05-down.json"))}["gpu2"]
    assert down.state == "down" and down.not_responding and down.down
    assert down.reason == "Not responding" and not down.schedulable


def test_controller_down_json_is_transient_not_empty():
    """22.05 prints an empty list plus an error, and exits 0, when slurmctld is down."""
    with pytest.raises(SlurmTransientError, match="Failed while looking for jobs"):
        parse_jobs(load("squeue-22.05-controller-down.json"))
    with pytest.raises(SlurmTransientError):
        parse_nodes(load("sinfo-22.05-controller-down.json"))
    with pytest.raises(SlurmTransientError):
        parse_jobs("not json{")


@pytest.mark.parametrize(
    "parse, data, error, message",
    [
        (parse_jobs, {"errors": []}, SlurmPermanentError, "squeue --json output has no 'jobs' list"),
        (parse_nodes, {"errors": []}, SlurmPermanentError, "Slurm JSON output has no 'nodes' list"),
        (parse_jobs, "[]", SlurmPermanentError, "unexpected Slurm JSON: list"),
        (parse_nodes, b"{", SlurmTransientError, "unparseable Slurm JSON"),
        (parse_jobs, {"jobs": [], "errors": [{"error": "busy"}]}, SlurmTransientError,
         "squeue: busy"),
        (parse_nodes, {"nodes": [], "errors": ["down"]}, SlurmTransientError, "sinfo: down"),
    ],
)  # fmt: skip
def test_json_output_without_its_list_or_with_errors_is_refused(parse, data, error, message):
    with pytest.raises(error) as info:
        parse(data)
    assert str(info.value).startswith(message)


def test_entries_of_the_list_that_are_not_objects_are_skipped():
    assert parse_jobs({"jobs": ["x", 3, None]}) == []
    (node,) = parse_nodes(json.dumps({"nodes": [[], {"name": "gpu1", "state": "idle"}]}))
    assert node.name == "gpu1" and node.state == "idle"


def test_parse_newer_shapes():
    """Shapes of Slurm >= 23.02 (synthetic, written from the OpenAPI docs: not captured)."""
    job = {
        "job_id": 7,
        "name": "x",
        "job_state": ["PENDING", "REQUEUED"],
        "state_reason": "BeginTime",
        "nodes": "",
        "tres_per_node": "gres/gpu:4",
        "start_time": {"set": True, "infinite": False, "number": 0},
        "submit_time": {"set": True, "infinite": False, "number": 1700000000},
        "node_count": {"set": True, "infinite": False, "number": 1},
        "restart_cnt": 2,
        "priority": {"set": True, "infinite": False, "number": 0},
        "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}},
        "comment": {"job": "portal"},  # unknown shape: must not crash
    }
    (parsed,) = parse_jobs({"jobs": [job], "errors": [], "warnings": []})
    assert parsed.state == "PENDING" and parsed.state_flags == ("REQUEUED",)
    assert parsed.gpus_per_node == 4 and parsed.restart_count == 2 and parsed.held
    assert parsed.submit_time == datetime.fromtimestamp(1700000000, tz=UTC)
    node = {
        "name": "n1",
        "state": ["IDLE", "DRAIN"],
        "reason": "bad fan",
        "features": ["rack3", "rdma"],
        "active_features": ["rack3", "rdma"],
        "gres": "gpu:h100:8(S:0-1)",
        "gres_used": "gpu:h100:3(IDX:0-2)",
        "cpus": 64,
        "alloc_cpus": 3,
    }
    (n,) = parse_nodes({"nodes": [node], "errors": []})
    assert n.state == "idle" and n.drain and n.features == ("rack3", "rdma")
    assert (n.gpus_total, n.gpus_used, n.gpu_indices_used) == (8, 3, (0, 1, 2))


def test_classify_error():
    assert (
        classify_error("squeue: error: Unable to contact slurm controller (connect failure)")
        is SlurmTransientError
    )
    assert classify_error("Socket timed out on send/recv operation") is SlurmTransientError
    assert (
        classify_error("sbatch: error: Batch job submission failed: Invalid node name specified")
        is SlurmPermanentError
    )
    assert classify_error("Invalid job id specified") is SlurmPermanentError


def test_missing_binary_is_permanent_with_hint(tmp_path):
    cli = SlurmCLI(env={"SLURM_CONF": "/nonexistent"}, bin_dir=str(tmp_path))
    with pytest.raises(SlurmPermanentError, match="install-slurm.sh"):
        cli.list_jobs()


# =======================================================================================
# Against the real testbed
# =======================================================================================
SLEEPER = "#!/bin/bash\nsleep 600\n"


def wait_job(cli: SlurmCLI, job_id: int, pred, timeout: float = 20, what: str = "") -> SlurmJob:
    def check():
        job = cli.get_job(job_id)
        return job if job is not None and pred(job) else None

    return wait_until(check, timeout, what or f"job {job_id}")


def running(job: SlurmJob) -> bool:
    return job.state == "RUNNING"


def node(cli: SlurmCLI, name: str):
    found = cli.get_node(name)
    assert found is not None, name
    return found


@pytest.mark.slurm
def test_testbed_nodes_discovered(slurm: SlurmCLI):
    nodes = {n.name: n for n in slurm.list_nodes()}
    assert sorted(nodes) == ["gpu1", "gpu2", "gpu3", "gpu4"]
    for n in nodes.values():
        assert (n.state, n.flags, n.gpus_total, n.gpus_used) == ("idle", frozenset(), 8, 0)
        assert "rdma" in n.features and n.rack in ("rack1", "rack2")
    assert slurm.ping()


@pytest.mark.slurm
def test_submit_pinned_two_gpus(slurm: SlurmCLI, tmp_path, monkeypatch):
    monkeypatch.setenv("PORTAL_SECRET_FOR_TEST", "must-not-leak")
    out = tmp_path / "env.txt"
    script = (
        "#!/bin/bash\n"
        f'echo "$CUDA_VISIBLE_DEVICES|$SLURMD_NODENAME|$MY_VAR|$PORTAL_SECRET_FOR_TEST" > {out}\n'
        "sleep 600\n"
    )
    job_id = slurm.submit(
        "pinned",
        ["gpu3"],
        2,
        1,
        script,
        "portal:job=17",
        environment={"MY_VAR": "hello"},
        workdir=str(tmp_path),
    )
    job = wait_job(slurm, job_id, running)
    assert job.name == "pinned" and job.comment == "portal:job=17"
    assert job.nodes == ("gpu3",) and job.gpus_per_node == 2
    assert job.gpu_indices == {"gpu3": (0, 1)} and job.requeue
    assert job.start_time is not None
    assert wait_until(lambda: out.exists() and out.read_text().strip(), 10, "job output")
    assert out.read_text().strip() == "0,1|gpu3|hello|"  # secret not exported
    gpu3 = node(slurm, "gpu3")
    assert (gpu3.state, gpu3.gpus_used) == ("mixed", 2)

    # a second job on the same node gets the next free GPUs
    second = slurm.submit("second", ["gpu3"], 3, 1, SLEEPER, None)
    assert wait_job(slurm, second, running).gpu_indices == {"gpu3": (2, 3, 4)}
    assert node(slurm, "gpu3").gpus_used == 5


@pytest.mark.slurm
def test_gang_two_nodes_eight_gpus(slurm: SlurmCLI):
    gang = slurm.submit("gang", ["gpu1", "gpu2"], 8, 2, SLEEPER, "gang")
    job = wait_job(slurm, gang, running)
    assert job.nodes == ("gpu1", "gpu2") and job.node_count == 2
    assert job.gpu_indices == {"gpu1": tuple(range(8)), "gpu2": tuple(range(8))}
    assert job.total_gpus == 16
    for name in ("gpu1", "gpu2"):
        assert node(slurm, name).gpus_free == 0

    # one more GPU on a full node waits for resources (reason settles from Priority)
    blocked = slurm.submit("blocked", ["gpu1"], 1, 1, SLEEPER, None)
    job = wait_job(slurm, blocked, lambda j: j.reason == "Resources", what="reason Resources")
    assert job.state == "PENDING" and job.nodes == () and job.start_time is None
    assert {j.job_id for j in slurm.list_jobs(all_states=False)} == {gang, blocked}


@pytest.mark.slurm
def test_cancel(slurm: SlurmCLI):
    job_id = slurm.submit("to-cancel", ["gpu4"], 4, 1, SLEEPER, None)
    wait_job(slurm, job_id, running)
    slurm.cancel(job_id)
    job = wait_job(slurm, job_id, lambda j: j.is_finished)
    assert job.state == "CANCELLED"
    assert job_id not in {j.job_id for j in slurm.list_jobs(all_states=False)}
    slurm.cancel(job_id)  # idempotent on a finished job
    wait_until(lambda: node(slurm, "gpu4").gpus_used == 0, 15, "gpu4 GPUs released")


@pytest.mark.slurm
def test_signal_usr1_reaches_batch_script(slurm: SlurmCLI, tmp_path):
    marker, ready = tmp_path / "checkpointed", tmp_path / "ready"
    script = (
        "#!/bin/bash\n"
        f"trap 'echo checkpoint-$SLURM_JOB_ID > {marker}; exit 0' USR1\n"
        f"touch {ready}\n"
        "while true; do sleep 1; done\n"
    )
    job_id = slurm.submit("ckpt", ["gpu2"], 1, 1, script, None, signal="B:USR1@60")
    wait_job(slurm, job_id, running)
    # RUNNING in slurmctld comes before the script has set its trap: a signal sent
    # earlier is lost or kills the shell.  Wait for the script to say it is ready.
    wait_until(ready.exists, 10, "the script's trap")
    slurm.signal(job_id, "USR1")
    job = wait_job(slurm, job_id, lambda j: j.is_finished, what="job to exit after USR1")
    assert job.state == "COMPLETED" and job.exit_code == 0
    assert marker.read_text().strip() == f"checkpoint-{job_id}"


@pytest.mark.slurm
def test_requeue_runs_again(slurm: SlurmCLI, tmp_path):
    runs = tmp_path / "runs"
    script = f"#!/bin/bash\necho run-$SLURM_RESTART_COUNT >> {runs}\nsleep 600\n"
    job_id = slurm.submit("requeue-me", ["gpu1"], 2, 1, script, None, workdir=str(tmp_path))
    wait_job(slurm, job_id, running)
    wait_until(lambda: runs.exists(), 10, "first run")
    slurm.requeue(job_id)
    job = wait_job(slurm, job_id, lambda j: j.state == "PENDING", what="requeued")
    assert job.restart_count == 1 and job.nodes == ()
    assert job.reason in ("BeginTime", "None", None, "Priority", "Resources")
    # testbed cred_expire=5: eligible again after ~6 s (121 s with Slurm's default)
    job = wait_job(slurm, job_id, running, timeout=30, what="rerun after requeue")
    assert job.nodes == ("gpu1",) and job.gpu_indices == {"gpu1": (0, 1)}
    wait_until(lambda: len(runs.read_text().split()) == 2, 10, "second run")
    assert runs.read_text().split() == ["run-", "run-1"]


@pytest.mark.slurm
def test_hold_and_release(slurm: SlurmCLI):
    blocker = slurm.submit("blocker", ["gpu4"], 8, 1, SLEEPER, None)
    wait_job(slurm, blocker, running)
    waiting = slurm.submit("waiting", ["gpu4"], 8, 1, SLEEPER, None)
    slurm.hold(waiting)
    job = wait_job(slurm, waiting, lambda j: j.held, what="held")
    # held by root/SlurmUser (the portal here) is an admin hold; users get JobHeldUser
    assert job.state == "PENDING" and job.reason == "JobHeldAdmin"
    slurm.cancel(blocker)
    time.sleep(1.5)  # would have started by now if not held
    assert slurm.get_job(waiting).state == "PENDING"
    slurm.release(waiting)
    assert wait_job(slurm, waiting, running).nodes == ("gpu4",)


@pytest.mark.slurm
def test_drain_and_resume(slurm: SlurmCLI):
    running_job = slurm.submit("on-gpu3", ["gpu3"], 2, 1, SLEEPER, None)
    wait_job(slurm, running_job, running)
    slurm.drain("gpu3", "portal: disk failing")
    gpu3 = node(slurm, "gpu3")
    assert gpu3.drain and not gpu3.drained and gpu3.state == "mixed"  # draining
    assert gpu3.reason == "portal: disk failing" and not gpu3.schedulable
    assert slurm.get_job(running_job).state == "RUNNING"  # drain lets jobs finish

    new = slurm.submit("wants-gpu3", ["gpu3"], 1, 1, SLEEPER, None)
    job = wait_job(slurm, new, lambda j: j.reason == "ReqNodeNotAvail", what="ReqNodeNotAvail")
    assert job.state == "PENDING"
    slurm.cancel(running_job)
    assert wait_until(lambda: node(slurm, "gpu3").drained, 15, "gpu3 drained")

    slurm.resume("gpu3")
    assert wait_job(slurm, new, running).nodes == ("gpu3",)
    gpu3 = node(slurm, "gpu3")
    assert not gpu3.drain and gpu3.reason is None and gpu3.state == "mixed"


@pytest.mark.slurm
def test_killed_slurmd_node_down_and_job_requeued(slurm: SlurmCLI, slurm_cluster: SlurmTestbed):
    job_id = slurm.submit("victim", ["gpu2"], 4, 1, SLEEPER, "portal:job=99")
    wait_job(slurm, job_id, running)
    slurm_cluster.kill_slurmd("gpu2")
    t0 = time.monotonic()
    gpu2 = wait_until(
        lambda: (n := node(slurm, "gpu2")).down and n,
        slurm_cluster.slurmd_timeout * 4 + 10,
        "gpu2 to go down",
    )
    assert gpu2.not_responding and gpu2.reason == "Not responding"
    job = wait_job(slurm, job_id, lambda j: j.restart_count >= 1, what="requeue after node loss")
    print(f"node down + job requeued {time.monotonic() - t0:.1f}s after killing slurmd")
    assert job.state == "PENDING" and job.nodes == () and job.comment == "portal:job=99"

    slurm_cluster.restart_slurmd("gpu2")  # ReturnToService=2: node comes back by itself
    job = wait_job(slurm, job_id, running, timeout=30, what="rerun on returned node")
    assert job.nodes == ("gpu2",) and job.restart_count == 1
    assert not node(slurm, "gpu2").down


@pytest.mark.slurm
def test_errors_are_classified(slurm: SlurmCLI, slurm_cluster: SlurmTestbed, tmp_path):
    with pytest.raises(SlurmPermanentError, match="Invalid job id"):
        slurm.cancel(999999)  # scancel exits 0 (and is silent without -v)
    with pytest.raises(SlurmPermanentError, match="Invalid job id"):
        slurm.signal(999999, "USR1")
    with pytest.raises(SlurmPermanentError, match="Invalid job id"):
        slurm.requeue(999999)
    with pytest.raises(SlurmPermanentError, match="Invalid node name"):
        slurm.drain("gpu9", "nope")
    with pytest.raises(SlurmPermanentError, match="Invalid node name"):
        slurm.submit("bad-node", ["gpu9"], 1, 1, SLEEPER, None)
    with pytest.raises(SlurmPermanentError, match="node configuration is not available"):
        slurm.submit("too-many-gpus", ["gpu1"], 9, 1, SLEEPER, None)
    with pytest.raises(SlurmPermanentError, match="Invalid node state"):
        slurm.resume("gpu1")  # not drained
    with pytest.raises(ValueError):
        slurm.drain("gpu1", "")
    with pytest.raises(SlurmPermanentError) as info:
        slurm.cancel(999999)
    assert info.value.stderr and info.value.command[0] == "scancel"

    # a controller nobody listens on: same cluster config, dead port
    dead_conf = tmp_path / "slurm.conf"
    text = slurm_cluster.conf.read_text()
    dead_conf.write_text(
        text.replace(f"SlurmctldPort={slurm_cluster.ctld_port}", "SlurmctldPort=1")
    )
    dead = SlurmCLI(env={"SLURM_CONF": str(dead_conf)}, timeout=15)
    with pytest.raises(SlurmTransientError):
        dead.list_jobs()  # exits 0 with an empty list: must not read as "no jobs"
    with pytest.raises(SlurmTransientError):
        dead.list_nodes()
    assert not dead.ping()
    slow = SlurmCLI(env={"SLURM_CONF": str(dead_conf)}, timeout=1)
    with pytest.raises(SlurmTransientError, match="timed out"):
        slow.submit("never", ["gpu1"], 1, 1, SLEEPER, None)


@pytest.mark.slurm
def test_testbed_leaves_nothing_behind():
    """A second, short-lived testbed starts beside the session one and stops cleanly."""
    with SlurmTestbed(nodes=["gpu1"], gpus_per_node=2) as tb:
        cli = SlurmCLI(env=tb.env)
        job_id = cli.submit("x", ["gpu1"], 2, 1, SLEEPER, None)
        assert wait_job(cli, job_id, running).gpu_indices == {"gpu1": (0, 1)}
        tb_dir = tb.dir
        pids = [tb.slurmd_pid("gpu1")]
    assert tb_dir is not None and not tb_dir.exists()
    from tests.testbeds.slurm import marked_pids

    assert marked_pids(str(tb_dir)) == []
    assert all(not Path(f"/proc/{p}").exists() for p in pids)


def test_install_script_is_idempotent_noop_when_installed():
    if shutil.which("slurmctld") is None:
        pytest.fail("Slurm missing: run scripts/install-slurm.sh", pytrace=False)
    import subprocess

    root = Path(__file__).resolve().parents[2]
    cp = subprocess.run(
        ["sh", str(root / "scripts" / "install-slurm.sh")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert cp.returncode == 0 and "already installed" in cp.stdout


def test_captured_data_files_are_real_22_05():
    for f in DATA.glob("*.json"):
        meta = json.loads(f.read_text())["meta"]
        assert meta["Slurm"]["release"] == "22.05.8", f.name
