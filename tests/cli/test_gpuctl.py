"""gpuctl end to end against a live portal: submit, list, explain, cancel, queues, nodes,
alerts, quota requests, and how it fails (exit codes, one-line errors)."""

from __future__ import annotations

import json
import socket

import pytest

from core.models import AuditRecord
from monitoring.models import Alert
from monitoring.services import raise_alert
from quotas.models import BusinessLine, Queue
from scheduling import verdict_text
from scheduling.models import Job, Node
from tests.drills import cycle

pytestmark = pytest.mark.django_db(transaction=True)


def one_line_error(run) -> str:
    assert run.err.startswith("gpuctl: error: "), run.err
    assert run.err.count("\n") == 1, run.err
    return run.err


def columns_aligned(table: str, column: str) -> bool:
    """Every row's cell of ``column`` starts where the header does."""
    lines = table.rstrip("\n").splitlines()
    start = lines[0].index(column)
    return all(len(line) > start and line[start - 1] == " " for line in lines[1:])


@pytest.fixture
def roomy(demo):
    BusinessLine.objects.update(quota_gpus=1000, guarantee_gpus=0)
    Queue.objects.update(quota_gpus=None, guarantee_gpus=0)


# -- submit ---------------------------------------------------------------------------------


def test_submit_with_flags_stores_a_pending_job_and_says_what_next(gpuctl):
    run = gpuctl("researcher", "submit", "llama-ft", "-q", "llm-finetune", "-g", "4",
                 "--checkpoint-path", "nfs://ckpt/llama", "--model", "llama-7b", "--no-rdma")  # fmt: skip
    assert run.code == 0, run.err
    job = Job.objects.get()
    assert (job.name, job.queue.name, job.gpus, job.state) == (
        "llama-ft",
        "llm-finetune",
        4,
        "pending",
    )
    assert job.checkpoint_path == "nfs://ckpt/llama" and job.model_name == "llama-7b"
    assert job.owner.username == "researcher" and job.rdma is False
    assert run.out == (
        f"submitted job {job.pk} (llama-ft) to llm-finetune: 4 GPUs, tier finetune, pending. "
        f"Next: gpuctl explain {job.pk}\n"
    )


def test_submit_from_a_yaml_file_with_flags_overriding_it(gpuctl, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: from-file\nqueue: llm-experiment\ngpus: 8\npreemptible: true\n"
                    "checkpoint_path: s3://bucket/run\nmax_retries: 5\n")  # fmt: skip
    run = gpuctl("researcher", "submit", "-f", str(spec), "--gpus", "16", "--json")
    assert run.code == 0, run.err
    body = json.loads(run.out)
    job = Job.objects.get(pk=body["id"])
    assert (job.name, job.gpus, job.max_retries, job.gpus_per_node) == ("from-file", 16, 5, 8)
    assert body["state"] == "pending" and body["events"][0]["kind"] == "submitted"


def test_a_refused_submission_is_one_line_exit_1_and_stores_nothing(gpuctl, tmp_path):
    run = gpuctl("researcher", "submit", "huge", "-q", "llm-finetune", "-g", "64")
    assert run.code == 1
    assert "gpus: the cluster has 32 GPUs in all; this job asks 64" in one_line_error(run)
    # a shape the cluster could never run, even empty (#15 NEVER_FITS at submit), names its rule
    run = gpuctl("researcher", "submit", "wide", "-q", "llm-finetune", "-g", "8",
                 "--gpu-memory-gb", "500")  # fmt: skip
    assert run.code == 1
    assert (
        "gpu_memory_gb: This job could never run on this cluster, even empty: it asks for "
        "500 GB per GPU" in one_line_error(run)
    )
    run = gpuctl("researcher2", "submit", "x", "-q", "llm-finetune", "-g", "1")
    assert run.code == 1 and "queue: you may not submit to this queue" in one_line_error(run)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\nqueue: llm-finetune\ngpus: 1\ncolour: blue\n")
    run = gpuctl("researcher", "submit", "-f", str(spec))
    assert run.code == 1 and "colour: unknown field" in one_line_error(run)
    assert Job.objects.count() == 0


def test_submit_usage_errors_exit_2(gpuctl, tmp_path):
    run = gpuctl("researcher", "submit", "-q", "llm-finetune")
    assert run.code == 2 and "missing NAME, --gpus" in one_line_error(run)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    run = gpuctl("researcher", "submit", "-f", str(bad))
    assert run.code == 2 and "cannot read job file" in one_line_error(run)
    run = gpuctl("researcher", "submit", "x", "-q", "q", "-g", "many")
    assert run.code == 2 and "invalid int value" in run.err
    assert Job.objects.count() == 0


# -- jobs, explain, cancel --------------------------------------------------------------------


def test_jobs_lists_an_aligned_table_with_filters_and_json(gpuctl, roomy):
    for name, queue in (("a", "llm-finetune"), ("b", "llm-core"), ("c", "llm-finetune")):
        assert gpuctl("researcher", "submit", name, "-q", queue, "-g", "1").code == 0
    assert gpuctl("lead", "submit", "leads", "-q", "llm-core", "-g", "1").code == 0
    run = gpuctl("researcher", "jobs")
    assert run.code == 0
    lines = run.out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "OWNER", "QUEUE", "TIER", "GPUS", "STATE", "REASON",
                                "SUBMITTED(UTC)", "EST.START(UTC)"]  # fmt: skip
    assert len(lines) == 5 and all(
        columns_aligned(run.out, c) for c in ("STATE", "QUEUE", "REASON")
    )
    assert all(" pending  NEW " in line for line in lines[1:])

    mine = gpuctl("lead", "jobs", "--mine", "--json")
    assert [j["name"] for j in json.loads(mine.out)] == ["leads"]
    core = gpuctl("researcher", "--json", "jobs", "--queue", "llm-core")
    assert sorted(j["name"] for j in json.loads(core.out)) == ["b", "leads"]
    assert gpuctl("researcher", "jobs", "--state", "running").err == "no jobs match\n"
    limited = gpuctl("researcher", "jobs", "--limit", "2")
    assert len(limited.out.splitlines()) == 3 and "2 of 4 jobs shown" in limited.err
    assert gpuctl("researcher2", "jobs", "--json").out.strip() == "[]", "other lines see nothing"


def test_lists_follow_pages(gpuctl, roomy, monkeypatch):
    monkeypatch.setattr("gpuctl.client.PAGE_MAX", 2)
    for i in range(5):
        assert gpuctl("researcher", "submit", f"j{i}", "-q", "llm-finetune", "-g", "1").code == 0
    run = gpuctl("researcher", "jobs", "--all", "--json")
    assert sorted(j["name"] for j in json.loads(run.out)) == [f"j{i}" for i in range(5)]
    assert len(json.loads(gpuctl("researcher", "nodes", "--json").out)) == 4


def test_explain_shows_the_verdict_numbers_remedy_estimate_and_events(gpuctl, roomy, api):
    Queue.objects.filter(name="llm-finetune").update(quota_gpus=4)
    over = gpuctl("researcher", "submit", "over-quota", "-q", "llm-finetune", "-g", "8",
                  "--no-preemptible", "--json")  # fmt: skip
    running = []
    for i in range(4):
        run = gpuctl("researcher", "submit", f"fill{i}", "-q", "llm-core", "-g", "8",
                     "--sim-duration-minutes", "60", "--runtime", "60", "--json")  # fmt: skip
        running.append(json.loads(run.out)["id"])
    waits = json.loads(gpuctl("researcher", "submit", "waits", "-q", "llm-core", "-g", "8",
                              "--runtime", "30", "--json").out)["id"]  # fmt: skip
    fresh = gpuctl("researcher", "explain", str(waits))
    assert fresh.code == 0 and "NEW: not seen by a scheduling cycle yet" in fresh.out
    cycle(api("admin"))

    run = gpuctl("researcher", "explain", str(waits))
    assert run.code == 0, run.err
    job = Job.objects.get(pk=waits)
    lines = run.out.splitlines()
    assert lines[:4] == [
        f"job              {waits} 'waits' by researcher",
        "queue            llm-core (line llm, tier core)",
        "asks             8 GPUs; rdma no, preemptible no",
        "state            pending",
    ]
    assert lines[4] == f"verdict          {job.pending_code}: {job.pending_message}"
    assert job.pending_code == "INSUFFICIENT_GPUS"
    # The numbers as the job page shows them: each with its label and unit (#15).
    facts = verdict_text.facts(job.pending_details)
    assert lines[5] == "numbers          " + "; ".join(f"{f['label']}: {f['text']}" for f in facts)
    assert "Matching GPUs left free: 0" in lines[5] and "GPUs short: 8" in lines[5]
    assert lines[6] == f"remedy           {job.pending_remedy}"
    assert job.estimated_start is not None
    assert f"estimated start  {job.estimated_start:%Y-%m-%d %H:%M} UTC" in lines
    assert "events:" in lines and "submitted  submitted by researcher" in run.out

    quota = gpuctl("researcher", "explain", str(json.loads(over.out)["id"]))
    assert "verdict          QUOTA_EXCEEDED: Queue llm-finetune holds 0 of its 4 GPU quota" in (
        quota.out
    )
    assert "Quota (GPUs): 4" in quota.out and "GPUs this job asks: 8" in quota.out
    assert "estimated start  unknown: it is larger than the whole queue quota" in quota.out
    assert "remedy           The job is larger than the whole queue quota" in quota.out

    started = gpuctl("researcher", "explain", str(running[0]))
    assert "state      running" in started.out
    assert "placement  r000-n0" in started.out and "[0-7]" in started.out
    assert "  started    started on r000-n0" in started.out
    as_json = json.loads(gpuctl("researcher", "explain", str(waits), "--json").out)
    assert as_json["pending_reason"]["details"] == job.pending_details

    hidden = gpuctl("researcher2", "explain", str(waits))
    assert hidden.code == 1 and "not found" in one_line_error(hidden)


def test_cancel_follows_the_rules_and_reports_each_job(gpuctl):
    ids = []
    for name in ("one", "two"):
        run = gpuctl("researcher", "submit", name, "-q", "llm-finetune", "-g", "1", "--json")
        ids.append(str(json.loads(run.out)["id"]))
    denied = gpuctl("researcher2", "cancel", ids[0])
    assert denied.code == 1 and "not found" in one_line_error(denied)
    denied = gpuctl("oncall", "cancel", ids[0])
    assert denied.code == 1 and "not allowed: only the owner" in one_line_error(denied)
    assert Job.objects.filter(state="pending").count() == 2

    run = gpuctl("lead", "cancel", *ids)
    assert (
        run.code == 0
        and run.out == f"job {ids[0]} (one): cancelled\njob {ids[1]} (two): cancelled\n"
    )
    again = gpuctl("researcher", "cancel", ids[0])
    assert again.code == 1 and "state: job is already cancelled" in one_line_error(again)


def test_cancel_chooses_jobs_by_filters_as_scancel_does(gpuctl):
    """``--me``, ``-u``, ``-q``, ``--state`` choose among the active jobs (``--dry-run``
    lists them); no ids and no filter, or both, is a usage error that cancels nothing."""

    def submit(user, name, queue):
        run = gpuctl(user, "submit", name, "-q", queue, "-g", "1", "--json")
        return json.loads(run.out)["id"]

    mine = [submit("researcher", f"sweep-{i}", "llm-experiment") for i in range(3)]
    other_queue = submit("researcher", "eval", "llm-finetune")
    leads = submit("lead", "leads", "llm-experiment")
    for argv in ([], ["1", "--me"]):
        refused = gpuctl("researcher", "cancel", *argv)
        assert refused.code == 2 and "gpuctl cancel: error:" in refused.err, argv
    assert Job.objects.filter(state="pending").count() == 5

    dry = gpuctl("researcher", "cancel", "--me", "-q", "llm-experiment", "--dry-run")
    assert dry.code == 0 and [line.split()[3] for line in dry.out.splitlines()] == [
        str(i) for i in mine
    ]
    assert Job.objects.filter(state="pending").count() == 5  # a dry run cancels nothing

    run = gpuctl("researcher", "cancel", "--me", "-q", "llm-experiment", "--state", "pending")
    assert run.code == 0 and run.out.count(": cancelled") == 3
    assert set(Job.objects.filter(state="cancelled").values_list("pk", flat=True)) == set(mine)
    # another's jobs, by -u: the rules still apply per job (the researcher may not)
    denied = gpuctl("researcher", "cancel", "-u", "lead")
    assert denied.code == 1 and "not allowed" in denied.err
    assert Job.objects.get(pk=leads).state == "pending"
    assert Job.objects.get(pk=other_queue).state == "pending"
    none = gpuctl("researcher", "cancel", "--me", "-q", "llm-experiment")
    assert none.code == 0 and none.out == "" and "no jobs match" in none.err


# -- queues, lines, summary -----------------------------------------------------------------


def test_queues_and_lines_tables(gpuctl):
    gpuctl("researcher", "submit", "q", "-q", "llm-finetune", "-g", "2")
    run = gpuctl("researcher", "queues", "--line", "llm")
    assert run.code == 0
    lines = run.out.splitlines()
    assert lines[0].split() == ["QUEUE", "LINE", "TIER", "QUOTA", "GUARANTEE", "USED", "RUNNING",
                                "PENDING", "EVICTION"]  # fmt: skip
    assert len(lines) == 5 and columns_aligned(run.out, "TIER")
    finetune = Queue.objects.get(name="llm-finetune")
    row = next(line.split() for line in lines if line.startswith("llm-finetune"))
    assert row == ["llm-finetune", "llm", "finetune", str(finetune.quota_gpus),
                   str(finetune.guarantee_gpus), "0", "0", "1", "-"]  # fmt: skip
    assert next(line for line in lines if line.startswith("llm-core")).split()[3] == "line"
    assert len(json.loads(gpuctl("researcher", "queues", "--json").out)) == 12
    line_table = gpuctl("researcher2", "lines")
    assert line_table.code == 0 and line_table.out.splitlines()[0].split()[0] == "LINE"
    assert len(line_table.out.splitlines()) == 4


def test_summary(gpuctl):
    run = gpuctl("researcher", "summary")
    assert run.code == 0
    assert run.out.splitlines() == [
        "GPUs                  32 total, 32 healthy, 0 allocated on healthy",
        "utilization           0.0% of healthy GPUs",
        "pending jobs          none",
        "nodes                 ready 4",
        "eviction (last 72 h)  no data yet",  # no rollup has run: no figures, not 0%
    ]
    assert json.loads(gpuctl("admin", "summary", "--json").out)["gpus_total"] == 32


# -- nodes ----------------------------------------------------------------------------------


def test_nodes_list_and_on_call_cordon_drain_uncordon(gpuctl):
    names = sorted(Node.objects.values_list("name", flat=True))
    listing = gpuctl("researcher", "nodes")
    assert listing.code == 0 and len(listing.out.splitlines()) == 5
    assert listing.out.splitlines()[1].split()[:8] == [names[0], Node.objects.get(name=names[0]).rack,
                                                       "H100", "8", "8", "yes", "ready", "ok"]  # fmt: skip

    run = gpuctl("oncall", "nodes", "cordon", names[0], "--reason", "fan alarm")
    assert run.code == 0 and run.out == f"{names[0]}: cordoned (fan alarm)\n"
    node = Node.objects.get(name=names[0])
    assert (node.state, node.state_reason) == ("cordoned", "fan alarm")
    audit = AuditRecord.objects.get(action="node.cordon")
    assert audit.actor_name == "oncall" and audit.reason == "fan alarm" and audit.source_ip

    cordoned = gpuctl("researcher", "nodes", "--state", "cordoned")
    assert [line.split()[0] for line in cordoned.out.splitlines()[1:]] == [names[0]]
    assert "fan alarm" in cordoned.out

    run = gpuctl("admin", "nodes", "drain", names[0], names[1], "--reason", "rack work", "--json")
    assert run.code == 0 and [n["state"] for n in json.loads(run.out)] == ["draining", "draining"]
    assert gpuctl("oncall", "nodes", "uncordon", names[0], "--reason", "fixed").code == 0
    assert Node.objects.get(name=names[0]).state == "ready"


def test_node_actions_refused_with_one_line_and_nothing_changed(gpuctl):
    name = Node.objects.order_by("name").first().name
    run = gpuctl("researcher", "nodes", "cordon", name, "--reason", "curious")
    assert run.code == 1
    assert one_line_error(run) == (
        f"gpuctl: error: {name}: not allowed: on-call engineers and admins only\n"
    )
    run = gpuctl("oncall", "nodes", "uncordon", name, "--reason", "already ready")
    assert run.code == 1 and "is ready; cannot uncordon it" in one_line_error(run)
    run = gpuctl("oncall", "nodes", "cordon", "no-such-node", "--reason", "x")
    assert run.code == 1 and "not found" in one_line_error(run)
    run = gpuctl("oncall", "nodes", "cordon", name)
    assert run.code == 2 and "--reason" in run.err
    assert set(Node.objects.values_list("state", flat=True)) == {"ready"}
    assert not AuditRecord.objects.exists()


# -- alerts ---------------------------------------------------------------------------------


def test_alerts_list_ack_resolve(gpuctl):
    first = raise_alert("node_unhealthy", "critical", "r000-n00", "GPU 3 fell off the bus").pk
    second = raise_alert("residual_process", "warning", "r000-n01", "stale python on GPU 2").pk
    run = gpuctl("oncall", "alerts")
    assert run.code == 0
    lines = run.out.splitlines()
    assert lines[0].split() == ["ID", "SEVERITY", "STATUS", "KIND", "SUBJECT", "COUNT", "CREATED(UTC)",
                                "MESSAGE"]  # fmt: skip
    assert {int(line.split()[0]) for line in lines[1:]} == {first, second}

    assert gpuctl("oncall", "alerts", "ack", str(first)).out == (
        f"alert {first} (node_unhealthy r000-n00): acknowledged\n"
    )
    assert gpuctl("admin", "alerts", "resolve", str(second)).code == 0
    assert Alert.objects.get(pk=first).status == "acknowledged"
    assert Alert.objects.get(pk=second).status == "resolved"
    unresolved = gpuctl("oncall", "alerts", "--json")
    assert [a["id"] for a in json.loads(unresolved.out)] == [first]
    everything = gpuctl("oncall", "alerts", "--all", "--json")
    assert len(json.loads(everything.out)) == 2

    denied = gpuctl("researcher", "alerts")
    assert denied.code == 1 and "not allowed: on-call engineers and admins only" in one_line_error(
        denied
    )
    again = gpuctl("oncall", "alerts", "resolve", str(second))
    assert again.code == 1 and "status: alert is already resolved" in one_line_error(again)


# -- quota requests -------------------------------------------------------------------------


def test_quota_request_then_approve(gpuctl):
    """A lead requests, the admin sees the impact and approves; the contract changes.

    (A portal without quota-requests/: tests/cli/test_gpuctl_client.py.)"""
    argv = ["quota", "request", "--line", "llm", "--quota", "20", "--guarantee", "6",
            "--reason", "more fine-tuning"]  # fmt: skip
    run = gpuctl("lead", *argv, "--json")
    assert run.code == 0, run.err
    request_id = str(json.loads(run.out)["id"])
    listed = gpuctl("admin", "quota", "list", "--json")
    assert request_id in {str(r["id"]) for r in json.loads(listed.out)}
    impact = gpuctl("admin", "quota", "impact", request_id)
    assert impact.code == 0 and impact.out.strip()
    denied = gpuctl("lead", "quota", "approve", request_id, "--note", "self-service")
    assert denied.code == 1 and "not allowed: only cluster admins" in one_line_error(denied)
    run = gpuctl("admin", "quota", "approve", request_id, "--note", "ok for Q4")
    assert run.code == 0, run.err
    line = BusinessLine.objects.get(name="llm")
    assert (line.quota_gpus, line.guarantee_gpus) == (20, 6)


# -- configuration and failures -------------------------------------------------------------


def test_help_teaches_with_examples(gpuctl, capsys):
    for argv in (["--help"], ["submit", "--help"], ["nodes", "--help"], ["quota", "--help"],
                 ["explain", "--help"], ["alerts", "--help"]):  # fmt: skip
        run = gpuctl(None, *argv)
        assert run.code == 0 and "examples:" in run.out, argv
    assert "exit codes:" in gpuctl(None, "--help").out
    assert gpuctl(None, "frobnicate").code == 2


def test_bad_or_missing_credentials_and_urls(gpuctl, monkeypatch, live_server):
    run = gpuctl(None, "jobs")
    assert run.code == 3 and "no API token" in one_line_error(run)
    monkeypatch.setenv("GPUCTL_TOKEN", "not-a-token")
    from gpuctl.main import main

    assert main(["jobs"]) == 3
    monkeypatch.delenv("GPUCTL_URL")
    assert main(["jobs"]) == 4
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert main(["--url", f"http://127.0.0.1:{closed}", "jobs"]) == 4
    assert main(["--url", f"{live_server.url}/nothing-here", "jobs"]) == 1
    assert main(["--url", "ftp://example.org", "jobs"]) == 2


def test_the_config_file_is_used_when_the_environment_is_empty(gpuctl, demo, monkeypatch, tmp_path,
                                                               live_server, capsys):  # fmt: skip
    from rest_framework.authtoken.models import Token

    from gpuctl.main import main

    token = Token.objects.create(user=demo["oncall"]).key
    config = tmp_path / "gpuctl.yaml"
    config.write_text(f"url: {live_server.url}\ntoken: {token}\n")
    monkeypatch.delenv("GPUCTL_URL")
    monkeypatch.delenv("GPUCTL_TOKEN", raising=False)
    monkeypatch.setenv("GPUCTL_CONFIG", str(config))
    capsys.readouterr()
    assert main(["alerts"]) == 0
    assert capsys.readouterr().err == "no open alerts\n"
